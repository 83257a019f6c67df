"""Placement options of the Gymnasium env: the GPU sets a learned policy may choose between.

Each option maps (job, working context) to a GPU set or None. The options are the placements the
heuristics make, so every heuristic's start decision is one of them:

=====================  ==========================================================================
name                   placement
=====================  ==========================================================================
``pal``                PAL's locality x variability choice (clustered factors, L x V order)
``pm_first``           PAL's PM-First (fastest clustered factor level first)
``packed``             packed / consolidated (packed_sticky, fifo, sjf, ...)
``spread``             first fit: the N lowest-id free GPUs, wherever they are
``least_interference`` co-location allowed: GPUs with the fewest resident jobs, then lowest
                       utilisation, then fastest for the job's class (Gandiva-style time-slicing;
                       on exclusive clusters, ``max_jobs_per_gpu = 1``: the N fastest free GPUs)
=====================  ==========================================================================

The exclusive options reuse the placement functions of :mod:`baselines` (one implementation, no
copy). This is the only place under ``gpusched_env`` that imports :mod:`baselines`: the env is a
consumer layer above the simulator (the simulator itself never imports a policy), and placement
helpers are the env's action vocabulary, not a scheduling policy.

Validity: every exclusive option succeeds exactly when the job has at least N eligible free GPUs
(PAL's last L x V entry and PM-First fall back to all eligible GPUs), so the action mask needs only
counts; ``least_interference`` succeeds when N GPUs have a free job slot and enough memory.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from baselines.pal import make_pal, make_pm_first
from baselines.placement import GpuSet, PackedPlacement, Placement, PlacementContext, SpreadPlacement
from gpusched_env.types import Job

OPTION_NAMES: tuple[str, ...] = ("pal", "pm_first", "packed", "spread", "least_interference")
EXCLUSIVE: frozenset[str] = frozenset({"pal", "pm_first", "packed", "spread"})


class WorkingState:
    """The cluster as the decisions taken so far in this decision point leave it.

    ``ctx.free`` (exclusive placements), ``n_res`` and ``mem_used`` are working copies of the view's
    arrays, updated by :meth:`take`.
    """

    __slots__ = ("ctx", "n_res", "mem_used", "mem_cap", "up", "max_jobs", "util", "slowdown")

    def __init__(self, ctx: PlacementContext) -> None:
        view = ctx.view
        self.ctx = ctx
        self.n_res = view.n_resident.copy()
        self.mem_cap = view.topology.gpu_mem_gb
        self.mem_used = view.mem_used_gb.copy()
        self.up = view.up
        self.max_jobs = view.max_jobs_per_gpu
        self.util = view.gpu_util
        self.slowdown = view.slowdown

    def take(self, job: Job, gpus: GpuSet) -> None:
        self.ctx.take(gpus)
        n_res, mem_used, mem = self.n_res, self.mem_used, job.mem_gb
        for g in gpus:  # scalar updates: cheaper than fancy indexing for a few GPUs
            n_res[g] += 1
            mem_used[g] += mem

    def shareable(self, job: Job) -> np.ndarray:
        """(n_gpus,) bool: GPUs with a free job slot and memory for ``job`` (type respected)."""
        m = self.up & (self.n_res < self.max_jobs) & (self.mem_used + job.mem_gb <= self.mem_cap + 1e-9)
        if job.gpu_type is not None:
            m &= self.ctx.type_mask(job.gpu_type)
        return m


def _least_interference(job: Job, ws: WorkingState) -> GpuSet | None:
    cand = np.flatnonzero(ws.shareable(job))
    if cand.size < job.num_gpus:
        return None
    order = np.lexsort((cand, ws.slowdown[cand, job.class_index], ws.util[cand], ws.n_res[cand]))
    return tuple(sorted(int(g) for g in cand[order[: job.num_gpus]]))


class OptionSet:
    """The env's placement options, in action order (``names``)."""

    def __init__(self, names: tuple[str, ...] | list[str] = OPTION_NAMES, pal: dict[str, Any] | None = None) -> None:
        names = tuple(names)
        unknown = [n for n in names if n not in OPTION_NAMES]
        if unknown or not names or len(set(names)) != len(names):
            raise ValueError(f"placement options must be distinct names from {OPTION_NAMES}, got {names}")
        self.names = names
        pal = dict(pal or {})
        table: dict[str, Placement] = {
            "pal": make_pal(**pal).placement,
            "pm_first": make_pm_first(**{k: v for k, v in pal.items() if k in ("k1", "outlier_sigma")}).placement,
            "packed": PackedPlacement(),
            "spread": SpreadPlacement(),
        }
        self._placements: list[Placement | None] = [table.get(n) for n in names]
        self.exclusive = np.array([n in EXCLUSIVE for n in names], dtype=bool)
        self.all_exclusive = bool(self.exclusive.all())
        self.any_exclusive = bool(self.exclusive.any())

    def __len__(self) -> int:
        return len(self.names)

    def place(self, i: int, job: Job, ws: WorkingState) -> GpuSet | None:
        p = self._placements[i]
        if p is None:
            return _least_interference(job, ws)
        return p.place(job, ws.ctx)
