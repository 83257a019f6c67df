"""GPU placement: which free GPUs a job gets. Never branches on the scheduler that calls it.

A placement is an object with ``place(job, ctx) -> tuple[int, ...] | None`` (sorted GPU ids, or None
when the job cannot be placed now). ``ctx`` is a :class:`PlacementContext`: the view plus a working
copy of the free-GPU mask that the scheduler updates as it places jobs within one decision (both
are contracts, in :mod:`gpusched_env.placement`; the env's placement options use them too).

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
  callable (PAL's clustered factors, :mod:`gpusched.baselines.pal`); they are given as integer *levels*
  (rank of the factor among the distinct factors of the class), so equal factors compare equal.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from gpusched_env.placement import GpuSet, PlacementContext
from gpusched_env.types import Job
from gpusched_env.view import ClusterView


def _as_set(a: np.ndarray) -> GpuSet:
    return tuple(sorted(a.tolist()))


def node_slices(idx: np.ndarray, node_first: np.ndarray) -> np.ndarray:
    """Positions in the sorted GPU-id array ``idx`` where each node starts: node k is
    ``idx[pos[k]:pos[k+1]]`` (GPU ids of a node are contiguous)."""
    return np.searchsorted(idx, node_first)


def packed_gpus(eligible: np.ndarray, n: int, node_first: np.ndarray) -> GpuSet | None:
    """Packed placement (CALIBRATION.md definition) over the eligible mask; None if < n eligible.
    One compiled call (:func:`gpusched.baselines.placement_kernel.packed_k`) when ``node_first``
    spans the mask's GPUs (0 .. its size), else :func:`packed_gpus_numpy`: the same GPUs. The
    layout check is made once per ``node_first`` array and mask size (:data:`_LAYOUT`)."""
    size = eligible.size
    if eligible.dtype is not _BOOL:
        return packed_gpus_numpy(eligible, n, node_first)
    if _LAYOUT[0] is not node_first or _LAYOUT[1] != size:
        if node_first.size < 2 or node_first[0] != 0 or node_first[-1] != size:
            return packed_gpus_numpy(eligible, n, node_first)
        _LAYOUT[0], _LAYOUT[1] = node_first, size
    packed_k = _KERNEL[0]
    if packed_k is None:  # numba: loaded by the first placement
        from gpusched.baselines.placement_kernel import packed_k

        _KERNEL[0] = packed_k
    out = _empty(n if n > 0 else 0, _INT64)
    got = packed_k(eligible, n, node_first, out)
    return None if got < 0 else tuple(out.tolist())


_BOOL, _INT64, _empty = np.dtype(np.bool_), np.dtype(np.int64), np.empty
_LAYOUT: list[Any] = [None, -1]
"""The last ``node_first`` array and mask size :func:`packed_gpus` found to span the mask (the
arrays are never changed in place)."""
_KERNEL: list[Any] = [None]
"""The compiled packed placement, once imported (an import statement per call costs ~1 us)."""


def packed_gpus_numpy(eligible: np.ndarray, n: int, node_first: np.ndarray) -> GpuSet | None:
    """The packed placement in numpy: the definition the compiled call transcribes."""
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
        out.extend(idx[pos[k] : pos[k] + take].tolist())
        if len(out) == n:
            break
    return tuple(sorted(out))


MEMO_MAX = 4096
"""choice: results a deterministic placement remembers by input (a few MB of masks)."""


class PackedPlacement:
    """Packed (consolidated) placement; see :func:`packed_gpus`.

    A pure function of the GPU count, the eligible mask and the node layout, so the last
    :data:`MEMO_MAX` results are remembered by (count, mask) for the current layout (the same free
    GPUs recur: a preemptive round frees and fills the same GPUs again and again)."""

    deterministic = True

    def __init__(self) -> None:
        self._memo: dict[tuple[int, bytes], GpuSet | None] = {}
        self._memo_of: np.ndarray | None = None  # the node layout (node_first) of the memo

    def place(self, job: Job, ctx: PlacementContext) -> GpuSet | None:
        eligible = ctx.eligible(job)
        memo = self._memo
        if self._memo_of is not ctx.node_first:
            memo.clear()
            self._memo_of = ctx.node_first
        key = (job.num_gpus, eligible.tobytes())
        if key in memo:
            return memo[key]
        gpus = packed_gpus(eligible, job.num_gpus, ctx.node_first)
        if len(memo) >= MEMO_MAX:
            memo.clear()
        memo[key] = gpus
        return gpus


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
    key = lv * (cand.size + n + 1) + score  # (level, score) as one integer (score <= cand.size + n)
    if n == 1:
        return (int(cand[int(np.argmin(key))]),)  # the first minimum: the lowest id on ties
    return _as_set(cand[np.argsort(key, kind="stable")[:n]])  # stable: ids ascending on ties


class PMFirstPlacement:
    """PM-First with per-class slowdown levels from ``levels_of(view)`` -> (n_gpus, 4) int array.

    :meth:`place` runs the compiled transcription of :func:`pm_first_gpus`
    (:func:`gpusched.baselines.pal_kernel.pm_first_k`, the same GPUs: integer comparisons only) on
    the levels as per-class contiguous rows, made once per levels array (``levels_of`` returns the
    same array while the factors stay the same; the array is not changed in place)."""

    deterministic = True

    def __init__(self, levels_of: Callable[[ClusterView], np.ndarray]) -> None:
        self.levels_of = levels_of
        # (levels, gpu_node) the rows were made from; levels by class (4, n_gpus) int64 or None
        # (not non-negative integers: the numpy rule), number of levels, nodes, gpu_node as int64
        self._rows: tuple[np.ndarray, np.ndarray, np.ndarray | None, int, int, np.ndarray] | None = None

    def _level_rows(self, levels: np.ndarray, gpu_node: np.ndarray) -> tuple[np.ndarray | None, int, int, np.ndarray]:
        rows = self._rows
        if rows is None or rows[0] is not levels or rows[1] is not gpu_node:
            ok = levels.dtype.kind in "iu" and levels.size > 0 and int(levels.min()) >= 0
            by_class = np.ascontiguousarray(levels.T, dtype=np.int64) if ok else None
            n_levels = int(levels.max()) + 1 if ok else 0
            rows = self._rows = (levels, gpu_node, by_class, n_levels, int(gpu_node.max()) + 1,
                                 np.ascontiguousarray(gpu_node, dtype=np.int64))
        return rows[2:]

    def place(self, job: Job, ctx: PlacementContext) -> GpuSet | None:
        levels = self.levels_of(ctx.view)
        by_class, n_levels, n_nodes, gpu_node = self._level_rows(levels, ctx.gpu_node)
        cand = ctx.eligible(job).nonzero()[0]  # = np.flatnonzero (1-D), one C call
        n = job.num_gpus
        if by_class is None:
            return pm_first_gpus(cand, n, levels[:, job.class_index], ctx.gpu_node)
        if cand.size < n:
            return None
        from gpusched.baselines.pal_kernel import pm_first_k  # numba: loaded by the first placement

        out = np.empty(n, dtype=np.int64)
        got = pm_first_k(cand, n, by_class[job.class_index], gpu_node, n_nodes, n_levels, out)
        return tuple(out.tolist()) if got >= 0 else None
