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
``consolidate``        co-location allowed, consolidating (EaCO's candidate order; not in the
                       default set): among the GPUs that hold jobs, none of high priority, with
                       utilisation below :data:`CONSOLIDATE_UTIL_MAX`, EaCO's first candidate set
                       (the N most utilised overall, or on one node, or a running N-GPU job's
                       GPUs: highest mean utilisation, then fewest nodes, then ids); when fewer
                       than N such GPUs exist, free GPUs on the nodes holding the most jobs,
                       then the other shared GPUs, most utilised first (then lowest id)
=====================  ==========================================================================

The default set (:data:`OPTION_NAMES`) is the first five; :data:`ALL_OPTION_NAMES` adds
``consolidate``, selected by naming it in ``options`` (e.g. ``conf/env/cluster_energy.yaml``).

The exclusive options are the heuristics' own placements (one implementation, no copy), injected:
the env never imports a policy. :data:`DEFAULT_PLACEMENTS` names the factory that builds them
(``gpusched.baselines.env_options:exclusive_placements``); it is resolved when an env is built, and an env
given ``placements=`` (a factory or its dotted path) uses another vocabulary. ``least_interference``
and ``consolidate`` are the env's own.

Validity: every exclusive option succeeds exactly when the job has at least N eligible free GPUs
(PAL's last L x V entry and PM-First fall back to all eligible GPUs), so the action mask needs only
counts; ``least_interference`` and ``consolidate`` succeed when N GPUs have a free job slot and
enough memory (the same GPUs, in another order).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from gpusched_env.catalog import find_model
from gpusched_env.envs.kernels import least_interference_k, take_k
from gpusched_env.placement import GpuSet, Placement, PlacementContext
from gpusched_env.scenario import Scenario
from gpusched_env.types import Job

OPTION_NAMES: tuple[str, ...] = ("pal", "pm_first", "packed", "spread", "least_interference")
"""The default placement options (every env's ``options`` default)."""
ALL_OPTION_NAMES: tuple[str, ...] = (*OPTION_NAMES, "consolidate")
"""Every option an env may be given."""
CONSOLIDATE_UTIL_MAX = 0.8
"""``consolidate`` co-locates first onto GPUs whose utilisation (measured at the decision point, plus
the catalogue utilisation of jobs started there in this batch) is below this: EaCO's ``util_thr``
default (gpusched/baselines/eaco.py; a choice there, the paper does not publish it)."""
EXCLUSIVE: frozenset[str] = frozenset({"pal", "pm_first", "packed", "spread"})
DEFAULT_PLACEMENTS = "gpusched.baselines.env_options:exclusive_placements"
SCALAR_GPUS = 2
"""choice: GPU sets up to this size are updated one scalar at a time, larger ones by one compiled call
(:func:`~gpusched_env.envs.kernels.take_k`: about 3 us for any size, against about 2 us for one GPU
and 5-20 us for 4-16 GPUs one scalar at a time or by fancy indexing, measured here)."""
MASK_MEMO_MAX = 4096
"""choice: window fit patterns whose mask entries (and whole masks, per window size and "done") an
:class:`OptionSet` remembers."""

PlacementFactory = Callable[[dict[str, Any]], Mapping[str, Placement]]
"""``factory(pal_params) -> {option name: placement}`` for the exclusive options."""


def pal_params(scn: Scenario, pal: dict[str, Any] | None = None, workload: int = 0) -> dict[str, Any]:
    """PAL's placement parameters in ``scn`` (``pal`` overrides the scenario's ``policies.pal``),
    planning with the locality penalty workload number ``workload``'s model charges (as the bench
    gives the ``pal`` policy)."""
    params = dict(scn.policies.get("pal", {})) if pal is None else dict(pal)
    params.pop("round_s", None)
    locality = scn.model_for(workload).locality
    if locality.mode == "constant":
        params.setdefault("lf", locality.lf)
    return params


def resolve_placements(factory: str | PlacementFactory) -> PlacementFactory:
    """A placement factory, or the one a ``"module:function"`` path names (ValueError if none)."""
    if not isinstance(factory, str):
        return factory
    module, _, attr = factory.partition(":")
    try:
        found = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"placements: cannot load {factory!r} (expected 'module:function'): {e}") from e
    return found  # type: ignore[no-any-return]


