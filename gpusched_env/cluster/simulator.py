"""The discrete-event cluster simulator: one implementation of the backend protocol.

This module is the event loop and the job bookkeeping; the rest of the cluster model is in its
neighbours: job speed (:mod:`.speed`: variability, co-location via the device model, locality),
power and energy (:mod:`.energy`), the stochastic processes (:mod:`.processes`) and the event
queue (:mod:`.clock`, in SimPy's event order).
Progress is integrated exactly between events; a job's completion event is armed for its current
speed (moved earlier when it speeds up, re-armed when it fires early after a slowdown).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass
from operator import attrgetter

import numpy as np

from gpusched_env.allocation import Applied, ClusterState
from gpusched_env.catalog import ModelSpec, model_spec
from gpusched_env.cluster.clock import NORMAL, URGENT, EventClock
from gpusched_env.cluster.energy import NO_JOB, PowerLedger
from gpusched_env.cluster.model import SimModel
from gpusched_env.cluster.processes import DriftProcess, FailureProcess, Stragglers
from gpusched_env.cluster.speed import DataParallelSpeed
from gpusched_env.cluster.variability import sample_factors
from gpusched_env.cluster.watch import Watch
from gpusched_env.device.analytic import AnalyticDevice
from gpusched_env.device.kernel_device import KernelDevice
from gpusched_env.device.seam import DeviceModel
from gpusched_env.invariants import InvariantChecker
from gpusched_env.metrics import RunResult
from gpusched_env.run_rules import (
    RunSnapshot,
    StallCounter,
    assemble_result,
    count_finished,
    count_migrated,
    count_preempted,
    count_started,
    dead_end,
    deadline_met,
)
from gpusched_env.topology import Topology
from gpusched_env.types import _CLASS_INDEX, Decision, Job, JobRecord
from gpusched_env.view import ClusterView, JobProgress, readonly

_EXACT_TICKS = 10_000
"""Idle round ticks skipped by repeated addition (as the ticks themselves add); more by one product."""


class JobRecords(dict[int, JobRecord]):
    """The run's job records by job id, each made when it is first read (``records[job_id]``; a job
    of a run that ends before it arrives has none until :meth:`Simulator.result` reads them all).
    Only reads by id make one: ``in``, ``get`` and iteration see the records made so far."""

    __slots__ = ("_jobs",)

    def __init__(self, jobs: dict[int, Job]) -> None:
        super().__init__()
        self._jobs = jobs  # job id -> Job, of every job of the run

    def __missing__(self, job_id: int) -> JobRecord:
        rec = self[job_id] = JobRecord(self._jobs[job_id])  # (KeyError for an unknown id)
        return rec


@dataclass(slots=True)
class _Run:
    """Dynamic state of one running job."""

    iter_s: float = 0.0  # current seconds per iteration
    power_w: float = 0.0
    last_t: float = 0.0
    resume_at: float = 0.0
    version: int = 0
    loc_mult: float = 1.0
    comm_s: float = 0.0
    due: float = 0.0  # completion time at the current speed
    armed_at: float | None = None  # time of the pending completion event
    util: float = 1.0  # the job's utilisation of a GPU it has alone, in [0, 1]
    # for a whole job alone on each of its GPUs (None otherwise; set at every re-timing): the
    # largest slowness over its GPUs, its base iteration time and class, so a straggler toggle
    # re-times it from the one GPU that changed
    worst: float | None = None
    base_s: float = 0.0
    cls: int = 0


def round_delay(now: float, delay: float, origin: float, round_s: float) -> float:
    """``delay`` stretched to the first round boundary (rounds of ``round_s`` from ``origin``) at or after
    ``now + delay``: PAL's simulator notices completions at round boundaries (CALIBRATION.md)."""
    return origin + math.ceil((now + delay - origin) / round_s - 1e-9) * round_s - now


