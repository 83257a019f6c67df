"""FIFO with co-location when the cluster is full: ``gandiva`` and EaCO's ``fifo_packed`` baseline.

Both are event-driven, FIFO (arrival order) and head-of-line by default (the walk stops at the first
job that cannot be placed at all; ``head_of_line=False`` lets later jobs through). A job is first
placed *exclusively* with the packed placement (:func:`gpusched.baselines.placement.packed_gpus`) on free
GPUs. Only when that fails ("out of space") it is packed onto GPUs that already hold jobs
(time-slicing co-location, the default ``Sharing``): the shareable GPUs are those that are up, of the job's
GPU type, hold fewer than ``max_jobs_per_gpu`` jobs and have at least the job's ``mem_gb`` free
(free GPUs qualify too and count as load 0). The two policies differ only in which shareable GPUs
they rank first (a key, not a branch on the name):

- ``gandiva`` (Xiao et al., OSDI'18, as EaCO uses it as a baseline): the *least* loaded GPUs first:
  fewest resident jobs, then lowest utilisation, then lowest id - spreading the interference.
  Simplification (documented): Gandiva's introspective migration/grow-shrink and its affinity to
  jobs of the same size are not modelled.
- ``fifo_packed`` (EaCO's "FIFO_packed": packs only when out of space): the *most* utilised GPUs
  that still fit first (highest utilisation, then most residents, then lowest id) - consolidating.

Utilisation is ``view.gpu_util`` when the backend reports it; if it reports all zeros while jobs run,
it is estimated as the sum of the resident jobs' catalogue utilisation (``ModelSpec.util``, 1.0 for
unknown models), clipped to 1. Placements made within one call update the working copies.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from gpusched.baselines.placement import packed_gpus
from gpusched_env.catalog import find_model
from gpusched_env.placement import PlacementContext
from gpusched_env.types import Decision, Start
from gpusched_env.view import ClusterView


def model_util(model: str) -> float:
    """Catalogue GPU utilisation of a model running alone; 1.0 when unknown."""
    spec = find_model(model)
    return spec.util if spec is not None else 1.0


def util_estimate(view: ClusterView) -> np.ndarray:
    """(n_gpus,) utilisation in [0, 1]: reported, or estimated from residents (module docstring)."""
    util = np.array(view.gpu_util, dtype=np.float64)
    busy = np.asarray(view.n_resident) > 0
    if busy.any() and not util[busy].any():
        for jid, alloc in view.running.items():
            util[list(alloc.gpus)] += model_util(view.job(jid).model)
        np.minimum(util, 1.0, out=util)
    return util


ShareRank = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]
"""(candidate GPU ids, n_resident[cand], util[cand]) -> candidate ids in preference order."""


def least_loaded(cand: np.ndarray, n_res: np.ndarray, util: np.ndarray) -> np.ndarray:
    return cand[np.lexsort((cand, util, n_res))]


def most_utilised(cand: np.ndarray, n_res: np.ndarray, util: np.ndarray) -> np.ndarray:
    return cand[np.lexsort((cand, -n_res, -util))]


class CoLocatingFifo:
    """FIFO, exclusive packed placement, co-location onto ranked shareable GPUs when out of space."""

    round_s: float | None = None
    events = True

    def __init__(self, name: str, share_rank: ShareRank, head_of_line: bool = True) -> None:
        self.name = name
        self.share_rank = share_rank
        self.head_of_line = head_of_line

    def decide(self, view: ClusterView) -> list[Decision]:
        pend = view.pending
        if not pend:
            return []
        up = np.asarray(view.up)
        n_res = np.array(view.n_resident, dtype=np.int64)
        mem_free = np.array(view.mem_free_gb, dtype=np.float64)
        max_jobs = view.max_jobs_per_gpu
        open_ = up & (n_res < max_jobs)
        if self.head_of_line and pend[0].num_gpus > int(np.count_nonzero(open_)):
            return []  # fast path: the head fits nowhere
        ctx = PlacementContext(view, up & (n_res == 0))
        util: np.ndarray | None = None
        out: list[Decision] = []
        for job in pend:
            n = job.num_gpus
            static = ctx.static_mask(job)
            elig_free = ctx.free if static is None else ctx.free & static
            gpus = packed_gpus(elig_free, n, ctx.node_first)
            if gpus is None:
                share = up & (n_res < max_jobs) & (mem_free >= job.mem_gb - 1e-9)
                if static is not None:
                    share &= static
                cand = np.flatnonzero(share)
                if cand.size >= n:
                    if util is None:
                        util = util_estimate(view)
                    ranked = self.share_rank(cand, n_res[cand], util[cand])
                    gpus = tuple(sorted(int(g) for g in ranked[:n]))
            if gpus is None:
                if self.head_of_line:
                    break
                continue
            idx = list(gpus)
            n_res[idx] += 1
            mem_free[idx] -= job.mem_gb
            ctx.take(gpus)
            if util is not None:
                util[idx] = np.minimum(1.0, util[idx] + model_util(job.model))
            out.append(Start(job.job_id, gpus))
        return out


def make_gandiva(head_of_line: bool = True) -> CoLocatingFifo:
    return CoLocatingFifo("gandiva", least_loaded, head_of_line)


def make_fifo_packed(head_of_line: bool = True) -> CoLocatingFifo:
    return CoLocatingFifo("fifo_packed", most_utilised, head_of_line)