class WorkingState:
    """The cluster as the decisions taken so far in this decision point leave it.

    ``ctx.free`` (exclusive placements), ``n_res`` and ``mem_used`` are working copies of the view's
    arrays, updated by :meth:`take`; ``mem_used`` (read by the shared placements only) is copied on
    first read, with the scalar starts before it added then, in their order (the same IEEE sums);
    ``util`` is the view's (measured at the decision point) and ``added_util`` the catalogue
    utilisation of the jobs started since (read by ``consolidate``; summed on first read, in the order
    of the starts, then kept up to date).
    """

    __slots__ = ("ctx", "n_res", "_mem", "_mem_taken", "mem_cap", "up", "max_jobs", "util", "slowdown", "_added",
                 "_taken", "_hp", "_src")

    def __init__(self, ctx: PlacementContext) -> None:
        view = ctx.view
        self.ctx = ctx
        self.n_res = view.n_resident.copy()
        self.mem_cap = view.topology.gpu_mem_gb
        self._mem: np.ndarray | None = None  # mem_used, copied from the view on first read
        self._mem_taken: list[tuple[float, GpuSet]] = []  # starts before that read: (GB, GPUs)
        self.up = view.up
        self.max_jobs = view.max_jobs_per_gpu
        self.util = view.gpu_util
        self.slowdown = view.slowdown
        self._added: np.ndarray | None = None
        self._taken: list[tuple[Job, GpuSet]] = []  # starts not yet in _added
        self._hp: np.ndarray | None = None
        self._src = (view.free, view.n_resident)  # (read-only views of the live state: for reset)

    def reset(self) -> None:
        """Made anew from the view's current state, as ``WorkingState(PlacementContext(view))`` makes
        it (the free mask and job counts copied again, the starts forgotten), in the same objects.
        For a context made without a ``free`` argument (the view's free GPUs)."""
        free, n_res = self._src
        self.ctx.free[:] = free
        self.n_res[:] = n_res
        self._mem = None
        self._mem_taken.clear()
        self._added = None
        self._taken.clear()
        self._hp = None

    def take(self, job: Job, gpus: GpuSet) -> int:
        """Start ``job`` on ``gpus`` in the working state; return how many of them were free."""
        free, n_res, mem_used, mem = self.ctx.free, self.n_res, self._mem, job.mem_gb
        n = len(gpus)
        if n > SCALAR_GPUS:  # one compiled call
            if mem_used is None:
                mem_used = self.mem_used
            was_free = int(take_k(free, n_res, mem_used, np.array(gpus, dtype=np.intp), float(mem)))
        else:  # scalar updates: cheaper than a call for one or two GPUs
            was_free = 0
            for g in gpus:
                if free[g]:
                    was_free += 1
                    free[g] = False
                n_res[g] += 1
            if mem_used is None:
                self._mem_taken.append((mem, gpus))
            else:
                for g in gpus:
                    mem_used[g] += mem
        self._taken.append((job, gpus))
        if self._added is not None:
            self._add_util()
        if job.priority > 0 and self._hp is not None:
            self._hp[list(gpus)] = True
        return was_free

    @property
    def mem_used(self) -> np.ndarray:
        """(n_gpus,) memory held per GPU, the starts taken so far included (made on first read)."""
        m = self._mem
        if m is None:
            m = self._mem = self.ctx.view.mem_used_gb.copy()
            for mem, gpus in self._mem_taken:
                for g in gpus:
                    m[g] += mem
            self._mem_taken.clear()
        return m

    @property
    def added_util(self) -> np.ndarray:
        """(n_gpus,) catalogue utilisation of the jobs started in this batch, per GPU."""
        if self._added is None:
            self._added = np.zeros(self.n_res.size)
            self._add_util()
        return self._added

    def _add_util(self) -> None:
        added = self._added
        assert added is not None
        for job, gpus in self._taken:
            u = job_util(job)
            for g in gpus:
                added[g] += u
        self._taken.clear()

    @property
    def high_priority(self) -> np.ndarray:
        """(n_gpus,) bool: GPUs holding a high-priority job (``priority > 0``), made on first use."""
        if self._hp is None:
            view = self.ctx.view
            hp = np.zeros(self.n_res.size, dtype=bool)
            for jid, alloc in view.running.items():
                if view.job(jid).priority > 0:
                    hp[list(alloc.gpus)] = True
            self._hp = hp
        return self._hp

    def shareable(self, job: Job) -> np.ndarray:
        """(n_gpus,) bool: GPUs with a free job slot and memory for ``job`` (type respected)."""
        m = self.up & (self.n_res < self.max_jobs) & (self.mem_used + job.mem_gb <= self.mem_cap + 1e-9)
        if job.gpu_type is not None:
            m &= self.ctx.type_mask(job.gpu_type)
        return m


