"""Observation, action mask and action decoding of one decision point — shared by the env and the
agent adapter (:mod:`agents.adapter`), so a model sees exactly the same numbers in both.

A :class:`DecisionBuilder` wraps a read-only :class:`~gpusched_env.view.ClusterView` and the
decisions taken so far at this decision point (a working copy of free GPUs / job slots). ``observe``
returns ``(obs, mask)``; ``act(a)`` turns a valid action into a :class:`~gpusched_env.types.Start`.

Queue window (``K`` slots): the first ``fifo_slots`` pending jobs in arrival order, then the
pending jobs with the least work estimate (``work_iters`` x the model's base iteration time, oracle
knowledge as SJF) not already shown; jobs started in this batch leave the window. So both FIFO
heuristics (PAL, packed) and shortest-first ones (SJF) find their choice in the window, and a
policy may skip the head of the line (backfill).

Observation (float32, every entry finite and clipped to ``[-1, 10]``), concatenated:

- per node (n_nodes x 8): working free-GPU share, up share, mean slowdown factor of its free GPUs
  per class A..D (``sf - 1``, 0 when none is free), GPU power share of busy power, mean job slots
  used (``n_resident / max_jobs_per_gpu``);
- per window slot (K x 11): present, ``log2(1 + GPUs) / log2(1 + n_gpus)``, class one-hot (4),
  ``log1p(wait h)``, ``log1p(work estimate h)``, fits an exclusive option now, fits
  ``least_interference`` now, GPUs / working free GPUs (clipped);
- global (8): time of day (sin, cos), busy-GPU share, working free share, ``log1p(queue)/5``,
  ``log1p(running)/5``, queued GPU demand / n_gpus (clipped), ``log1p(starts in this batch)/3``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from baselines.ordering import base_iter_s
from baselines.placement import PlacementContext
from gpusched_env.envs.options import OptionSet, WorkingState
from gpusched_env.topology import Topology
from gpusched_env.types import Job, Start
from gpusched_env.view import ClusterView

NODE_FEATURES = 8
SLOT_FEATURES = 11
GLOBAL_FEATURES = 8
OBS_LOW, OBS_HIGH = -1.0, 10.0
_DAY_S = 86400.0


def obs_size(n_nodes: int, k: int) -> int:
    return n_nodes * NODE_FEATURES + k * SLOT_FEATURES + GLOBAL_FEATURES


class JobCache:
    """Static numbers kept across decision points of one run: per job (dense arrays by job id:
    work estimate in hours, GPUs, class, arrival, the static slot features), filled for the whole
    run at reset by the env (:meth:`fill`) or as jobs are first seen (:meth:`see`), and whether any
    known job constrains its GPUs (type or memory), which turns the exact fit check on."""

    def __init__(self) -> None:
        self._layout: _Layout | None = None
        self._arange = np.arange(0)
        self.clear()

    def clear(self) -> None:
        self.slot = np.zeros((0, SLOT_FEATURES))  # static slot features by job id (wait, fits: 0)
        self.work = np.full(0, np.nan)
        self.gpus = np.zeros(0, dtype=np.int64)
        self.cls = np.zeros(0, dtype=np.int64)
        self.arrival_h = np.zeros(0)
        self.mem = np.zeros(0)
        self.constrained = False
        self._seen: set[int] = set()

    def arange(self, k: int) -> np.ndarray:
        """``np.arange(k)`` (shared, read-only)."""
        a = self._arange
        if a.size != k:
            a = self._arange = np.arange(k)
            a.flags.writeable = False
        return a

    def layout(self, topo: Topology, max_jobs: int) -> _Layout:
        """The observation constants of ``topo`` (kept across runs on the same topology)."""
        lay = self._layout
        if lay is None or lay.topo is not topo or lay.max_jobs != max_jobs:
            lay = self._layout = _Layout(topo, max_jobs)
        return lay

    def _grow(self, top: int) -> None:
        size = max(top, 2 * self.work.size)
        for name, fill in (("work", np.nan), ("gpus", 0), ("cls", 0), ("arrival_h", 0.0), ("mem", 0.0)):
            old = getattr(self, name)
            grown = np.full(size, fill, dtype=old.dtype)
            grown[: old.size] = old
            setattr(self, name, grown)
        slot = np.zeros((size, SLOT_FEATURES))
        slot[: self.slot.shape[0]] = self.slot
        self.slot = slot

    def fill(self, jobs: Sequence[Job], topo: Topology) -> None:
        """Record the static numbers of ``jobs`` (one array operation per field; a run's whole
        job list at reset, or the jobs a view shows that are not known yet)."""
        if not jobs:
            return
        ids = np.fromiter((j.job_id for j in jobs), dtype=np.int64, count=len(jobs))
        top = int(ids.max()) + 1
        if top > self.work.size:
            self._grow(top)
        per_model: dict[str, float] = {}
        for j in jobs:
            if j.model not in per_model:
                per_model[j.model] = base_iter_s(j.model)
        gpus = np.fromiter((j.num_gpus for j in jobs), dtype=np.int64, count=len(jobs))
        cls = np.fromiter((j.class_index for j in jobs), dtype=np.int64, count=len(jobs))
        work = np.fromiter((j.work_iters * per_model[j.model] for j in jobs), dtype=np.float64, count=len(jobs))
        work /= 3600.0
        mem = np.fromiter((j.mem_gb for j in jobs), dtype=np.float64, count=len(jobs))
        self.work[ids] = work
        self.gpus[ids] = gpus
        self.cls[ids] = cls
        self.arrival_h[ids] = np.fromiter((j.arrival_s for j in jobs), dtype=np.float64, count=len(jobs)) / 3600.0
        self.mem[ids] = mem
        block = np.zeros((len(jobs), SLOT_FEATURES))
        block[:, 0] = 1.0
        block[:, 1] = np.log2(1.0 + gpus) / math.log2(1.0 + topo.n_gpus)
        block[np.arange(len(jobs)), 2 + cls] = 1.0
        block[:, 7] = np.log1p(work)
        block[:, 10] = gpus  # scaled by 1 / free GPUs when observed
        self.slot[ids] = block
        min_mem = float(topo.gpu_mem_gb.min())
        self.constrained |= bool((mem > min_mem).any()) or any(j.gpu_type is not None for j in jobs)
        self._seen.update(ids.tolist())

    def see(self, ids: Sequence[int], view: ClusterView) -> None:
        """Make sure the jobs ``ids`` (all in the view's system) are known."""
        if not self._seen.issuperset(ids):
            seen = self._seen
            self.fill([view.job(i) for i in ids if i not in seen], view.topology)


class _Layout:
    """Per-topology constants of the observation and scratch buffers (one per :class:`JobCache`).

    Per-node sums are products with the (n_nodes x n_gpus) membership matrix ``agg``: one BLAS
    call instead of a Python loop or a reshape per feature.
    """

    def __init__(self, topo: Topology, max_jobs: int) -> None:
        self.topo, self.max_jobs = topo, max_jobs
        self.n_nodes, self.n_gpus = topo.n_nodes, topo.n_gpus
        self.agg = (topo.gpu_node[None, :] == np.arange(topo.n_nodes)[:, None]).astype(np.float64)
        inv = 1.0 / topo.node_sizes.astype(np.float64)
        self.inv_size = inv
        self.scale3 = np.column_stack([inv, inv / 300.0, inv / max_jobs])  # up, power, job slots
        self.p3 = np.zeros((topo.n_gpus, 3))
        self.inv_size_l: list[float] = inv.tolist()
        self.size = topo.n_nodes * NODE_FEATURES


class DecisionBuilder:
    """Observation + mask + action decoding at one decision point (see the module docstring).

    Built at every candidate decision point, so it does little up front: the queue window, its fit
    checks, the mask and the observation are computed on demand and cached until the next action;
    the working copy of the cluster (:class:`WorkingState`) is made at the first action.
    """

    def __init__(
        self, view: ClusterView, options: OptionSet, k: int, fifo_slots: int, cache: JobCache
    ) -> None:
        self.view = view
        self.options = options
        self.k = k
        self.fifo_slots = min(fifo_slots, k)
        self.cache = cache
        self.topo = view.topology
        self._lay = cache.layout(self.topo, view.max_jobs_per_gpu)
        self._ws: WorkingState | None = None
        self._nodes: np.ndarray | None = None  # node features (see _node_block)
        self._node_sums: tuple[list[float], list[list[float]]] = ([], [])
        self._taken: list[tuple[int, bool]] = []  # (GPU, was free) of starts since _nodes
        self._slow_l: list[list[float]] | None = None
        self.decisions: list[Start] = []
        self._pending: Sequence[Job] = view.pending
        cache.see(view.pending_ids, view)
        ids = np.array(view.pending_ids, dtype=np.int64)
        self._ids = ids
        self._order: np.ndarray | None = None  # pending positions by work estimate (stable)
        self._alive: np.ndarray | None = None  # not started in this batch (made at the first start)
        self._arange = cache.arange(k)
        self._demand = float(view.pending_gpus)
        self.n_opts = len(options)
        self.done_action = k * self.n_opts
        self._simple = not cache.constrained
        self._need_sh = not options.all_exclusive
        self._n_free = int(np.count_nonzero(view.free))
        self._n_sh = self._count_shareable()
        self._refresh()

    # -- working state -----------------------------------------------------------------------
    @property
    def ws(self) -> WorkingState:
        """The cluster as the starts taken so far leave it (made on first use)."""
        if self._ws is None:
            self._ws = WorkingState(PlacementContext(self.view))
        return self._ws

    def _count_shareable(self) -> int:
        """GPUs with a free job slot (= free GPUs on exclusive clusters)."""
        if not self._need_sh:
            return 0
        if self.view.max_jobs_per_gpu == 1:
            return self._n_free
        if self._ws is None:
            view = self.view
            return int(np.count_nonzero(view.up & (view.n_resident < view.max_jobs_per_gpu)))
        ws = self._ws
        return int(np.count_nonzero(ws.up & (ws.n_res < ws.max_jobs)))

    # -- window ------------------------------------------------------------------------------
    def _refresh(self) -> None:
        """Recompute the window: the first ``fifo_slots`` jobs not started in this batch, then
        the ones with the least work among those after them."""
        ids = self._ids
        n, f, k = ids.size, self.fifo_slots, self.k
        if not self.decisions:  # fresh point: positions 0..f-1, then the least work after them
            if n <= f or f == k:
                win = self._arange[: min(n, k)]
            else:
                rest = np.argsort(self.cache.work[ids[f:]], kind="stable")[: k - f]
                rest += f
                win = np.concatenate([self._arange[:f], rest]) if f else rest
        else:
            alive = self._alive
            assert alive is not None
            fifo = np.flatnonzero(alive)[:f]
            win = fifo
            need = k - fifo.size
            if need > 0 and fifo.size == f and n > f:
                if self._order is None:
                    self._order = np.argsort(self.cache.work[ids], kind="stable")
                order = self._order
                cut = int(fifo[-1]) if fifo.size else -1
                rest = order[(order > cut) & alive[order]][:need]
                win = np.concatenate([fifo, rest]) if fifo.size else rest
        self._win = win
        self._win_ids = self._ids[win]
        self._fit: tuple[np.ndarray, np.ndarray] | None = None
        self._valid: bool | None = None
        self._mask: np.ndarray | None = None
        self._obs: np.ndarray | None = None

    @property
    def window(self) -> list[Job]:
        pend = self._pending
        return [pend[int(p)] for p in self._win]

    # -- mask --------------------------------------------------------------------------------
    def mask(self) -> np.ndarray:
        """(K x P + 1,) bool. The last entry ("done") is True except when the cluster would sit
        idle: nothing running, nothing started in this batch, and some start valid (work-conserving
        rule: a policy cannot stall a run by waiting forever on an empty cluster)."""
        if self._mask is not None:
            return self._mask
        p = self.n_opts
        m = np.zeros(self.k * p + 1, dtype=bool)
        ex_ok, sh_ok = self._fits()
        n = ex_ok.size
        if n:
            m[: n * p].reshape(n, p)[:] = np.where(self.options.exclusive, ex_ok[:, None], sh_ok[:, None])
        m[-1] = bool(self.decisions or len(self.view.running) or not m[:-1].any())
        self._mask = m
        return m

    def _fits(self) -> tuple[np.ndarray, np.ndarray]:
        """(fits an exclusive option, fits ``least_interference``) per window slot."""
        if self._fit is not None:
            return self._fit
        ids = self._win_ids
        sizes = self.cache.gpus[ids]
        if self._simple:
            ex = sizes <= self._n_free
            if self._need_sh and self.view.max_jobs_per_gpu == 1:
                sh = ex  # exclusive cluster, no job needs more memory than any GPU has: same test
            elif self._need_sh:
                sh = sizes <= self._n_sh
                mem = self.cache.mem[ids]
                for s in np.flatnonzero(sh & (mem != 0.0)).tolist():
                    sh[s] = int(np.count_nonzero(self.ws.shareable(self._pending[int(self._win[s])]))) >= sizes[s]
            else:
                sh = np.zeros(ids.size, dtype=bool)
        else:
            ws = self.ws
            ex = np.zeros(ids.size, dtype=bool)
            sh = np.zeros(ids.size, dtype=bool)
            for s, j in enumerate(self.window):
                ex[s] = ws.ctx.n_eligible(j) >= j.num_gpus
                if self._need_sh:
                    sh[s] = int(np.count_nonzero(ws.shareable(j))) >= j.num_gpus
        self._fit = (ex, sh)
        return self._fit

    def any_valid(self) -> bool:
        """Whether some start is valid now (the mask without "done" has a True)."""
        if self._valid is None:
            ex, sh = self._fits()
            if not self._need_sh:
                self._valid = bool(ex.any())
            else:
                self._valid = bool((self.options.any_exclusive and ex.any()) or sh.any())
        return self._valid

    # -- observation -------------------------------------------------------------------------
    def observe(self) -> np.ndarray:
        if self._obs is not None:
            return self._obs
        view, lay = self.view, self._lay
        ws = self._ws
        n_res = view.n_resident if ws is None else ws.n_res
        n_gpus, k = lay.n_gpus, self.k
        a = lay.size
        b = a + k * SLOT_FEATURES
        obs = np.empty(b + GLOBAL_FEATURES, dtype=np.float32)
        obs[:a] = self._node_block().ravel()

        ids = self._win_ids
        n = ids.size
        cache = self.cache
        n_free = self._n_free
        now = view.now
        slots = obs[a:b].reshape(k, SLOT_FEATURES)
        slots.fill(0.0)
        if n:
            ex_ok, sh_ok = self._fits()
            w = slots[:n]
            w[:] = cache.slot[ids]
            wait = now / 3600.0 - cache.arrival_h[ids]
            np.maximum(wait, 0.0, out=wait)
            w[:, 6] = np.log1p(wait, out=wait)
            w[:, 8] = ex_ok
            w[:, 9] = sh_ok
            w[:, 10] *= 1.0 / max(n_free, 1)  # the cached column holds the GPU count

        n_dec = len(self.decisions)
        tod = 2.0 * math.pi * (now % _DAY_S) / _DAY_S
        obs[b:] = (
            math.sin(tod), math.cos(tod), int(np.count_nonzero(n_res)) / n_gpus, n_free / n_gpus,
            math.log1p(self._ids.size - n_dec) / 5.0, math.log1p(len(view.running) + n_dec) / 5.0,
            self._demand / n_gpus, math.log1p(n_dec) / 3.0,
        )
        np.minimum(obs, OBS_HIGH, out=obs)  # +-inf land on the bounds
        np.maximum(obs, OBS_LOW, out=obs)
        if math.isnan(np.add.reduce(obs)):
            np.nan_to_num(obs, copy=False, nan=0.0)
        self._obs = obs
        return obs

    def _node_block(self) -> np.ndarray:
        """(n_nodes, 8) node features: free share, up share, mean (sf - 1) of the free GPUs per
        class (0 without free GPUs), power / 300 W, job slots used. Computed in full once per
        decision point; the starts taken since only update the rows of their nodes."""
        lay = self._lay
        if self._nodes is None:
            view = self.view
            free, n_res = (view.free, view.n_resident) if self._ws is None else (self._ws.ctx.free, self._ws.n_res)
            on_free = lay.agg * free
            n_free_node = on_free.sum(axis=1)
            slow_sum = on_free @ (view.slowdown - 1.0)
            p3 = lay.p3
            p3[:, 0] = view.up
            p3[:, 1] = view.gpu_power_w
            p3[:, 2] = n_res
            q = lay.agg @ p3
            q *= lay.scale3
            nodes = np.empty((lay.n_nodes, NODE_FEATURES))
            nodes[:, 0] = n_free_node * lay.inv_size
            nodes[:, 1] = q[:, 0]
            nodes[:, 2:6] = slow_sum / np.maximum(n_free_node, 1.0)[:, None]
            nodes[:, 6:8] = q[:, 1:3]
            self._nodes = nodes
            self._node_sums = (n_free_node.tolist(), slow_sum.tolist())
            self._taken.clear()
        elif self._taken:
            nodes = self._nodes
            n_free_node, slow_sum = self._node_sums
            node_of, inv = lay.topo.node_of_gpu, lay.inv_size_l
            slow = self._slow_m1()
            touched = set()
            for g, was_free in self._taken:
                node = node_of[g]
                touched.add(node)
                nodes[node, 7] += inv[node] / lay.max_jobs
                if was_free:
                    n_free_node[node] -= 1.0
                    row, sg = slow_sum[node], slow[g]
                    for c in range(4):
                        row[c] -= sg[c]
            for node in touched:
                nf = n_free_node[node]
                nodes[node, 0] = nf * inv[node]
                nodes[node, 2:6] = [x / nf for x in slow_sum[node]] if nf > 0.0 else 0.0
            self._taken.clear()
        return self._nodes

    def _slow_m1(self) -> list[list[float]]:
        """The view's slowdown profile minus 1, as nested lists (made once per decision point)."""
        if self._slow_l is None:
            self._slow_l = (self.view.slowdown - 1.0).tolist()
        return self._slow_l

    # -- actions -----------------------------------------------------------------------------
    def decode(self, action: int) -> tuple[int, int] | None:
        """(slot, option) of a placement action, or None for "done"."""
        if action == self.done_action:
            return None
        return divmod(int(action), self.n_opts)

    def act(self, action: int) -> Start | None:
        """Apply a valid placement action to the working state; None if it is not valid now."""
        if not 0 <= action < self.done_action or not self.mask()[action]:
            return None
        slot, opt = divmod(int(action), self.n_opts)
        pos = int(self._win[slot])
        job = self._pending[pos]
        ws = self.ws
        gpus = self.options.place(opt, job, ws)
        if gpus is None:  # cannot happen when the mask is right; stay safe
            return None
        free = ws.ctx.free
        taken = [(g, bool(free[g])) for g in gpus]
        self._n_free -= sum(1 for _, f in taken if f)
        self._taken.extend(taken)
        ws.take(job, gpus)
        d = Start(job.job_id, gpus)
        self.decisions.append(d)
        if self._alive is None:
            self._alive = np.ones(self._ids.size, dtype=bool)
        self._alive[pos] = False
        self._demand -= len(gpus)
        self._n_sh = self._count_shareable()
        self._refresh()
        return d

    def action_for(self, job_id: int, gpus: tuple[int, ...]) -> int | None:
        """The action that starts ``job_id`` on ``gpus`` if one does (else the first valid option
        for the job, or None when the job is not in the window) — maps heuristic decisions to actions."""
        for s, jid in enumerate(self._win_ids.tolist()):
            if jid != job_id:
                continue
            j = self._pending[int(self._win[s])]
            mask = self.mask()
            first = None
            for o in range(self.n_opts):
                a = s * self.n_opts + o
                if not mask[a]:
                    continue
                if first is None:
                    first = a
                if self.options.place(o, j, self.ws) == tuple(sorted(gpus)):
                    return a
            return first
        return None
