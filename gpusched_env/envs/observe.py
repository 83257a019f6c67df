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

from collections.abc import Sequence

import numpy as np

from baselines.ordering import base_iter_s
from baselines.placement import PlacementContext
from gpusched_env.envs.options import OptionSet, WorkingState
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
    """Static per-job numbers kept across decision points: the work estimate in hours (a dense
    array by job id, filled as jobs are first seen) and whether any job seen so far constrains its
    GPUs (type or memory), which turns the exact fit check on."""

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        self._work = np.full(0, np.nan)
        self.constrained = False

    def _fill(self, ids: np.ndarray, view: ClusterView) -> None:
        top = int(ids.max()) + 1
        if top > self._work.size:
            grown = np.full(max(top, 2 * self._work.size), np.nan)
            grown[: self._work.size] = self._work
            self._work = grown
        min_mem = float(view.topology.gpu_mem_gb.min())
        for i in ids[np.isnan(self._work[ids])].tolist():
            job = view.job(i)
            self._work[i] = job.work_iters * base_iter_s(job.model) / 3600.0
            self.constrained |= job.gpu_type is not None or job.mem_gb > min_mem

    def work_of(self, ids: np.ndarray, view: ClusterView) -> np.ndarray:
        """Work estimate (hours) of the jobs ``ids`` (all in the view's system)."""
        if ids.size == 0:
            return np.zeros(0)
        if int(ids.max()) >= self._work.size or np.isnan(self._work[ids]).any():
            self._fill(ids, view)
        return self._work[ids]

    def work_h(self, job: Job) -> float:
        return float(self._work[job.job_id])