_EVERY_GPU: dict[int, np.ndarray] = {}  # read-only all-True masks by GPU count (no type constraint)


def _least_interference(job: Job, ws: WorkingState) -> GpuSet | None:
    """The GPUs with the fewest resident jobs, then lowest utilisation, then fastest for the job's
    class (then lowest id), among those :meth:`WorkingState.shareable` for it: one compiled call
    (:func:`~gpusched_env.envs.kernels.least_interference_k`), the numpy rule when it meets a NaN."""
    n = job.num_gpus
    if job.gpu_type is not None:
        allowed = ws.ctx.type_mask(job.gpu_type)
    else:
        size = ws.n_res.size
        every = _EVERY_GPU.get(size)
        if every is None:
            every = _EVERY_GPU[size] = np.ones(size, dtype=bool)
            every.flags.writeable = False
        allowed = every
    out = np.empty(n, dtype=np.int64)
    got = least_interference_k(ws.up, ws.n_res, ws.max_jobs, ws.mem_used, float(job.mem_gb), ws.mem_cap, allowed,
                               ws.util, ws.slowdown, job.class_index, n, out)
    if got >= 0:
        return tuple(out.tolist())
    if got == -1:
        return None
    return least_interference_numpy(job, ws)


def least_interference_numpy(job: Job, ws: WorkingState) -> GpuSet | None:
    """``least_interference`` in numpy: the definition the compiled call transcribes."""
    cand = np.flatnonzero(ws.shareable(job))
    if cand.size < job.num_gpus:
        return None
    order = np.lexsort((cand, ws.slowdown[cand, job.class_index], ws.util[cand], ws.n_res[cand]))
    return tuple(sorted(cand[order[: job.num_gpus]].tolist()))


def job_util(job: Job) -> float:
    """The GPU utilisation of ``job``'s model running alone (catalogue); 1.0 for an unknown model."""
    spec = find_model(job.model)
    return spec.util if spec is not None else 1.0


def _consolidate(job: Job, ws: WorkingState) -> GpuSet | None:
    cand = np.flatnonzero(ws.shareable(job))
    n = job.num_gpus
    if cand.size < n:
        return None
    util = np.asarray(ws.util) + ws.added_util
    shared = ws.n_res > 0
    joinable = np.zeros(util.size, dtype=bool)
    joinable[cand] = True
    joinable &= shared & (util < CONSOLIDATE_UTIL_MAX) & ~ws.high_priority
    node = ws.ctx.view.topology.gpu_node
    idx = np.flatnonzero(joinable)
    if idx.size >= n:  # EaCO's candidate sets, most utilised first, then fewer nodes, then ids
        by_util = idx[np.lexsort((idx, -util[idx]))]
        sets = {tuple(sorted(int(g) for g in by_util[:n]))}
        for k in np.unique(node[idx]).tolist():
            on_k = by_util[node[by_util] == k]
            if on_k.size >= n:
                sets.add(tuple(sorted(int(g) for g in on_k[:n])))
        for alloc in ws.ctx.view.running.values():
            if len(alloc.gpus) == n and bool(joinable[list(alloc.gpus)].all()):
                sets.add(tuple(sorted(alloc.gpus)))
        return min(sets, key=lambda t: (-float(util[list(t)].mean()), np.unique(node[list(t)]).size, t))
    node_jobs = np.bincount(node, weights=ws.n_res, minlength=int(node.max()) + 1)[node[cand]]
    busy = shared[cand]  # free GPUs on the nodes holding the most jobs, then the other shared GPUs
    order = np.lexsort((cand, -util[cand], np.where(busy, 0.0, -node_jobs), busy))
    return tuple(sorted(int(g) for g in cand[order[:n]]))


