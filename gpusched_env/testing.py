"""Small reference policies for tests and examples (the real heuristics live in ``baselines``)."""

from __future__ import annotations

import numpy as np

from gpusched_env.types import Decision, Start
from gpusched_env.view import ClusterView


class StrictFifo:
    """FIFO with head-of-line blocking, lowest free GPU ids first."""

    name = "test_fifo"
    round_s: float | None = None
    events = True

    def __init__(self, backfill: bool = False) -> None:
        self.backfill = backfill

    def decide(self, view: ClusterView) -> list[Decision]:
        free = np.flatnonzero(view.free).tolist()
        out: list[Decision] = []
        for job in view.pending:
            if job.num_gpus > len(free):
                if self.backfill:
                    continue
                break
            out.append(Start(job.job_id, tuple(free[: job.num_gpus])))
            free = free[job.num_gpus :]
        return out