class DecisionBuilder:
    """Observation + mask + action decoding at one decision point (see the module docstring)."""

    def __init__(
        self, view: ClusterView, options: OptionSet, k: int, fifo_slots: int, cache: JobCache
    ) -> None:
        self.view = view
        self.options = options
        self.k = k
        self.fifo_slots = min(fifo_slots, k)
        self.cache = cache
        topo = view.topology
        self.topo = topo
        self.ws = WorkingState(PlacementContext(view))
        self.decisions: list[Start] = []
        self._placed: set[int] = set()
        self._pending: Sequence[Job] = view.pending
        work = cache.work_of(np.asarray(view.pending_ids, dtype=np.int64), view)
        self._by_work = np.argsort(work, kind="stable")
        self._work = work
        self._demand0 = float(view.pending_gpus)
        self._window: list[Job] = []
        self._mask: np.ndarray | None = None
        self._obs: np.ndarray | None = None
        self.n_opts = len(options)
        self.done_action = k * self.n_opts
        self._node_start = topo.node_first_gpu[:-1]
        self._node_size, self._uniform = topo.node_sizes, topo.uniform_node_size
        self._simple = not cache.constrained
        self._refresh()

    # -- window ------------------------------------------------------------------------------
    def _refresh(self) -> None:
        placed = self._placed
        window: list[Job] = []
        shown: set[int] = set()
        for j in self._pending:
            if len(window) >= self.fifo_slots:
                break
            if j.job_id not in placed:
                window.append(j)
                shown.add(j.job_id)
        if len(window) < self.k:
            pend = self._pending
            for i in self._by_work:
                j = pend[int(i)]
                if j.job_id in placed or j.job_id in shown:
                    continue
                window.append(j)
                if len(window) >= self.k:
                    break
        self._window = window
        self._mask = None
        self._obs = None

    @property
    def window(self) -> list[Job]:
        return self._window

    # -- mask --------------------------------------------------------------------------------
    def mask(self) -> np.ndarray:
        """(K x P + 1,) bool. The last entry ("done") is True except when the cluster would sit
        idle: nothing running, nothing started in this batch, and some start valid (work-conserving
        rule: a policy cannot stall a run by waiting forever on an empty cluster)."""
        if self._mask is not None:
            return self._mask
        k, p = self.k, self.n_opts
        m = np.zeros(k * p + 1, dtype=bool)
        ex_ok, sh_ok = self._fits()
        excl = self.options.exclusive
        for s in range(len(self._window)):
            row = np.where(excl, ex_ok[s], sh_ok[s])
            m[s * p : (s + 1) * p] = row
        m[-1] = bool(self.decisions or len(self.view.running) or not m[:-1].any())
        self._mask = m
        return m

    def _fits(self) -> tuple[np.ndarray, np.ndarray]:
        ws = self.ws
        n = len(self._window)
        ex = np.zeros(n, dtype=bool)
        sh = np.zeros(n, dtype=bool)
        if n == 0:
            return ex, sh
        need_sh = not self.options.exclusive.all()
        if self._simple:
            n_free = int(np.count_nonzero(ws.ctx.free))
            n_sh = int(np.count_nonzero(ws.up & (ws.n_res < ws.max_jobs))) if need_sh else 0
            for s, j in enumerate(self._window):
                ex[s] = j.num_gpus <= n_free
                if need_sh:
                    sh[s] = j.num_gpus <= n_sh and (
                        j.mem_gb == 0.0 or int(np.count_nonzero(ws.shareable(j))) >= j.num_gpus
                    )
            return ex, sh
        for s, j in enumerate(self._window):
            ex[s] = ws.ctx.n_eligible(j) >= j.num_gpus
            if need_sh:
                sh[s] = int(np.count_nonzero(ws.shareable(j))) >= j.num_gpus
        return ex, sh

    def any_valid(self) -> bool:
        return bool(self.mask()[:-1].any())

    # -- observation -------------------------------------------------------------------------
    def observe(self) -> np.ndarray:
        if self._obs is not None:
            return self._obs
        view, topo, ws = self.view, self.topo, self.ws
        free = ws.ctx.free
        n_gpus = topo.n_gpus
        freef = free.astype(np.float64)
        power = np.asarray(view.gpu_power_w)
        per_gpu = np.empty((n_gpus, 8), dtype=np.float64)
        per_gpu[:, 0] = freef
        per_gpu[:, 1] = ws.up
        per_gpu[:, 2:6] = ws.slowdown * freef[:, None]
        per_gpu[:, 6] = power
        per_gpu[:, 7] = ws.n_res
        gpn = self._uniform
        if gpn:
            sums = per_gpu.reshape(topo.n_nodes, gpn, 8).sum(axis=1)
        else:
            sums = np.add.reduceat(per_gpu, self._node_start, axis=0)
        size = self._node_size[:, None]
        nodes = sums / size
        nfree = sums[:, 0:1]
        nodes[:, 2:6] = np.where(nfree > 0, sums[:, 2:6] / np.maximum(nfree, 1.0) - 1.0, 0.0)
        nodes[:, 6] /= 300.0
        nodes[:, 7] /= ws.max_jobs

        slots = np.zeros((self.k, SLOT_FEATURES), dtype=np.float64)
        ex_ok, sh_ok = self._fits()
        n_free = float(np.count_nonzero(free))
        now = view.now
        lg = np.log2(1.0 + n_gpus)
        cache = self.cache
        for s, j in enumerate(self._window):
            row = slots[s]
            row[0] = 1.0
            row[1] = np.log2(1.0 + j.num_gpus) / lg
            row[2 + j.class_index] = 1.0
            row[6] = np.log1p(max(0.0, now - j.arrival_s) / 3600.0)
            row[7] = np.log1p(cache.work_h(j))
            row[8] = ex_ok[s]
            row[9] = sh_ok[s]
            row[10] = j.num_gpus / max(n_free, 1.0)

        pend = self._pending
        n_q = len(pend) - len(self._placed)
        demand = self._demand0 - sum(len(d.gpus) for d in self.decisions)
        tod = 2.0 * np.pi * (now % _DAY_S) / _DAY_S
        glob = np.array(
            [
                np.sin(tod),
                np.cos(tod),
                float(np.count_nonzero(ws.n_res > 0)) / n_gpus,
                n_free / n_gpus,
                np.log1p(n_q) / 5.0,
                np.log1p(len(view.running) + len(self.decisions)) / 5.0,
                demand / n_gpus,
                np.log1p(len(self.decisions)) / 3.0,
            ]
        )
        obs = np.concatenate([nodes.ravel(), slots.ravel(), glob])
        np.nan_to_num(obs, copy=False, nan=0.0, posinf=OBS_HIGH, neginf=OBS_LOW)
        np.clip(obs, OBS_LOW, OBS_HIGH, out=obs)
        self._obs = obs.astype(np.float32)
        return self._obs

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
        job = self._window[slot]
        gpus = self.options.place(opt, job, self.ws)
        if gpus is None:  # cannot happen when the mask is right; stay safe
            return None
        self.ws.take(job, gpus)
        d = Start(job.job_id, gpus)
        self.decisions.append(d)
        self._placed.add(job.job_id)
        self._refresh()
        return d

    def action_for(self, job_id: int, gpus: tuple[int, ...]) -> int | None:
        """The action that starts ``job_id`` on ``gpus`` if one does (else the first valid option
        for the job, or None when the job is not in the window) — maps heuristic decisions to actions."""
        for s, j in enumerate(self._window):
            if j.job_id != job_id:
                continue
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
