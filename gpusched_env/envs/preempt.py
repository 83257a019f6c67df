"""Observation, action mask and action decoding of one decision point of ``gpusched/Cluster-v1``
(starts, preemptions, migrations) — shared by the env and the agent adapter (:mod:`gpusched.agents.adapter`),
so a model sees exactly the same numbers in both.

A :class:`PreemptBuilder` wraps a read-only :class:`~gpusched_env.view.ClusterView` and the
actions taken so far at this decision point (on a working copy of the cluster). ``observe()``,
``mask()``, ``act(a)``, ``any_valid()`` and ``done_action`` follow
:class:`gpusched_env.envs.observe.DecisionBuilder`; ``decisions`` is the batch the actions amount to.

**Service key.** Jobs are ranked by a key the information setting allows: ``clairvoyant=False``:
attained GPU-seconds (LAS's key, ``ClusterView.progress().attained_gpu_s``); ``clairvoyant=True``:
remaining work ``remaining_iters x base_iter_s`` (SRTF's key). Ties: arrival, then job id (as the
heuristics' keys).

**Lift.** At a round point the agent may *lift* a running job: its GPUs are released in the working
state and it joins the candidates to start. Started again in the same batch it keeps its GPUs (same
GPUs: no decision, no cost) or moves (a ``Migrate``: one restart cost); still lifted at "done" it is
preempted (a ``Preempt``: checkpointed, back in the queue, restart cost at its next start). So
"lift the jobs not to keep, then start the chosen ones" is a LAS / SRTF / Tiresias round, and "lift
all, then place in order" a non-sticky (PAL) round. With ``migrations=False`` a lifted job is not
offered again in the same batch (lift = preempt).

**Window.** ``K`` start slots: the first ``fifo_slots`` candidates (queued and lifted jobs) by
arrival, then the candidates with the smallest service key not already shown. ``R`` running slots:
the running jobs not lifted or restarted in this batch, *largest* key first (the job LAS / SRTF would
preempt first). The window order uses a job's length only when ``clairvoyant``.

**Actions** (``Discrete(K*P + R + 1)``, ``P`` placement options): ``s*P + o`` starts start slot
``s`` with option ``o``; ``K*P + i`` lifts running slot ``i`` (only at round points at which some
job is queued: otherwise a lift could only idle GPUs or move a job for nothing); the last is
"done", masked only when the batch would leave the cluster idle while a start is possible.

**Observation** (float32, finite, clipped to ``[-1, 10]``), concatenated:

- per node (``n_nodes x 8``): as Cluster-v0 (working free-GPU share, up share, mean ``sf - 1`` of its
  free GPUs per class A..D, mean GPU power / 300 W, job slots used), on the working state;
- per slot (``(K + R) x 17``): present, running slot, ``log2(1+GPUs)/log2(1+n_gpus)``, class one-hot
  (4), ``log1p(time in system h)``, ``log1p(attained GPU-h)``, ``log1p(attained GPU-h / GPUs)``,
  ``log1p(restarts)``, fits an exclusive option now (start slot) or ``log1p(h on its current GPUs)``
  (running slot), fits ``least_interference`` now, GPUs / working free GPUs (start slot, clipped),
  ``log1p(total work h)`` and ``log1p(remaining work h)`` — these two only when ``clairvoyant``, else
  0 —, lifted in this batch;
- global (10): time of day (sin, cos), busy-GPU share, working free share, ``log1p(queue)/5``,
  ``log1p(running)/5``, queued GPU demand / n_gpus, ``log1p(starts in this batch)/3``, round point
  (0/1), ``log1p(lifts in this batch)/3``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from gpusched_env.catalog import base_iter_s
from gpusched_env.envs.observe import OBS_HIGH, OBS_LOW, JobCache
from gpusched_env.envs.options import OptionSet, WorkingState
from gpusched_env.placement import PlacementContext
from gpusched_env.types import Decision, Job, Migrate, Preempt, Start
from gpusched_env.view import ClusterView

NODE_FEATURES_V1 = 8
SLOT_FEATURES_V1 = 17
GLOBAL_FEATURES_V1 = 10
_DAY_S = 86400.0
_H = 1.0 / 3600.0

Key = tuple[float, float, int]


def obs_size_v1(n_nodes: int, k: int, r: int) -> int:
    return n_nodes * NODE_FEATURES_V1 + (k + r) * SLOT_FEATURES_V1 + GLOBAL_FEATURES_V1


def n_actions_v1(k: int, r: int, n_opts: int) -> int:
    return k * n_opts + r + 1


class PreemptBuilder:
    """Observation + mask + action decoding at one Cluster-v1 decision point (module docstring)."""

    def __init__(
        self, view: ClusterView, options: OptionSet, k: int, fifo_slots: int, r: int, cache: JobCache,
        *, clairvoyant: bool, is_round: bool, migrations: bool = True,
    ) -> None:
        self.view = view
        self.options = options
        self.k, self.r = int(k), int(r)
        self.fifo_slots = min(int(fifo_slots), self.k)
        self.cache = cache
        self.clairvoyant = bool(clairvoyant)
        self.is_round = bool(is_round)
        self.migrations = bool(migrations)
        self._may_lift = self.is_round and bool(view.pending)  # a lift with nothing queued can only idle GPUs
        self.topo = view.topology
        self.n_opts = len(options)
        self.lift0 = self.k * self.n_opts
        self.done_action = self.lift0 + self.r
        self.n_actions = self.done_action + 1
        cache.see(view.pending_ids, view)
        cache.see(list(view.running), view)
        self._ws: WorkingState | None = None
        self._pending: list[Job] = list(view.pending)
        self._running: list[int] = list(view.running)
        self._batch: list[Decision] = []  # starts and migrations, in order
        self._lifted: dict[int, tuple[int, ...]] = {}  # lifted, not restarted: job id -> its GPUs
        self._gone: set[int] = set()  # started, or restarted after a lift, in this batch
        self._n_started = 0  # queued jobs started
        self._n_lifts = 0
        self._demand = float(view.pending_gpus)
        self._n_free = view.n_free
        self._need_sh = not options.all_exclusive
        self._keys: dict[int, Key] = {}
        self._prog: dict[int, tuple[float, float, int]] = {}  # attained GPU-s, remaining iters, restarts
        self._base: dict[str, float] = {}
        self._p_sorted: list[int] | None = None
        self._r_sorted: list[int] | None = None
        self._refresh()

    # -- keys --------------------------------------------------------------------------------
    def _progress(self, jid: int) -> tuple[float, float, int]:
        p = self._prog.get(jid)
        if p is None:
            pr = self.view.progress(jid)
            p = self._prog[jid] = (pr.attained_gpu_s, pr.remaining_iters, pr.restarts)
        return p

    def key(self, jid: int) -> Key:
        """The service key of job ``jid`` (module docstring)."""
        k = self._keys.get(jid)
        if k is None:
            job = self.view.job(jid)
            att, rem, _ = self._progress(jid)
            if self.clairvoyant:
                b = self._base.get(job.model)
                if b is None:
                    b = self._base[job.model] = base_iter_s(job.model)
                k = (rem * b, job.arrival_s, jid)
            else:
                k = (att, job.arrival_s, jid)
            self._keys[jid] = k
        return k

    # -- working state -----------------------------------------------------------------------
    @property
    def ws(self) -> WorkingState:
        """The cluster as the actions taken so far leave it (made on first use)."""
        if self._ws is None:
            self._ws = WorkingState(PlacementContext(self.view))
        return self._ws

    def _release(self, job: Job, gpus: tuple[int, ...]) -> None:
        ws = self.ws
        free = ws.ctx.free
        for g in gpus:
            ws.n_res[g] -= 1
            ws.mem_used[g] -= job.mem_gb
            if ws.n_res[g] == 0 and ws.up[g] and not free[g]:
                free[g] = True
                self._n_free += 1

    def _take(self, job: Job, gpus: tuple[int, ...]) -> None:
        self._n_free -= self.ws.take(job, gpus)

    # -- window ------------------------------------------------------------------------------
    def _candidates(self) -> list[Job]:
        """Queued and lifted jobs not started in this batch, by arrival."""
        gone = self._gone
        cand = [j for j in self._pending if j.job_id not in gone]
        if self._lifted and self.migrations:
            cand += [self.view.job(j) for j in self._lifted]
            cand.sort(key=lambda j: (j.arrival_s, j.job_id))
        return cand

    def _refresh(self) -> None:
        cand = self._candidates()
        win = cand[: self.fifo_slots]
        need = self.k - len(win)
        if need > 0 and len(cand) > len(win):
            if self._p_sorted is None:
                self._p_sorted = sorted((j.job_id for j in self._pending), key=self.key)
            order = self._p_sorted
            if self._lifted and self.migrations:
                order = sorted([*order, *self._lifted], key=self.key)
            shown = {j.job_id for j in win}
            gone = self._gone
            for jid in order:
                if need == 0:
                    break
                if jid in gone or jid in shown:
                    continue
                win.append(self.view.job(jid))
                need -= 1
        self._pwin: list[Job] = win
        if self._r_sorted is None:
            self._r_sorted = sorted(self._running, key=self.key, reverse=True)
        lifted, gone = self._lifted, self._gone
        self._rwin: list[int] = [j for j in self._r_sorted if j not in lifted and j not in gone][: self.r]
        self._fit: tuple[np.ndarray, np.ndarray] | None = None
        self._mask: np.ndarray | None = None
        self._obs: np.ndarray | None = None

    @property
    def window(self) -> list[Job]:
        """The jobs of the start slots, slot order."""
        return list(self._pwin)

    @property
    def running_window(self) -> list[int]:
        """The job ids of the running slots, slot order."""
        return list(self._rwin)

    @property
    def decisions(self) -> list[Decision]:
        """The batch the actions so far amount to: starts and migrations in order, then a
        preemption for every job still lifted."""
        return [*self._batch, *(Preempt(j) for j in self._lifted)]

    # -- mask --------------------------------------------------------------------------------
    def _fits(self) -> tuple[np.ndarray, np.ndarray]:
        """(fits an exclusive option, fits ``least_interference``) per start slot."""
        if self._fit is not None:
            return self._fit
        win = self._pwin
        ex = np.zeros(len(win), dtype=bool)
        sh = np.zeros(len(win), dtype=bool)
        simple = not self.cache.constrained
        for s, j in enumerate(win):
            ex[s] = j.num_gpus <= self._n_free if simple else self.ws.ctx.n_eligible(j) >= j.num_gpus
            if self._need_sh:
                if self.view.max_jobs_per_gpu == 1:
                    sh[s] = ex[s]  # exclusive cluster: the same test
                else:
                    sh[s] = int(np.count_nonzero(self.ws.shareable(j))) >= j.num_gpus
        self._fit = (ex, sh)
        return self._fit

    def mask(self) -> np.ndarray:
        """(K*P + R + 1,) bool; see the module docstring."""
        if self._mask is not None:
            return self._mask
        p = self.n_opts
        m = np.zeros(self.n_actions, dtype=bool)
        ex, sh = self._fits()
        n = ex.size
        if n:
            m[: n * p].reshape(n, p)[:] = np.where(self.options.exclusive, ex[:, None], sh[:, None])
        any_start = bool(m[: self.lift0].any())
        if self._may_lift and self._rwin:
            m[self.lift0 : self.lift0 + len(self._rwin)] = True
        running_after = len(self._running) - len(self._lifted) + self._n_started
        m[-1] = bool(running_after > 0 or not any_start)
        self._mask = m
        return m

    def any_valid(self) -> bool:
        """Whether some action other than "done" is valid now."""
        return bool(self.mask()[:-1].any())

    def take_mask(self) -> np.ndarray:
        """A copy of :meth:`mask` (the builder keeps its own: its validity reads it)."""
        return self.mask().copy()

    def valid(self, action: int) -> bool:
        """``mask()[action]``."""
        return 0 <= action < self.n_actions and bool(self.mask()[action])

    # -- observation -------------------------------------------------------------------------
    def observe(self) -> np.ndarray:
        """The observation (module docstring), cached until the next action."""
        if self._obs is not None:
            return self._obs
        view, topo, cache = self.view, self.topo, self.cache
        ws = self._ws
        free = view.free if ws is None else ws.ctx.free
        n_res = view.n_resident if ws is None else ws.n_res
        n_nodes, n_gpus = topo.n_nodes, topo.n_gpus
        node = topo.gpu_node
        size = topo.node_sizes
        fr = free.astype(np.float64)
        nb = np.zeros((n_nodes, NODE_FEATURES_V1))
        n_free_node = np.bincount(node, weights=fr, minlength=n_nodes)
        nb[:, 0] = n_free_node / size
        nb[:, 1] = np.bincount(node, weights=view.up.astype(np.float64), minlength=n_nodes) / size
        sf = (view.slowdown - 1.0) * fr[:, None]
        d = np.maximum(n_free_node, 1.0)
        for c in range(4):
            nb[:, 2 + c] = np.bincount(node, weights=sf[:, c], minlength=n_nodes) / d
        nb[:, 6] = np.bincount(node, weights=view.gpu_power_w, minlength=n_nodes) / size / 300.0
        nb[:, 7] = np.bincount(node, weights=n_res.astype(np.float64), minlength=n_nodes) / size / view.max_jobs_per_gpu

        k = self.k
        sb = np.zeros((k + self.r, SLOT_FEATURES_V1))
        now = view.now
        lg = math.log2(1.0 + n_gpus)
        ex, sh = self._fits()
        per_free = 1.0 / max(self._n_free, 1)
        running = view.running
        rows = [(s, j.job_id, False) for s, j in enumerate(self._pwin)]
        rows += [(k + i, jid, True) for i, jid in enumerate(self._rwin)]
        for row, jid, is_run in rows:
            job = view.job(jid)
            att, rem, restarts = self._progress(jid)
            g = job.num_gpus
            f = sb[row]
            f[0] = 1.0
            f[1] = 1.0 if is_run else 0.0
            f[2] = math.log2(1.0 + g) / lg
            f[3 + job.class_index] = 1.0
            f[7] = math.log1p(max(now - job.arrival_s, 0.0) * _H)
            f[8] = math.log1p(att * _H)
            f[9] = math.log1p(att * _H / g)
            f[10] = math.log1p(restarts)
            if is_run:
                f[11] = math.log1p(max(now - running[jid].since_s, 0.0) * _H)
            else:
                f[11] = 1.0 if ex[row] else 0.0
                f[12] = 1.0 if sh[row] else 0.0
                f[13] = g * per_free
                f[16] = 1.0 if jid in self._lifted else 0.0
            if self.clairvoyant:
                w = float(cache.work[jid])  # total work, hours
                f[14] = math.log1p(w)
                f[15] = math.log1p(w * rem / job.work_iters if job.work_iters > 0 else 0.0)

        tod = 2.0 * math.pi * (now % _DAY_S) / _DAY_S
        n_q = len(self._pending) - self._n_started + len(self._lifted)
        n_run = len(self._running) - len(self._lifted) + self._n_started
        glob = np.array([
            math.sin(tod), math.cos(tod), float(np.count_nonzero(n_res)) / n_gpus, self._n_free / n_gpus,
            math.log1p(max(n_q, 0)) / 5.0, math.log1p(max(n_run, 0)) / 5.0, self._demand / n_gpus,
            math.log1p(self._n_started) / 3.0, 1.0 if self.is_round else 0.0, math.log1p(self._n_lifts) / 3.0,
        ])
        obs = np.concatenate([nb.ravel(), sb.ravel(), glob]).astype(np.float32)
        np.nan_to_num(obs, copy=False, nan=0.0)
        np.clip(obs, OBS_LOW, OBS_HIGH, out=obs)
        self._obs = obs
        return obs

    def take_observation(self) -> np.ndarray:
        """:meth:`observe`, handed over: the caller owns the array (no copy; a later call before
        the next action computes a new one)."""
        obs = self.observe()
        self._obs = None
        return obs

    # -- actions -----------------------------------------------------------------------------
    def place(self, action: int) -> tuple[int, ...] | None:
        """The GPUs start action ``action`` would give now (nothing applied); None if it cannot."""
        slot, opt = divmod(int(action), self.n_opts)
        return self.options.place(opt, self._pwin[slot], self.ws)

    def act(self, action: int) -> int | None:
        """Apply a valid action to the working state; returns the job id it concerns, or None
        (nothing changed) when the action is not valid now."""
        a = int(action)
        if not 0 <= a < self.done_action or not self.mask()[a]:
            return None
        if a >= self.lift0:
            jid = self._rwin[a - self.lift0]
            job = self.view.job(jid)
            held = tuple(self.view.running[jid].gpus)
            self._release(job, held)
            self._lifted[jid] = held
            self._n_lifts += 1
            self._demand += job.num_gpus
        else:
            job = self._pwin[a // self.n_opts]
            jid = job.job_id
            gpus = self.place(a)
            if gpus is None:  # cannot happen when the mask is right; stay safe
                return None
            self._take(job, gpus)
            old = self._lifted.pop(jid, None)
            if old is None:
                self._batch.append(Start(jid, gpus))
                self._n_started += 1
            elif set(gpus) != set(old):
                self._batch.append(Migrate(jid, gpus))
            self._gone.add(jid)
            self._demand -= job.num_gpus
        self._refresh()
        return jid


def actions_for(make: Callable[[], PreemptBuilder], decisions: list[Decision], exact: bool = True) -> list[int] | None:
    """A heuristic's decision batch as Cluster-v1 actions, found on a fresh builder ``make()`` (and
    applied to it as they are found): lift every preempted and migrated job (largest service key
    first), then start the started and migrated jobs in the batch's order, each with the first
    option that gives the same GPUs (``exact=False``: the first valid option when none does).
    None when a decision has no action (job outside the window, or, if ``exact``, no option gives
    its GPUs)."""
    b = make()
    lift = sorted((d.job_id for d in decisions if isinstance(d, Preempt | Migrate)), key=b.key, reverse=True)
    out: list[int] = []
    for jid in lift:
        if jid not in b._rwin:
            return None
        a = b.lift0 + b._rwin.index(jid)
        if b.act(a) is None:
            return None
        out.append(a)
    p = b.n_opts
    for d in decisions:
        if isinstance(d, Preempt):
            continue
        ids = [j.job_id for j in b._pwin]
        if d.job_id not in ids:
            return None
        base = ids.index(d.job_id) * p
        want = set(d.gpus)
        chosen = None
        mask = b.mask()
        for o in range(p):
            a = base + o
            if not mask[a]:
                continue
            got = b.place(a)
            if got is not None and set(got) == want:
                chosen = a
                break
            if chosen is None and not exact:
                chosen = a
        if chosen is None or b.act(chosen) is None:
            return None
        out.append(chosen)
    return out
