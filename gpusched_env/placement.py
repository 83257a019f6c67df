"""The placement vocabulary shared by policies and the env: a working context over a view and the
``Placement`` protocol (``place(job, ctx) -> GpuSet | None``). Placement *choices* live in
:mod:`gpusched.baselines.placement`; this module only says what a placement receives and returns.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from gpusched_env.types import Job
from gpusched_env.view import ClusterView

GpuSet = tuple[int, ...]
_BOOL = np.dtype(bool)


class PlacementContext:
    """The view plus a mutable working free mask for one ``decide`` call.

    ``free`` starts as ``view.free`` (or what the caller passes, e.g. with released jobs' GPUs added)
    and is updated with :meth:`take` / :meth:`give` as the scheduler places jobs.
    """

    __slots__ = ("view", "free", "gpu_node", "node_first", "gpu_mem", "_min_mem", "_type_masks")

    def __init__(self, view: ClusterView, free: np.ndarray | None = None) -> None:
        topo = view.topology
        self.view = view
        f = view.free if free is None else free
        # a copy; of a bool array, copy() is np.array(f, dtype=bool) and cheaper
        self.free = f.copy() if type(f) is np.ndarray and f.dtype is _BOOL else np.array(f, dtype=bool)
        self.gpu_node = topo.gpu_node
        self.node_first = topo.node_first_gpu
        self.gpu_mem = topo.gpu_mem_gb
        self._min_mem = topo.min_gpu_mem_gb
        self._type_masks: dict[str, np.ndarray] = {}

    def type_mask(self, gpu_type: str) -> np.ndarray:
        m = self._type_masks.get(gpu_type)
        if m is None:
            topo = self.view.topology
            if gpu_type in topo.gpu_types:
                m = topo.gpu_type_idx == topo.gpu_types.index(gpu_type)
            else:
                m = np.zeros(topo.n_gpus, dtype=bool)
            self._type_masks[gpu_type] = m
        return m

    def static_mask(self, job: Job) -> np.ndarray | None:
        """GPUs the job may ever use (type, memory), or None when every GPU qualifies."""
        m: np.ndarray | None = None
        if job.gpu_type is not None:
            m = self.type_mask(job.gpu_type)
        if job.mem_gb > self._min_mem:
            mm = self.gpu_mem >= job.mem_gb
            m = mm if m is None else (m & mm)
        return m

    def eligible(self, job: Job) -> np.ndarray:
        """(n_gpus,) bool: free GPUs this job may use."""
        m = self.static_mask(job)
        return self.free if m is None else (self.free & m)

    def n_eligible(self, job: Job) -> int:
        return int(np.count_nonzero(self.eligible(job)))

    def take(self, gpus: GpuSet) -> None:
        free = self.free
        for g in gpus:  # scalar writes: cheaper than fancy indexing for a few GPUs
            free[g] = False

    def give(self, gpus: GpuSet) -> None:
        free = self.free
        for g in gpus:
            free[g] = True


class Placement(Protocol):
    """Chooses GPUs for one job from the context's eligible GPUs.

    A placement may set ``deterministic = True`` when ``place`` is a pure function of the job and
    the context (same inputs, same GPUs); schedulers then skip rounds in which nothing changed.
    """

    def place(self, job: Job, ctx: PlacementContext) -> GpuSet | None: ...
