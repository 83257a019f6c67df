"""GPU placement: which free GPUs a job gets. Never branches on the scheduler that calls it.

A placement is an object with ``place(job, ctx) -> tuple[int, ...] | None`` (sorted GPU ids, or None
when the job cannot be placed now). ``ctx`` is a :class:`PlacementContext`: the view plus a working
copy of the free-GPU mask that the scheduler updates as it places jobs within one decision.

Placements here are exclusive (whole free GPUs). A GPU is *eligible* for a job when it is free
(up, no resident job), of the job's ``gpu_type`` if it names one, and has at least ``mem_gb``.

- :class:`PackedPlacement` — CALIBRATION.md / PAL artifact ``placement/packing_*.py``: the first
  node (lowest id) with exactly N eligible GPUs (all of them); else the node with the fewest
  eligible GPUs among those with >= N (lowest id on ties), its N lowest-id GPUs; else spread greedily
  over the nodes with the most eligible GPUs (ties: lowest node id), lowest-id GPUs of each.
- :class:`RandomPlacement` — N eligible GPUs drawn uniformly without replacement from the passed-in
  ``numpy.random.Generator`` (the artifact uses ``random.sample`` on the free list).
- :class:`SpreadPlacement` — the N lowest-id eligible GPUs, ignoring nodes (first-fit).
- :class:`PMFirstPlacement` — PAL's PM-First: sort eligible GPUs by (slowdown factor, |eligible
  GPUs on that node with the same factor - N|, GPU id), take the first N. The factors come from a
  callable (PAL's clustered factors, :mod:`baselines.pal`); they are given as integer *levels*
  (rank of the factor among the distinct factors of the class), so equal factors compare equal.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np

from gpusched_env.types import Job
from gpusched_env.view import ClusterView

GpuSet = tuple[int, ...]


class PlacementContext:
    """The view plus a mutable working free mask for one ``decide`` call.

    ``free`` starts as ``view.free`` (or what the caller passes, e.g. with released jobs' GPUs added)
    and is updated with :meth:`take` / :meth:`give` as the scheduler places jobs.
    """

    __slots__ = ("view", "free", "gpu_node", "node_first", "gpu_mem", "_min_mem", "_type_masks")

    def __init__(self, view: ClusterView, free: np.ndarray | None = None) -> None:
        topo = view.topology
        self.view = view
        self.free = np.array(view.free if free is None else free, dtype=bool)
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


def _as_set(a: np.ndarray) -> GpuSet:
    return tuple(sorted(a.tolist()))


def node_slices(idx: np.ndarray, node_first: np.ndarray) -> np.ndarray:
    """Positions in the sorted GPU-id array ``idx`` where each node starts: node k is
    ``idx[pos[k]:pos[k+1]]`` (GPU ids of a node are contiguous)."""
    return np.searchsorted(idx, node_first)


def packed_gpus(eligible: np.ndarray, n: int, node_first: np.ndarray) -> GpuSet | None:
    """Packed placement (CALIBRATION.md definition) over the eligible mask; None if < n eligible."""
    idx = np.flatnonzero(eligible)
    if idx.size < n:
        return None
    if n == 1:  # the node with the fewest eligible GPUs (1 = "exactly N"), lowest ids on ties
        nodes = np.searchsorted(node_first, idx, side="right") - 1
        return (int(idx[np.argmin(np.bincount(nodes)[nodes])]),)
    pos = node_slices(idx, node_first)
    counts = np.diff(pos)
    exact = np.flatnonzero(counts == n)
    if exact.size:
        k = int(exact[0])
        return _as_set(idx[pos[k] : pos[k + 1]])
    bigger = np.flatnonzero(counts > n)
    if bigger.size:
        k = int(bigger[np.argmin(counts[bigger])])
        return _as_set(idx[pos[k] : pos[k] + n])
    out: list[int] = []
    for k in np.argsort(-counts, kind="stable"):
        c = int(counts[k])
        if c == 0:
            break
        take = min(c, n - len(out))
        out.extend(int(g) for g in idx[pos[k] : pos[k] + take])
        if len(out) == n:
            break
    return tuple(sorted(out))


class PackedPlacement:
    """Packed (consolidated) placement; see :func:`packed_gpus`."""

    deterministic = True

    def place(self, job: Job, ctx: PlacementContext) -> GpuSet | None:
        return packed_gpus(ctx.eligible(job), job.num_gpus, ctx.node_first)


class SpreadPlacement:
    """First fit: the N lowest-id eligible GPUs, wherever they are."""

    deterministic = True

    def place(self, job: Job, ctx: PlacementContext) -> GpuSet | None:
        idx = np.flatnonzero(ctx.eligible(job))
        if idx.size < job.num_gpus:
            return None
        return _as_set(idx[: job.num_gpus])


class RandomPlacement:
    """N eligible GPUs uniformly at random (without replacement) from the given generator."""

    deterministic = False  # draws from the generator at every call

    def __init__(self, rng: np.random.Generator) -> None:
        if not isinstance(rng, np.random.Generator):
            raise TypeError(
                "RandomPlacement needs rng: numpy.random.Generator (derive it from a SeedSequence)"
            )
        self.rng = rng

    def place(self, job: Job, ctx: PlacementContext) -> GpuSet | None:
        idx = np.flatnonzero(ctx.eligible(job))
        if idx.size < job.num_gpus:
            return None
        return _as_set(self.rng.choice(idx, size=job.num_gpus, replace=False))


def pm_first_gpus(cand: np.ndarray, n: int, level: np.ndarray, gpu_node: np.ndarray) -> GpuSet | None:
    """PM-First over the candidate GPU ids ``cand`` (sorted ascending).

    Sort by (level, |#candidates on the same node with the same level - n|, GPU id); take n.
    ``level`` is indexed by GPU id (n_gpus,) — smaller = faster.
    """
    if cand.size < n:
        return None
    lv = level[cand]
    nd = gpu_node[cand]
    group = nd.astype(np.int64) * (int(lv.max()) + 1) + lv
    score = np.abs(np.bincount(group)[group] - n)  # |candidates sharing the GPU's (node, level) - n|
    order = np.lexsort((cand, score, lv))
    return _as_set(cand[order[:n]])


class PMFirstPlacement:
    """PM-First with per-class slowdown levels from ``levels_of(view)`` -> (n_gpus, 4) int array."""

    deterministic = True

    def __init__(self, levels_of: Callable[[ClusterView], np.ndarray]) -> None:
        self.levels_of = levels_of

    def place(self, job: Job, ctx: PlacementContext) -> GpuSet | None:
        level = self.levels_of(ctx.view)[:, job.class_index]
        cand = np.flatnonzero(ctx.eligible(job))
        return pm_first_gpus(cand, job.num_gpus, level, ctx.gpu_node)
