"""Shared helpers for the real-backend tests: a tiny scenario, a FIFO policy, process checks."""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest

from gpusched_env.types import Decision, Start
from gpusched_env.view import ClusterView
from real.config import ClusterConf, JobConf, RealScenario, WorkloadConf
from real.models import ModelSize

TINY = {
    "cnn": ModelSize(width=8, depth=1, batch=4, input=16),
    "encoder": ModelSize(width=16, depth=1, batch=4, input=16),
    "mlp": ModelSize(width=32, depth=1, batch=8, input=32),
}


class Fifo:
    """Exclusive FIFO: the oldest pending job that fits gets the lowest free devices."""

    name = "fifo_test"
    round_s = None
    events = True

    def __init__(self, sm_share: float = 1.0, pack: int = 1) -> None:
        self.sm_share = sm_share
        self.pack = pack  # jobs per device (shared placement when > 1)

    def decide(self, view: ClusterView) -> list[Decision]:
        out: list[Decision] = []
        load = list(view.n_resident)
        for job in view.pending:
            gpus = [g for g in range(view.n_gpus) if load[g] < self.pack]
            if len(gpus) < job.num_gpus:
                break
            pick = tuple(sorted(gpus, key=lambda g: load[g])[: job.num_gpus])
            for g in pick:
                load[g] += 1
            out.append(Start(job.job_id, pick, self.sm_share))
        return out


def tiny_scenario(jobs: list[tuple[float, str, int]], devices: int = 2) -> RealScenario:
    return RealScenario(
        name="tiny",
        cluster=ClusterConf(devices=devices, gpu_mem_gb=4.0, max_jobs_per_gpu=2),
        workload=WorkloadConf([JobConf(i, a, m, n, mem_gb=0.5) for i, (a, m, n) in enumerate(jobs)]),
        models=dict(TINY),
    )


def descendants() -> list[psutil.Process]:
    """Live (non-zombie) descendants of this test process."""
    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            if p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    d = tmp_path / "run"
    d.mkdir()
    return d