class Simulator:
    """Discrete-event cluster simulator implementing :class:`gpusched_env.policy.Backend`.

    ``completed`` lists finished job ids in completion order (consumers such as the env read it).
    """

    takes_wake = True  # ``advance`` takes a ``wake`` filter (:func:`gpusched_env.policy.run_policy`)

    incremental_toggles = True
    """Re-time the jobs of a straggling GPU from their kept slowest GPU (:meth:`_toggles`);
    False takes the plain steps (tests compare the two)."""

    written_out = True
    """Re-timing after starts and completions (:meth:`_refresh`) and a completion's settle
    (:meth:`_due`) with the steps of :meth:`DataParallelSpeed.alone_worst`,
    :meth:`_schedule_completion` (completions at round boundaries included) and :meth:`_settle`
    written out (the same floats); False calls them (tests compare the two)."""

    fresh_batches = True
    """Re-timing after a plain batch of starts by :meth:`_refresh_fresh` (with ``written_out``);
    False takes :meth:`_refresh` (tests compare the two)."""

    def __init__(
        self,
        topology: Topology,
        jobs: list[Job],
        model: SimModel | None = None,
        seed: int = 0,
        slowdown_profile: np.ndarray | None = None,
        models: dict[str, ModelSpec] | None = None,
        checker: InvariantChecker | None = None,
        max_jobs_per_gpu: int = 4,
    ) -> None:
        self.topology = topology
        self.model = model or SimModel()
        self.models = dict(models or {})
        self._spec_cache: dict[str, ModelSpec] = {}
        self._util: dict[str, float] = {}  # model -> its utilisation of a GPU it has alone, in [0, 1]
        ss = np.random.SeedSequence(seed)
        streams = ss.spawn(5)  # variability, drift, stragglers, failures, kernel shapes (the device model)
        (rng_var, self._rng_drift, self._rng_strag, self._rng_fail) = (np.random.default_rng(s) for s in streams[:4])
        factors = (
            np.asarray(slowdown_profile, dtype=float)
            if slowdown_profile is not None
            else sample_factors(topology.n_gpus, self.model.variability, rng_var)
        )
        self.visible_slowdown = factors.copy()
        self.state = ClusterState(topology, max_jobs_per_gpu)
        self.state.compiled = True  # one compiled call per placement (ClusterState._place)
        sharing = self.model.sharing
        device: DeviceModel = (
            AnalyticDevice(sharing) if sharing.model == "analytic"
            else KernelDevice(seed=int(streams[4].generate_state(1)[0]))
        )
        self.speed = DataParallelSpeed(topology, self.state, device, self.model.locality, factors, self.spec)
        self.power = PowerLedger(topology, self.model.power, self.model.timeline)
        self.env = EventClock()  # simulated time (``env.now``) and the event queue
        self.jobs = sorted(jobs, key=attrgetter("arrival_s", "job_id"))  # (arrival, id) tuples, as before
        self._check_jobs()
        ids = list(map(attrgetter("job_id"), self.jobs))  # map, not a comprehension: no frame per job
        self.records: dict[int, JobRecord] = JobRecords(dict(zip(ids, self.jobs, strict=True)))
        self.done: dict[int, float] = dict.fromkeys(ids, 0.0)
        self.attained: dict[int, float] = dict.fromkeys(ids, 0.0)
        self.runs: dict[int, _Run] = {}
        self.completed: list[int] = []
        self._tracked_left = sum(map(attrgetter("tracked"), self.jobs))  # (True counts 1)
        self._trigger = False
        self._events = True
        self.checker = checker
        self._last_gpus: dict[int, tuple[int, ...]] = {}
        self._round_s: float | None = None
        self._next_wake = -math.inf  # the round boundary wake_next_round last scheduled
        self._stall = StallCounter()
        self.deadlocked = False
        self._first_arrival = self.jobs[0].arrival_s if self.jobs else 0.0
        self._next_arrival_s = self._first_arrival  # time of the next arrival still to come
        self._arrivals_done = False
        self.watch: Watch | None = None  # limits and progress of the run (gpusched_env.cluster.watch)
        self._ro: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._stragglers: Stragglers | None = None
        self._on_due: Callable[[tuple[int, _Run, int]], None] = self._due  # one bound method for every completion

    # -- set-up ------------------------------------------------------------------------------
    def _check_jobs(self) -> None:
        n, jobs = self.topology.n_gpus, self.jobs
        if jobs and max(map(attrgetter("num_gpus"), jobs)) <= n and (
                list(map(attrgetter("pipeline"), jobs)).count(None) == len(jobs)):
            # no job is too large and none is a pipeline: only the models are left to check, each
            # once, in the order they first appear (the first unknown one raises, as below)
            for model in dict.fromkeys(map(attrgetter("model"), jobs)):
                self.spec(model)
            return
        for j in jobs:
            if j.num_gpus > n:
                raise ValueError(f"job {j.job_id} needs {j.num_gpus} GPUs; the cluster has {n}")
            if j.pipeline is not None and j.pipeline.stages != j.num_gpus:
                raise ValueError(f"job {j.job_id}: a pipeline job runs one stage per GPU, so num_gpus "
                                 f"({j.num_gpus}) must equal pipeline.stages ({j.pipeline.stages})")
            self.spec(j.model)

    def spec(self, model: str) -> ModelSpec:
        spec = self._spec_cache.get(model)
        if spec is None:
            spec = self._spec_cache[model] = self.models.get(model) or model_spec(model)
        return spec

    # -- backend protocol --------------------------------------------------------------------
    def start(self, round_s: float | None, events: bool = True, ticks: bool = True) -> None:
        """Begin the run. ``round_s`` sets the round grid (ticks, completions at round boundaries);
        ``ticks=False`` keeps the grid but makes no tick a decision point by itself (see
        :meth:`wake_at`)."""
        self._events = events
        env = self.env
        if self.jobs:
            env.schedule(self.jobs[0].arrival_s, self._arrive, 0)
        else:
            self._arrivals_done = True
        if round_s and ticks:
            env.schedule(0, self._first_tick, round_s, URGENT)  # a process's first step
        m = self.model
        if m.stragglers.enabled:
            self._stragglers = Stragglers(self, m.stragglers, self.topology.n_gpus, self._rng_strag)
        if m.variability.drift_sigma > 0:
            DriftProcess(self, m.variability, self.speed.factors, self._rng_drift)
        if m.failures.mtbf_h:
            for node in range(self.topology.n_nodes):
                FailureProcess(self, m.failures, node, self._rng_fail)
        self._round_s = round_s

    def advance(self, wake: Callable[[], bool] | None = None) -> bool:
        """Run to the next decision point; False when the run is over.

        ``wake`` (optional) filters decision points: one where it returns False is passed over
        without returning (the env uses it to skip points at which no start is possible).
        """
        env, strag, watch, checked = self.env, self._stragglers, self.watch, self.checker is not None
        heap, pop, inf = env.heap, heapq.heappop, math.inf
        while True:
            if self._tracked_left == 0 or not heap or heap[0][0] == inf:
                self.deadlocked = self._tracked_left > 0 and dead_end(self._snapshot())
                self.power.account(env.now)
                return False
            t = heap[0][0]
            if strag is not None and strag.next_t < t:
                self._run_stragglers(strag, t)
                continue
            self._trigger = False
            while heap and heap[0][0] == t:  # every event at t (EventClock.step, written out)
                _, _, _, callback, arg = pop(heap)
                env.now = t
                callback(arg)
            if watch is not None:
                watch.instant(t, self._tracked_left)
            if checked:
                self._check()
            if self._trigger:
                if self.runs:  # something runs: not a stall (the common case, without a snapshot)
                    self._stall.points = 0
                elif self._stall.at_point(self._snapshot()):
                    self.deadlocked = True  # the policy keeps starting nothing (gpusched_env.run_rules)
                    self.power.account(env.now)
                    return False
                if wake is None or wake():
                    return True

    def _run_stragglers(self, strag: Stragglers, limit: float) -> None:
        """Straggler toggles due before ``limit`` (the next event's time), merged into the event
        loop in time order (:meth:`Stragglers.run_before`, which hands each toggle that touches
        jobs to :meth:`_toggle_at`)."""
        if not self.incremental_toggles or self.checker is not None or (self._round_s and self.model.completion_at_round):
            strag.run_before(limit, self.state.n_resident, self._toggle_at)
        else:
            strag.run_batches(limit, self.state.n_resident, self._toggles)

    def _toggles(self, hits: list[float], limit: float, last_t: float) -> tuple[int, float]:
        """Apply a batch of straggler toggles of GPUs holding jobs, ``hits`` = (time, GPU, factor)
        ..., in order (:meth:`Stragglers.run_batches`): what :meth:`_toggle_at` does for each, in one
        flat loop (the steps of :meth:`DataParallelSpeed.toggle`, :meth:`_settle`,
        :meth:`DataParallelSpeed.iter_time` and :meth:`_schedule_completion` written out, the same
        floats). Each job there is settled, re-timed and its completion re-set. A whole job alone
        on each of its GPUs runs at the pace of its slowest GPU: that largest slowness is kept from
        one toggle to the next (``_Run.worst``, set at every full re-timing, :meth:`_refresh`), so a
        toggle compares the one GPU that changed with it and looks at all the job's GPUs only when
        that GPU was the slowest and sped up (a toggle changes no GPU's residents). After a toggle
        that armed a completion before ``limit`` the limit moves there; when it moves to or before
        ``last_t`` the rest is left (returns their start, 1-based, and the limit; else -1 and the
        limit). With incremental toggles and without completions at round boundaries only
        (:meth:`set_straggle` takes the plain steps otherwise)."""
        env, heap, speed = self.env, self.env.heap, self.speed
        straggle, slow, unslowed, factors_l, speed_l = (
            speed._straggle, speed._slow, speed._unslowed, speed._factors_l, speed._speed_l,
        )
        state, runs, done, attained, records = self.state, self.runs, self.done, self.attained, self.records
        jobs, resident, running, on_due = state.jobs, state.resident, state.running, self._on_due
        push = heapq.heappush
        k = 0  # toggles of the batch begun
        it = iter(hits)
        for now, gf, st in zip(it, it, it, strict=False):  # (time, GPU, factor) triples
            k += 1
            g = int(gf)
            straggle[g] = st  # the toggle (DataParallelSpeed.toggle)
            old = slow[g]
            if st == 1.0:
                new = slow[g] = unslowed[g]
            else:
                sp = speed_l[g]
                fl = factors_l[g]
                if len(fl) == 4:  # the four classes written out (the list comprehension's floats)
                    new = slow[g] = [fl[0] * st / sp, fl[1] * st / sp, fl[2] * st / sp, fl[3] * st / sp]
                else:
                    new = slow[g] = [f * st / sp for f in fl]
            env.now = now
            armed = False  # a completion armed by this toggle
            for jid in resident[g]:
                run = runs[jid]
                job = jobs[jid]
                last = run.last_t
                r = run.resume_at
                w = job.work_iters
                dt = now - last  # settle (as _settle)
                if dt > 0:
                    work_dt = now - (r if r > last else last)
                    if not work_dt > 0.0:
                        work_dt = 0.0
                    d = done[jid] + work_dt / run.iter_s
                    if not d < w:
                        d = w
                    done[jid] = d
                    a = dt * job.num_gpus  # (one product for the service and the GPU-seconds)
                    attained[jid] += a
                    rec = records[jid]
                    rec.gpu_seconds += a
                    rec.energy_j += dt * run.power_w
                else:
                    d = done[jid]
                run.last_t = now
                worst = run.worst  # re-time (as iter_time)
                if worst is None:  # shares a GPU, MPS or a pipeline (residents are as at the last re-timing)
                    run.iter_s = speed.iter_time(job, running[jid], run.loc_mult, run.comm_s)
                    order = env.order
                    self._schedule_completion(jid, run, now)
                    if env.order != order:
                        armed = True
                    continue
                c = run.cls
                s = new[c]
                if s >= worst:
                    worst = s
                elif old[c] == worst:  # the slowest GPU sped up: look at them all (as worst_of)
                    gpus = running[jid].gpus
                    if len(gpus) == 1:
                        worst = s
                    else:
                        worst = -math.inf
                        for h in gpus:
                            v = slow[h][c]
                            if v > worst:
                                worst = v
                run.worst = worst
                iter_s = run.iter_s = run.base_s * worst * run.loc_mult + run.comm_s
                left = w - d  # completion (as _schedule_completion)
                wait = r - now
                delay = (wait if wait > 0.0 else 0.0) + (left if left > 0.0 else 0.0) * iter_s
                due = run.due = now + delay
                at = run.armed_at
                if at is None or at > due:
                    version = run.version = run.version + 1  # _arm, written out (env.now + delay = due)
                    at = run.armed_at = due
                    push(heap, (at, NORMAL, env.order, on_due, (jid, run, version)))
                    env.order += 1
                    armed = True
            if armed:  # a completion was armed: the next event may be earlier
                nxt = heap[0][0]
                if nxt < limit:
                    limit = nxt
                    if last_t >= limit:
                        return k, limit
        return -1, limit

    def _toggle_at(self, t: float, g: int, factor: float) -> float:
        """Apply a straggler toggle of GPU ``g`` (which holds jobs) at its time ``t``; it may arm a
        completion before the old limit, so the next event's time is returned as the new one."""
        env = self.env
        env.now = t  # the toggle's time: settle and re-arm its jobs then
        self.set_straggle(g, factor)
        if self.checker is not None:
            self._check()
        heap = env.heap
        return heap[0][0] if heap else math.inf  # env.peek()

    def wake_at(self, t: float) -> None:
        """Make ``t`` a decision point (one extra, one-off; for backends started without rounds)."""
        if t > self.env.now:
            self.env.schedule(t - self.env.now, self._wake)

    def wake_next_round(self) -> None:
        """Make the first round boundary after now a decision point (once, however often asked);
        for a run started with ``ticks=False``. No-op without a round length."""
        r = self._round_s
        if not r:
            return
        now, first = float(self.env.now), self._first_arrival
        tick = first + (math.floor((now - first) / r) + 1) * r
        if tick != self._next_wake:
            self.wake_at(tick)
            self._next_wake = tick

    def _wake(self, _e: object) -> None:
        self._trigger = True

    def _snapshot(self) -> RunSnapshot:
        return RunSnapshot(len(self.runs), len(self.state.pending), self._arrivals_done, self.state.all_up)

    def view(self) -> ClusterView:
        if self._ro is None:
            p = self.power
            self._ro = (readonly(self.visible_slowdown), readonly(p.gpu_power), readonly(p.gpu_util))
        slow, power, util = self._ro
        return ClusterView(self.state, self.env.now, slow, self.progress, power, util, self.attained_gpu_s)

    def apply(self, decisions: list[Decision]) -> None:
        now = self.env.now
        applied = self.state.apply(decisions, now)
        if applied.plain:  # (starts: StallCounter.on_applied ends any stall)
            self._stall.points = 0
        else:
            self._stall.on_applied(applied)
        self._on_applied(applied, now)
        if self.checker is not None:
            self._check()

    def _check(self) -> None:
        if self.checker is not None:
            now = self.env.now
            self.checker.check(self.state, now, self.energy_now(), self.power.min_power * now)

    def energy_now(self) -> float:
        """Cluster energy (J) up to now."""
        return self.power.energy_now(self.env.now)

    # -- progress ----------------------------------------------------------------------------
    def progress(self, job_id: int) -> JobProgress:
        job = self.state.jobs[job_id]
        run = self.runs.get(job_id)
        done = self.done[job_id]
        attained = self.attained[job_id]
        rate = 0.0
        if run is not None:
            dt = max(0.0, self.env.now - max(run.last_t, run.resume_at))
            done += dt / run.iter_s
            attained += (self.env.now - run.last_t) * job.num_gpus
            rate = 1.0 / run.iter_s
        rec = self.records[job_id]
        return JobProgress(done, max(0.0, job.work_iters - done), attained, rate, rec.restarts)

    def attained_gpu_s(self, job_id: int) -> float:
        """``progress(job_id).attained_gpu_s`` without the rest (the same float)."""
        run = self.runs.get(job_id)
        if run is None:
            return self.attained[job_id]
        return self.attained[job_id] + (self.env.now - run.last_t) * self.state.jobs[job_id].num_gpus

    def _settle(self, job_id: int, now: float) -> None:
        """Bring a running job's progress, service and energy up to ``now``."""
        run = self.runs[job_id]
        job = self.state.jobs[job_id]
        last = run.last_t
        dt = now - last
        if dt > 0:  # max() and min() written as comparisons (the same floats, fewer calls)
            r = run.resume_at
            work_dt = now - (r if r > last else last)
            if not work_dt > 0.0:
                work_dt = 0.0
            d = self.done[job_id] + work_dt / run.iter_s
            w = job.work_iters
            self.done[job_id] = d if d < w else w
            self.attained[job_id] += dt * job.num_gpus
            rec = self.records[job_id]
            rec.gpu_seconds += dt * job.num_gpus
            rec.energy_j += dt * run.power_w
        run.last_t = now

    # -- state changes -----------------------------------------------------------------------
    def _on_applied(self, applied: Applied, now: float) -> None:
        touched: set[int] = set()
        for jid in applied.preempted:
            self._stop_run(jid, now, touched)
            count_preempted(self.records[jid])
        for jid in applied.migrated:
            self._stop_run(jid, now, touched)
            count_migrated(self.records[jid])
        if applied.migrated or not self.written_out:
            for jid in applied.migrated + applied.started:
                self._start_run(jid, now, touched)
        else:  # _start_run for each started job, written out (the same steps)
            records, running, jobs, runs, util_of = self.records, self.state.running, self.state.jobs, self.runs, self._util
            model, strag, speed = self.model, self._stragglers, self.speed
            start_cost, restart_cost = model.start_cost_s, model.restart_cost_s
            noted = None if strag is None else strag._count_v  # (flush has nothing to do while it is 0)
            # JobRecords makes a record at its first read: here, written out (any other dict is read as is)
            made = records._jobs if type(records) is JobRecords else None  # type: ignore[attr-defined]
            for jid in applied.started:
                rec = records.get(jid)
                if rec is None:
                    rec = records[jid] if made is None else records.setdefault(jid, JobRecord(made[jid]))
                if rec.first_start_s is not None:  # count_started, written out
                    rec.restarts += 1
                    cost = restart_cost
                else:
                    rec.first_start_s = now
                    cost = start_cost
                gpus = running[jid].gpus
                if noted is not None and noted[0]:
                    strag.flush(gpus, speed.set_straggle)  # type: ignore[union-attr]  # factors that changed while idle
                job = jobs[jid]
                if len(gpus) == 1:  # one GPU: no locality
                    mult, comm = 1.0, 0.0
                    touched.add(gpus[0])
                else:
                    mult, comm = speed.placement_cost(job, gpus)
                    touched.update(gpus)
                util = util_of.get(job.model)
                if util is None:
                    util = util_of[job.model] = min(1.0, max(0.0, self.spec(job.model).util))
                runs[jid] = _Run(0.0, 0.0, now, now + cost, 0, mult, comm, 0.0, None, util)
            if applied.plain and self.fresh_batches:
                self._refresh_fresh(touched, now, applied.started)
                return
        self._refresh(touched, now)

    def _start_run(self, jid: int, now: float, touched: set[int]) -> None:
        restarted = count_started(self.records[jid], now)
        cost = self.model.restart_cost_s if restarted else self.model.start_cost_s
        gpus = self.state.running[jid].gpus
        if self._stragglers is not None:
            self._stragglers.flush(gpus, self.speed.set_straggle)  # factors that changed while idle
        job = self.state.jobs[jid]
        mult, comm = (1.0, 0.0) if len(gpus) == 1 else self.speed.placement_cost(job, gpus)  # (one GPU: no locality)
        util = self._util.get(job.model)
        if util is None:
            util = self._util[job.model] = min(1.0, max(0.0, self.spec(job.model).util))
        # _Run(last_t=now, resume_at=now + cost, loc_mult=mult, comm_s=comm, util=util), positionally
        self.runs[jid] = _Run(0.0, 0.0, now, now + cost, 0, mult, comm, 0.0, None, util)
        touched.update(gpus)

    def _stop_run(self, jid: int, now: float, touched: set[int]) -> None:
        """Settle a job leaving its GPUs (the allocation is already released in the state)."""
        self._settle(jid, now)
        run = self.runs.pop(jid)
        run.version += 1
        touched.update(self._last_gpus.pop(jid, ()))

    def _refresh(self, gpus: set[int], now: float) -> None:
        """Recompute power, utilisation and the speed of every job on ``gpus``."""
        if not gpus:
            return
        self.power.account(now)
        state, runs, speed = self.state, self.runs, self.speed
        resident, running = state.resident, state.running
        jobs: set[int] = set()
        for g in gpus:
            jobs.update(resident[g])
        for jid in jobs:
            run = runs.get(jid)
            if run is not None and run.last_t != now:  # (a job started now is settled)
                self._settle(jid, now)
        power = self.power
        gpu_of, load_of = power._gpus_mv, power._loads_mv  # (power.scratch())  # the loads, written for one compiled call
        k = 0
        for g in gpus:
            here = resident[g]
            gpu_of[k] = g
            if not here:
                load_of[k] = NO_JOB
            elif len(here) == 1 and not running[here[0]].sharing.is_mps:
                load_of[k] = runs[here[0]].util  # alone on the GPU: the model's own utilisation
            else:
                load_of[k] = speed.shared_util(g)
            k += 1
        power.apply_loads(k)
        power_l = power.power_mv
        slow, last_gpus, jobs_of, spec_of = speed._slow, self._last_gpus, state.jobs, self._spec_cache
        done, written = self.done, self.written_out
        round_s = self._round_s if self.model.completion_at_round else None  # completions at round boundaries
        for jid in jobs:
            run = runs.get(jid)
            if run is None:
                continue
            alloc = running[jid]
            placed = last_gpus[jid] = alloc.gpus
            job = jobs_of[jid]
            # kept for the next straggler toggle: speed.alone_worst, written out
            worst: float | None = None
            if not written:
                worst = speed.alone_worst(job, alloc)
                c = job.class_index
            elif job.pipeline is None and not alloc.sharing.is_mps:
                c = job.class_index
                w = -math.inf
                for g in placed:
                    if len(resident[g]) != 1:
                        break
                    v = slow[g][c]
                    if v > w:
                        w = v
                else:
                    worst = w
            run.worst = worst
            if worst is None:
                run.iter_s = speed.iter_time(job, alloc, run.loc_mult, run.comm_s)
            else:  # the same float as iter_time
                spec = spec_of.get(job.model)
                run.base_s, run.cls = (spec or self.spec(job.model)).base_iter_s, c
                run.iter_s = run.base_s * worst * run.loc_mult + run.comm_s
            watts = 0.0  # the job's share of each of its GPUs' power
            for g in placed:
                watts += power_l[g] / len(resident[g])
            run.power_w = watts
            if written:
                self._complete_after(jid, run, now, job.work_iters - done[jid], round_s)
            else:
                self._schedule_completion(jid, run, now)
        power.mark(now)

    def _refresh_fresh(self, gpus: set[int], now: float, started: list[int]) -> None:
        """:meth:`_refresh` after a plain batch of starts (:attr:`Applied.plain`, the jobs ``started``):
        each GPU of ``gpus`` holds one job, started now, whose GPUs are all in ``gpus``, so no job
        is settled, no GPU shared and each job's power is the sum of its GPUs' (the steps of the
        written-out path without those checks: the same floats, in the same order). One whole job:
        each of its GPUs gets its utilisation (one load for the compiled call)."""
        if not gpus:
            return
        power = self.power  # (accounted, loaded and marked at now in one call below: power.change)
        state, runs, speed = self.state, self.runs, self.speed
        resident, running = state.resident, state.running
        jobs: set[int] = set()  # (filled in the order _refresh fills it: the same iteration order)
        gpu_of, load_of = power._gpus_mv, power._loads_mv  # (power.scratch())
        k = 0
        if len(started) == 1 and not running[started[0]].sharing.is_mps:
            jobs.add(started[0])
            for g in gpus:
                gpu_of[k] = g
                k += 1
            power.change(now, k, runs[started[0]].util)
        else:
            add = jobs.add
            for g in gpus:
                jid = resident[g][0]
                add(jid)
                gpu_of[k] = g
                load_of[k] = speed.shared_util(g) if running[jid].sharing.is_mps else runs[jid].util
                k += 1
            power.change(now, k)
        power_l = power.power_mv
        slow, last_gpus, jobs_of, spec_of = speed._slow, self._last_gpus, state.jobs, self._spec_cache
        done, class_of = self.done, _CLASS_INDEX
        round_s = self._round_s if self.model.completion_at_round else None
        for jid in jobs:
            run = runs[jid]
            alloc = running[jid]
            placed = last_gpus[jid] = alloc.gpus
            job = jobs_of[jid]
            watts = 0.0  # (its one job's share of each GPU: the GPU's power / 1)
            if job.pipeline is None and not alloc.sharing.is_mps:
                c = class_of.get(job.perf_class)  # (job.class_index without its call)
                if c is None:
                    c = job.class_index  # (its error)
                w = -math.inf
                for g in placed:  # its slowest GPU, and its power
                    v = slow[g][c]
                    if v > w:
                        w = v
                    watts += power_l[g]
                run.worst = w
                spec = spec_of.get(job.model)
                run.base_s, run.cls = (spec or self.spec(job.model)).base_iter_s, c
                run.iter_s = run.base_s * w * run.loc_mult + run.comm_s
            else:
                run.worst = None
                run.iter_s = speed.iter_time(job, alloc, run.loc_mult, run.comm_s)
                for g in placed:
                    watts += power_l[g]
            run.power_w = watts
            self._complete_after(jid, run, now, job.work_iters - done[jid], round_s)

    def _complete_after(self, jid: int, run: _Run, now: float, left: float, round_s: float | None) -> None:
        """:meth:`_schedule_completion` and :meth:`_arm` written out (the same floats) for a job with
        ``left`` iterations to go; ``round_s`` when completions wait for round boundaries."""
        wait = run.resume_at - now
        delay = (wait if wait > 0.0 else 0.0) + (left if left > 0.0 else 0.0) * run.iter_s
        if round_s:  # PAL's simulator notices completions at round boundaries (as _schedule_completion)
            delay = round_delay(now, delay, self._first_arrival, round_s)
        due = run.due = now + delay
        armed = run.armed_at
        if armed is None or armed > due:
            version = run.version = run.version + 1
            env = self.env
            t = run.armed_at = env.now + delay
            heapq.heappush(env.heap, (t, NORMAL, env.order, self._on_due, (jid, run, version)))
            env.order += 1

    def _schedule_completion(self, jid: int, run: _Run, now: float) -> None:
        """Set the job's completion time. An armed event that would fire no later than the new time
        is kept (it re-arms itself when it fires early), so a slowdown costs no new event."""
        left = self.state.jobs[jid].work_iters - self.done[jid]
        wait = run.resume_at - now
        delay = (wait if wait > 0.0 else 0.0) + (left if left > 0.0 else 0.0) * run.iter_s  # max(0.0, x) as a comparison
        if self.model.completion_at_round and self._round_s:
            delay = round_delay(now, delay, self._first_arrival, self._round_s)
        run.due = now + delay
        if run.armed_at is not None and run.armed_at <= run.due:
            return
        run.version += 1
        self._arm(jid, run, delay)

    def _arm(self, jid: int, run: _Run, delay: float) -> None:
        """Arm the job's completion event ``delay`` from now (:meth:`EventClock.schedule`, written
        out); it is stale when the job's ``_Run`` was replaced or re-armed since (``version``)."""
        env = self.env
        t = run.armed_at = env.now + delay
        heapq.heappush(env.heap, (t, NORMAL, env.order, self._on_due, (jid, run, run.version)))
        env.order += 1

    # -- events ------------------------------------------------------------------------------
    def _due(self, ev: tuple[int, _Run, int]) -> None:
        """A completion event ``(job id, its run, the run's version when armed)``: stale when the
        run was replaced or re-armed since; re-armed when the job slowed down since; else the job
        finishes."""
        jid, run, version = ev
        if run.version != version or self.runs.get(jid) is not run:
            return
        now = self.env.now
        if run.due > now:  # slowed down since the event was armed: fire again when really done
            self._arm(jid, run, run.due - now)
            return
        power = self.power  # (accounted to now below, before its loads change)
        state = self.state
        job = state.jobs[jid]
        rec = self.records[jid]
        if not self.written_out:
            self._settle(jid, now)
        else:  # settle (as _settle; the job's work is set done just below)
            dt = now - run.last_t
            if dt > 0:
                a = dt * job.num_gpus  # (one product for the service and the GPU-seconds)
                self.attained[jid] += a
                rec.gpu_seconds += a
                rec.energy_j += dt * run.power_w
            run.last_t = now
        self.done[jid] = job.work_iters
        alloc = state.running.pop(jid)  # state.finish(jid), written out
        state._place(state.jobs.pop(jid), alloc.gpus, -1)
        del self.runs[jid]
        self._last_gpus.pop(jid, None)
        if not self.written_out:
            count_finished(rec, now)
        else:  # count_finished, written out
            rec.finish_s = now
            rec.deadline_met = None if job.deadline_s is None else deadline_met(job, now)
        if job.tracked:
            self._tracked_left -= 1
        placed = alloc.gpus
        gpus = {placed[0]} if len(placed) == 1 else set(placed)
        resident, gpu_of = state.resident, power._gpus_mv  # (power.scratch()[0])
        k = 0
        for g in gpus:  # (written in the set's order for the compiled call below)
            if resident[g]:  # jobs stay on its GPUs: re-time them
                self._refresh(gpus, now)  # (accounts to now first)
                break
            gpu_of[k] = g
            k += 1
        else:  # its GPUs are empty now: what _refresh does for them (account, loads, mark)
            power.change(now, k, NO_JOB)
        self._trigger |= self._events
        self.completed.append(jid)
        if self.checker is not None:
            self.checker.on_finish(jid)

    def _arrive(self, i: int) -> None:
        """Submit job ``i`` (and any job arriving at the same instant); schedule the next arrival."""
        jobs = self.jobs
        t = jobs[i].arrival_s
        while i < len(jobs) and jobs[i].arrival_s == t:
            self.state.submit(jobs[i])
            i += 1
        self._trigger |= self._events
        if i < len(jobs):
            nxt = self._next_arrival_s = jobs[i].arrival_s
            env = self.env  # env.schedule(nxt - env.now, self._arrive, i), written out (nxt > now)
            now = env.now
            heapq.heappush(env.heap, (now + (nxt - now), NORMAL, env.order, self._arrive, i))
            env.order += 1
        else:
            self._arrivals_done = True

    def _first_tick(self, round_s: float) -> None:
        """The round ticks' first step: the first tick is at the first arrival."""
        if self.jobs:
            self.env.schedule(self.jobs[0].arrival_s, self._tick, round_s)
        else:
            self._tick(round_s)

    def _tick(self, round_s: float) -> None:
        """A round tick: a decision point; arms the next one (past idle ticks, :meth:`_idle_ticks`)."""
        self._trigger = True
        skip = not self.model.failures.mtbf_h  # a failure or repair is a decision point of its own
        idle = skip and not self.runs and not self.state.pending and not self._arrivals_done
        self.env.schedule(self._idle_ticks(round_s) if idle else round_s, self._tick, round_s)

    def _idle_ticks(self, round_s: float) -> float:
        """The delay to the last tick at or before the next arrival, on an idle cluster (nothing runs,
        nothing waits, no failures): the ticks in between see the same empty cluster and can change
        nothing, so they are skipped; the last one is kept (a round-based policy sees the same
        time since its last round at the arrival). Tick times are the same float sums as one tick
        at a time; past :data:`_EXACT_TICKS` skipped ticks, the product instead."""
        now, nxt = float(self.env.now), self._next_arrival_s
        t, n = now, 0
        while n < _EXACT_TICKS and t + round_s <= nxt:
            t += round_s
            n += 1
        if n == _EXACT_TICKS:
            t += math.floor((nxt - t) / round_s) * round_s
            while t > nxt:
                t -= round_s
        if n < 2 or t <= now:
            return round_s
        delay = t - now
        while now + delay < t:  # an event ``delay`` from now fires at now + delay: hit t exactly
            delay = math.nextafter(delay, math.inf)
        while now + delay > t:
            delay = math.nextafter(delay, -math.inf)
        return delay

    # -- process hooks (gpusched_env.cluster.processes.Host) ---------------------------------
    def set_straggle(self, g: int, factor: float) -> None:
        """A transient slowdown starts or ends on GPU ``g``: only the speed of its jobs changes.
        One toggle through :meth:`_toggles` (the batch loop), or, with ``incremental_toggles =
        False`` or completions at round boundaries, the plain steps (the same floats)."""
        if self.incremental_toggles and not (self._round_s and self.model.completion_at_round):
            self._toggles([self.env.now, g, float(factor)], math.inf, -math.inf)  # a batch of one toggle
            return
        speed = self.speed
        speed.toggle(g, factor)
        now = self.env.now
        for jid in self.state.resident[g]:
            run = self.runs[jid]
            self._settle(jid, now)
            run.iter_s = speed.iter_time(self.state.jobs[jid], self.state.running[jid], run.loc_mult, run.comm_s)
            run.worst = None
            self._schedule_completion(jid, run, now)

    def set_factors(self, factors: np.ndarray) -> None:
        """The variability factors drifted: every job's speed changes."""
        self.power.account(self.env.now)
        if self._stragglers is not None:
            self._stragglers.flush_all(self.speed.set_straggle)
        self.speed.set_factors(factors)
        self._refresh(set(range(self.topology.n_gpus)), self.env.now)

    def fail_node(self, node: int, checkpoint_interval_s: float) -> None:
        """Node ``node`` fails: its jobs lose the work since their last checkpoint and requeue."""
        now = self.env.now
        self.power.account(now)
        gpus = list(self.topology.node_gpus(node))
        victims = sorted({j for g in gpus for j in self.state.resident[g]})
        touched: set[int] = set()
        for jid in victims:
            iter_s = self.runs[jid].iter_s
            alloc = self.state.release(jid)
            self._stop_run(jid, now, touched)
            touched.update(alloc.gpus)
            lost_t = (now - alloc.since_s) % checkpoint_interval_s
            self.done[jid] = max(0.0, self.done[jid] - lost_t / iter_s)
            self.state.requeue(jid)
            count_preempted(self.records[jid])
        self.state.set_up(gpus, False)
        self._refresh(touched, now)
        self._trigger = True

    def repair_node(self, node: int) -> None:
        self.power.account(self.env.now)
        self.state.set_up(list(self.topology.node_gpus(node)), True)
        self._trigger = True

    # -- results -----------------------------------------------------------------------------
    def result(self) -> RunResult:
        """The run's records and totals (``gpusched_env.run_rules.assemble_result``); a deadlocked
        run says so in ``extra`` (metric ``deadlocked`` = 1)."""
        p = self.power
        return assemble_result(
            [self.records[j.job_id] for j in self.jobs], self.topology.n_gpus, float(self.env.now), p.energy_j,
            p.busy_gpu_s, p.min_power * self.env.now, p.timeline, {"deadlocked": 1.0} if self.deadlocked else None,
        )