_SHARED = {"least_interference": _least_interference, "consolidate": _consolidate}


class OptionSet:
    """The env's placement options, in action order (``names``)."""

    def __init__(
        self, names: tuple[str, ...] | list[str] = OPTION_NAMES, pal: dict[str, Any] | None = None,
        placements: str | PlacementFactory = DEFAULT_PLACEMENTS,
    ) -> None:
        names = tuple(names)
        unknown = [n for n in names if n not in ALL_OPTION_NAMES]
        if unknown or not names or len(set(names)) != len(names):
            raise ValueError(f"placement options must be distinct names from {ALL_OPTION_NAMES}, got {names}")
        self.names = names
        table = resolve_placements(placements)(dict(pal or {}))
        missing = [n for n in names if n in EXCLUSIVE and n not in table]
        if missing:
            raise ValueError(f"placements: the factory gives no placement for option(s) {missing}")
        self._placements: list[Placement | None] = [table.get(n) for n in names]
        self._shared = [_SHARED.get(n) for n in names]
        self.exclusive = np.array([n in EXCLUSIVE for n in names], dtype=bool)
        self.all_exclusive = bool(self.exclusive.all())
        self.any_exclusive = bool(self.exclusive.any())
        excl = self.exclusive.tolist()
        self.fit_bits: tuple[int, ...] = tuple(1 if x else 2 for x in excl)  # the fit-code bit of each option
        self.mask_rows: dict[tuple[bool, bool], bytes] = {  # one window slot's mask entries, by
            (e, s): bytes([e if x else s for x in excl]) for e in (False, True) for s in (False, True)
        }  # (fits an exclusive option, fits a shared one)
        self._by_code = [self.mask_rows[bool(c & 1), bool(c & 2)] for c in range(4)]
        self._bodies: dict[bytes, bytes] = {}  # mask_body by its codes (a window's patterns recur)
        self._masks: dict[int, tuple[dict[bytes, np.ndarray], dict[bytes, np.ndarray]]] = {}  # mask_memo

    def mask_body(self, codes: bytes) -> bytes:
        """The mask entries of a window whose slot ``s`` has fit code ``codes[s]`` (bit 0: an
        exclusive option fits, bit 1: a shared one): its slots' ``mask_rows`` one after another."""
        body = self._bodies.get(codes)
        if body is None:
            if len(self._bodies) >= MASK_MEMO_MAX:
                self._bodies.clear()
            by_code = self._by_code
            body = self._bodies[codes] = b"".join([by_code[c] for c in codes])
        return body

    def mask_memo(self, k: int) -> tuple[dict[bytes, np.ndarray], dict[bytes, np.ndarray]]:
        """Whole masks of a ``k``-slot window by fit codes, "done" invalid then valid: one pair of
        dicts per window size, kept with the options (a builder copies its mask out of them)."""
        memo = self._masks.get(k)
        if memo is None:
            memo = self._masks[k] = ({}, {})
        return memo

    def __len__(self) -> int:
        return len(self.names)

    def place(self, i: int, job: Job, ws: WorkingState) -> GpuSet | None:
        p = self._placements[i]
        if p is None:
            shared = self._shared[i]
            assert shared is not None
            return shared(job, ws)
        return p.place(job, ws.ctx)
