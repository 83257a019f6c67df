"""The discrete-event cluster simulator: one implementation of the backend protocol (SimPy).

Job speed: iteration time = base time of its model on the GPU type × max over its GPUs of
(variability factor for its class × co-location slowdown × transient straggler factor) × locality.
Progress is integrated exactly between events; a job's completion event is armed for its current
speed (moved earlier when it speeds up, re-armed when it fires early after a slowdown). Energy, busy
GPU-time and per-job energy are integrated the same way.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator
from dataclasses import dataclass, field

import numpy as np
import simpy

from gpusched_env.allocation import Allocation, Applied, ClusterState
from gpusched_env.catalog import GPUS, ModelSpec, model_spec
from gpusched_env.fitted import (
    QUANTILE_GRID,
    STRAGGLER_EPISODE_SAMPLES,
    STRAGGLER_FRACTION,
    STRAGGLER_SLOWDOWN,
)
from gpusched_env.invariants import InvariantChecker
from gpusched_env.metrics import RunResult, Timeline
from gpusched_env.power import PowerConfig, gpu_power_w
from gpusched_env.device.analytic import AnalyticDevice, SharingConfig
from gpusched_env.device.model import Tenant
from gpusched_env.topology import Topology
from gpusched_env.types import Decision, Job, JobRecord
from gpusched_env.variability import VariabilityConfig, drift, sample_factors
from gpusched_env.view import ClusterView, JobProgress, readonly


@dataclass(frozen=True)
class LocalityConfig:
    """``scenario.model.locality``: ``constant`` = PAL's penalty ``lf`` when a job spans nodes;
    ``bandwidth`` = ring all-reduce of 4 B × parameters per iteration over the slowest link spanned."""

    mode: str = "constant"  # constant (PAL's lf) or bandwidth (all-reduce over the slowest link)
    lf: float = 1.7  # PAL default (CALIBRATION.md)

    def __post_init__(self) -> None:
        if self.mode not in ("constant", "bandwidth"):
            raise ValueError(f"locality.mode must be constant or bandwidth, got {self.mode!r}")


@dataclass(frozen=True)
class StragglerConfig:
    """``scenario.model.stragglers``: transient per-GPU slowdowns (off by default).

    Each GPU alternates normal and straggling periods (exponential lengths). The straggling share
    (``fraction``), mean episode length and slowdown distribution come from the Alibaba PAI
    mini-batch data (fitted.STRAGGLERS); ``sample_s`` (the data's sampling step in seconds) is a
    choice, as the data gives sample indices, not seconds. ``fraction_scale`` scales the share: the
    PAI workers shared GPUs, so dedicated-GPU clusters straggle less (choice).
    """

    enabled: bool = False  # transient stragglers on/off
    fraction_scale: float = 0.1  # choice: x the PAI straggling share (36.7 %); PAI workers shared GPUs
    sample_s: float = 10.0  # choice: seconds per sample of the PAI mini-batch series


@dataclass(frozen=True)
class FailureConfig:
    """``scenario.model.failures``: node failures (off when ``mtbf_h`` is null)."""

    mtbf_h: float | None = None  # mean time between failures of one node (hours); null = no failures
    repair_s: float = 3600.0  # choice
    checkpoint_interval_s: float = 1800.0  # choice: work since the last checkpoint is lost


@dataclass(frozen=True)
class SimModel:
    """``scenario.model``: every physical option of the simulator."""

    variability: VariabilityConfig = field(default_factory=VariabilityConfig)
    locality: LocalityConfig = field(default_factory=LocalityConfig)
    power: PowerConfig = field(default_factory=PowerConfig)
    sharing: SharingConfig = field(default_factory=SharingConfig)
    stragglers: StragglerConfig = field(default_factory=StragglerConfig)
    failures: FailureConfig = field(default_factory=FailureConfig)
    restart_cost_s: float = 0.0  # checkpoint restore time (s) after a preemption or migration
    start_cost_s: float = 0.0  # set-up time (s) before a job's first iteration (process start, imports)
    timeline: bool = True  # keep the (time, busy GPUs, power) series for plots
    completion_at_round: bool = False  # PAL artifact: a job ends (frees GPUs) at the round boundary


@dataclass
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


class Simulator:
    """SimPy cluster simulator implementing :class:`gpusched_env.policy.Backend`."""

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
        ss = np.random.SeedSequence(seed)
        (self._rng_var, self._rng_drift, self._rng_strag, self._rng_fail) = (
            np.random.default_rng(s) for s in ss.spawn(4)
        )
        self.factors = (
            np.asarray(slowdown_profile, dtype=float)
            if slowdown_profile is not None
            else sample_factors(topology.n_gpus, self.model.variability, self._rng_var)
        )
        self.visible_slowdown = self.factors.copy()
        self.state = ClusterState(topology, max_jobs_per_gpu)
        self.device = AnalyticDevice(self.model.sharing)
        self.env = simpy.Environment()
        self.jobs = sorted(jobs, key=lambda j: (j.arrival_s, j.job_id))
        self._check_jobs()
        self.records: dict[int, JobRecord] = {j.job_id: JobRecord(j) for j in self.jobs}
        self.done: dict[int, float] = {j.job_id: 0.0 for j in self.jobs}
        self.attained: dict[int, float] = {j.job_id: 0.0 for j in self.jobs}
        self.runs: dict[int, _Run] = {}
        n = topology.n_gpus
        types = [GPUS[t] for t in topology.gpu_types]
        self._idle_w = np.array([types[i].idle_w for i in topology.gpu_type_idx])
        self._busy_w = np.array([types[i].busy_w for i in topology.gpu_type_idx])
        self._speed = np.array([types[i].speed for i in topology.gpu_type_idx])
        self.gpu_power = self._idle_w.copy()
        self._idle_l: list[float] = self._idle_w.tolist()  # Python mirrors: cheap scalar access
        self._busy_l: list[float] = self._busy_w.tolist()
        self._power_l: list[float] = self.gpu_power.tolist()
        self.gpu_util = np.zeros(n)
        self.straggle = np.ones(n)
        self._update_slowness()
        self.node_busy = [0] * topology.n_nodes  # GPUs holding jobs per node
        self._node_idle_gpu_w = np.bincount(topology.gpu_node, weights=self._idle_w, minlength=topology.n_nodes)
        self.cluster_power = float(self.gpu_power.sum()) + sum(
            self._node_power(node, 0) for node in range(topology.n_nodes)
        )
        self.energy_j = 0.0
        self.busy_gpu_s = 0.0
        self._busy_gpus = 0
        self._last_t = 0.0
        self._min_power = float(self._idle_w.sum()) + sum(
            min(self._node_power(node, 0), self._node_power(node, 1)) for node in range(topology.n_nodes)
        )
        self._tracked_left = sum(1 for j in self.jobs if j.tracked)
        self._trigger = False
        self._events = True
        self.timeline = Timeline() if self.model.timeline else None
        self.checker = checker
        self._busy_set: set[int] = set()
        self._last_gpus: dict[int, tuple[int, ...]] = {}
        self._round_s: float | None = None
        self._next_wake = -math.inf  # the round boundary wake_next_round last scheduled
        self._idle_points = 0
        self.deadlocked = False
        self._first_arrival = self.jobs[0].arrival_s if self.jobs else 0.0
        self._last_finish = 0.0
        self._arrivals_done = False
        self._ro: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    # -- set-up ------------------------------------------------------------------------------
    def _check_jobs(self) -> None:
        n = self.topology.n_gpus
        for j in self.jobs:
            if j.num_gpus > n:
                raise ValueError(f"job {j.job_id} needs {j.num_gpus} GPUs; the cluster has {n}")
            self.spec(j.model)

    def spec(self, model: str) -> ModelSpec:
        spec = self._spec_cache.get(model)
        if spec is None:
            spec = self._spec_cache[model] = self.models.get(model) or model_spec(model)
        return spec

    def _node_power(self, node: int, busy: int) -> float:
        """Node power beside its GPUs' own. A sleeping node draws ``sleep_w`` in all, GPUs included,
        so its term is ``sleep_w`` minus the idle power its GPUs are booked at."""
        p = self.model.power
        if busy == 0 and p.low_power_idle:
            return p.sleep_w - float(self._node_idle_gpu_w[node])
        return p.node_base_w

    # -- backend protocol --------------------------------------------------------------------
    def start(self, round_s: float | None, events: bool = True, ticks: bool = True) -> None:
        """Begin the run. ``round_s`` sets the round grid (ticks, completions at round boundaries);
        ``ticks=False`` keeps the grid but makes no tick a decision point by itself (see
        :meth:`wake_at`)."""
        self._events = events
        if self.jobs:
            self.env.timeout(self.jobs[0].arrival_s).callbacks.append(lambda _e: self._arrive(0))
        else:
            self._arrivals_done = True
        if round_s and ticks:
            self.env.process(self._ticks(round_s))
        m = self.model
        if m.stragglers.enabled:
            frac = min(0.99, STRAGGLER_FRACTION * m.stragglers.fraction_scale)
            self._strag_mean_on = STRAGGLER_EPISODE_SAMPLES * m.stragglers.sample_s
            self._strag_mean_off = self._strag_mean_on * (1 - frac) / frac
            self._strag_buf: list[tuple[float, float]] = []
            for g in range(self.topology.n_gpus):
                self._straggler(g, on=False)
        if m.variability.drift_sigma > 0:
            self.env.process(self._drift())
        if m.failures.mtbf_h:
            for node in range(self.topology.n_nodes):
                self.env.process(self._failures(node))
        self._round_s = round_s

    def advance(self, wake: Callable[[], bool] | None = None) -> bool:
        """Run to the next decision point; False when the run is over.

        ``wake`` (optional) filters decision points: one where it returns False is passed over
        without returning (the env uses it to skip points at which no start is possible).
        """
        env = self.env
        while True:
            if self._tracked_left == 0:
                self._finalise()
                return False
            t = env.peek()
            if t == math.inf:
                self._finalise()
                return False
            self._trigger = False
            while env.peek() == t:
                env.step()
            self._check()
            if self._trigger:
                if self._stalled():
                    self.deadlocked = True
                    self._finalise()
                    return False
                if wake is None or wake():
                    return True

    def wake_at(self, t: float) -> None:
        """Make ``t`` a decision point (one extra, one-off; for backends started without rounds)."""
        if t > self.env.now:
            self.env.timeout(t - self.env.now).callbacks.append(self._wake)

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

    def _stalled(self) -> bool:
        """True when nothing runs, nothing more arrives, and the policy keeps starting nothing."""
        if self.runs or len(self.state.jobs) < self._tracked_left or not self.state.pending:
            self._idle_points = 0
            return False
        if self.state.all_up and self._arrivals_done:
            self._idle_points += 1
        return self._idle_points > 3

    def view(self) -> ClusterView:
        if self._ro is None:
            self._ro = (readonly(self.visible_slowdown), readonly(self.gpu_power), readonly(self.gpu_util))
        slow, power, util = self._ro
        return ClusterView(self.state, self.env.now, slow, self.progress, power, util)

    def apply(self, decisions: list[Decision]) -> None:
        now = self.env.now
        applied = self.state.apply(decisions, now)
        if not applied.touched_gpus_empty:
            self._idle_points = 0
        self._on_applied(applied, now)
        self._check()

    def _check(self) -> None:
        if self.checker is not None:
            now = self.env.now
            self.checker.check(self.state, now, self.energy_now(), self._min_power * now)

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

    def _settle(self, job_id: int, now: float) -> None:
        """Bring a running job's progress, service and energy up to ``now``."""
        run = self.runs[job_id]
        job = self.state.jobs[job_id]
        dt = now - run.last_t
        if dt > 0:
            work_dt = max(0.0, now - max(run.last_t, run.resume_at))
            self.done[job_id] = min(job.work_iters, self.done[job_id] + work_dt / run.iter_s)
            self.attained[job_id] += dt * job.num_gpus
            rec = self.records[job_id]
            rec.gpu_seconds += dt * job.num_gpus
            rec.energy_j += dt * run.power_w
        run.last_t = now

    def _update_slowness(self, g: int | None = None) -> None:
        """Refresh ``_slow[g][c]`` = factor x straggle / speed (all GPUs when ``g`` is None): the
        exclusive per-GPU slowness, as Python lists for cheap scalar access."""
        if g is None:
            self._slow: list[list[float]] = (self.factors * self.straggle[:, None] / self._speed[:, None]).tolist()
            self._factors_l: list[list[float]] = self.factors.tolist()
            self._speed_l: list[float] = self._speed.tolist()
        else:
            st, sp = float(self.straggle[g]), self._speed_l[g]
            self._slow[g] = [f * st / sp for f in self._factors_l[g]]

    def _iter_time(self, job: Job, run: _Run, alloc: Allocation) -> float:
        """Seconds per iteration of ``job`` on its allocation (see the module docstring)."""
        spec = self.spec(job.model)
        c = job.class_index
        gpus = alloc.gpus
        resident = self.state.resident
        whole = not alloc.sharing.is_mps
        if len(gpus) == 1 and whole and len(resident[gpus[0]]) == 1:
            return spec.base_iter_s * self._slow[gpus[0]][c]  # one GPU: no locality term
        if whole and all(len(resident[g]) == 1 for g in gpus):  # alone on each GPU
            slow = self._slow
            worst = max(slow[g][c] for g in gpus)
        else:
            topo = self.topology
            worst = 0.0
            for g in gpus:
                outcome = self.device.share(topo.gpu_type_of(g), self._tenants(g))
                sd = outcome.tenants[resident[g].index(job.job_id)].slowdown
                worst = max(worst, float(self.factors[g, c] * self.straggle[g] * sd / self._speed[g]))
        t = spec.base_iter_s * worst
        return t * run.loc_mult + run.comm_s

    def _placement_cost(self, job: Job, gpus: tuple[int, ...]) -> tuple[float, float]:
        """(multiplier, added seconds) of the locality model for a placement."""
        if len(gpus) <= 1:
            return 1.0, 0.0
        loc = self.model.locality
        level = self.topology.locality(gpus)
        if loc.mode == "constant":
            return (loc.lf if level != "node" else 1.0), 0.0
        link = self.topology.links[level]
        n = len(gpus)
        volume = 2 * (n - 1) / n * 4e6 * self.spec(job.model).params_m
        return 1.0, volume / (link.bandwidth_gbps * 1e9) + 2 * (n - 1) * link.latency_s

    def _tenants(self, g: int) -> tuple[Tenant, ...]:
        out = []
        for jid in self.state.resident[g]:
            spec = self.spec(self.state.jobs[jid].model)
            out.append(Tenant(spec.name, min(spec.util, 1.0), self.state.running[jid].sharing))
        return tuple(out)

    # -- state changes -----------------------------------------------------------------------
    def energy_now(self) -> float:
        """Cluster energy (J) up to now."""
        return self.energy_j + self.cluster_power * (self.env.now - self._last_t)

    def _account(self, now: float) -> None:
        """Integrate energy and busy GPU-seconds up to ``now``. Called before every change of
        power or load (and at the end), never merely because time passed, so the sums are the
        same however many decision points a backend stops at."""
        dt = now - self._last_t
        if dt > 0:
            self.energy_j += self.cluster_power * dt
            self.busy_gpu_s += self._busy_gpus * dt
            self._last_t = now

    def _on_applied(self, applied: Applied, now: float) -> None:
        touched: set[int] = set()
        for jid in applied.preempted:
            self._stop_run(jid, now, touched)
            rec = self.records[jid]
            rec.preemptions += 1
        for jid in applied.migrated:
            self._stop_run(jid, now, touched)
            self.records[jid].migrations += 1
        for jid in applied.migrated + applied.started:
            self._start_run(jid, now, touched)
        self._refresh(touched, now)

    def _start_run(self, jid: int, now: float, touched: set[int]) -> None:
        rec = self.records[jid]
        restarted = rec.first_start_s is not None
        if rec.first_start_s is None:
            rec.first_start_s = now
        if restarted:
            rec.restarts += 1
        cost = self.model.restart_cost_s if restarted else self.model.start_cost_s
        gpus = self.state.running[jid].gpus
        job = self.state.jobs[jid]
        mult, comm = self._placement_cost(job, gpus)
        self.runs[jid] = _Run(
            last_t=now, resume_at=now + cost, loc_mult=mult, comm_s=comm,
            util=min(1.0, max(0.0, self.spec(job.model).util)),
        )
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
        self._account(now)
        state, runs = self.state, self.runs
        resident, running = state.resident, state.running
        jobs: set[int] = set()
        for g in gpus:
            jobs.update(resident[g])
        for jid in jobs:
            if jid in runs:
                self._settle(jid, now)
        idle_w, busy_w, power_l = self._idle_l, self._busy_l, self._power_l
        gpu_power, gpu_util = self.gpu_power, self.gpu_util
        busy_set, sleepy = self._busy_set, self.model.power.low_power_idle
        gpu_node, node_busy = self.topology.node_of_gpu, self.node_busy
        delta = 0.0
        for g in gpus:
            here = resident[g]
            if not here:
                u, p = 0.0, idle_w[g]
            else:
                if len(here) == 1 and not running[here[0]].sharing.is_mps:
                    u = runs[here[0]].util  # alone on the GPU: the model's own utilisation
                else:
                    u = self.device.share(self.topology.gpu_type_of(g), self._tenants(g)).util
                p = gpu_power_w(idle_w[g], busy_w[g], u)
            delta += p - power_l[g]
            power_l[g] = p
            gpu_power[g] = p
            gpu_util[g] = u
            is_busy = bool(here)
            if (g in busy_set) != is_busy:
                node = gpu_node[g]
                if sleepy:  # only sleeping nodes change node power with their GPUs' load
                    old = self._node_power(node, node_busy[node])
                    node_busy[node] += 1 if is_busy else -1
                    delta += self._node_power(node, node_busy[node]) - old
                else:
                    node_busy[node] += 1 if is_busy else -1
                if is_busy:
                    self._busy_gpus += 1
                    busy_set.add(g)
                else:
                    self._busy_gpus -= 1
                    busy_set.discard(g)
        self.cluster_power += delta
        for jid in jobs:
            run = runs.get(jid)
            if run is None:
                continue
            alloc = running[jid]
            self._last_gpus[jid] = alloc.gpus
            run.iter_s = self._iter_time(state.jobs[jid], run, alloc)
            watts = 0.0  # the job's share of each of its GPUs' power
            for g in alloc.gpus:
                watts += power_l[g] / len(resident[g])
            run.power_w = watts
            self._schedule_completion(jid, run, now)
        if self.timeline is not None:
            self.timeline.add(now, self._busy_gpus, self.cluster_power)

    def _schedule_completion(self, jid: int, run: _Run, now: float) -> None:
        """Set the job's completion time. An armed event that would fire no later than the new time
        is kept (it re-arms itself when it fires early), so a slowdown costs no new event."""
        left = self.state.jobs[jid].work_iters - self.done[jid]
        delay = max(0.0, run.resume_at - now) + max(0.0, left) * run.iter_s
        if self.model.completion_at_round and self._round_s:
            # PAL's simulator notices completions at round boundaries (CALIBRATION.md)
            origin = self._first_arrival
            k = math.ceil((now + delay - origin) / self._round_s - 1e-9)
            delay = origin + k * self._round_s - now
        run.due = now + delay
        if run.armed_at is not None and run.armed_at <= run.due:
            return
        run.version += 1
        self._arm(jid, run, delay)

    def _arm(self, jid: int, run: _Run, delay: float) -> None:
        run.armed_at = self.env.now + delay
        version = run.version
        self.env.timeout(delay).callbacks.append(lambda _e: self._complete(jid, run, version))

    # -- processes ---------------------------------------------------------------------------
    def _complete(self, jid: int, run: _Run, version: int) -> None:
        if run.version != version or self.runs.get(jid) is not run:
            return
        now = self.env.now
        if run.due > now:  # slowed down since the event was armed: fire again when really done
            self._arm(jid, run, run.due - now)
            return
        self._account(now)
        self._settle(jid, now)
        job = self.state.jobs[jid]
        self.done[jid] = job.work_iters
        alloc = self.state.finish(jid)
        del self.runs[jid]
        self._last_gpus.pop(jid, None)
        rec = self.records[jid]
        rec.finish_s = now
        if job.deadline_s is not None:
            rec.deadline_met = now <= job.deadline_s + 1e-9
        if job.tracked:
            self._tracked_left -= 1
            self._last_finish = max(self._last_finish, now)
        self._refresh(set(alloc.gpus), now)
        self._trigger |= self._events
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
            self.env.timeout(jobs[i].arrival_s - self.env.now).callbacks.append(lambda _e: self._arrive(i))
        else:
            self._arrivals_done = True

    def _ticks(self, round_s: float) -> Generator[simpy.Event, None, None]:
        env = self.env
        if self.jobs:
            yield env.timeout(self.jobs[0].arrival_s)
        while True:
            self._trigger = True
            yield env.timeout(round_s)

    def _straggler(self, g: int, on: bool) -> None:
        """Toggle GPU ``g`` between normal and straggling; schedule the next toggle (a callback
        chain rather than a SimPy process: cheaper per event)."""
        mag, exp = self._strag_draw()
        if on:
            self._set_straggle(g, mag)
            delay = exp * self._strag_mean_on
        else:
            if self.straggle[g] != 1.0:
                self._set_straggle(g, 1.0)
            delay = exp * self._strag_mean_off
        self.env.timeout(delay).callbacks.append(lambda _e: self._straggler(g, not on))

    def _strag_draw(self) -> tuple[float, float]:
        """(slowdown magnitude, standard exponential) from pre-drawn batches of the straggler stream."""
        if not self._strag_buf:
            rng = self._rng_strag
            mags = np.interp(rng.random(4096), QUANTILE_GRID, STRAGGLER_SLOWDOWN)
            self._strag_buf = list(zip(mags.tolist(), rng.standard_exponential(4096).tolist(), strict=True))
            self._strag_buf.reverse()
        return self._strag_buf.pop()

    def _set_straggle(self, g: int, factor: float) -> None:
        """A transient slowdown starts or ends on GPU ``g``: only the speed of its jobs changes."""
        self.straggle[g] = factor
        self._update_slowness(g)
        now = self.env.now
        for jid in self.state.resident[g]:
            run = self.runs[jid]
            self._settle(jid, now)
            run.iter_s = self._iter_time(self.state.jobs[jid], run, self.state.running[jid])
            self._schedule_completion(jid, run, now)

    def _drift(self) -> Generator[simpy.Event, None, None]:
        cfg = self.model.variability
        while True:
            yield self.env.timeout(cfg.drift_interval_s)
            self._account(self.env.now)
            self.factors = drift(self.factors, cfg.drift_sigma, self._rng_drift)
            self._update_slowness()
            self._refresh(set(range(self.topology.n_gpus)), self.env.now)

    def _failures(self, node: int) -> Generator[simpy.Event, None, None]:
        cfg = self.model.failures
        assert cfg.mtbf_h is not None
        env = self.env
        gpus = list(self.topology.node_gpus(node))
        while True:
            yield env.timeout(self._rng_fail.exponential(cfg.mtbf_h * 3600.0))
            now = env.now
            self._account(now)
            victims = sorted({j for g in gpus for j in self.state.resident[g]})
            touched: set[int] = set()
            for jid in victims:
                iter_s = self.runs[jid].iter_s
                alloc = self.state.release(jid)
                self._stop_run(jid, now, touched)
                touched.update(alloc.gpus)
                lost_t = (now - alloc.since_s) % cfg.checkpoint_interval_s
                self.done[jid] = max(0.0, self.done[jid] - lost_t / iter_s)
                self.state.requeue(jid)
                self.records[jid].preemptions += 1
            self.state.set_up(gpus, False)
            self._refresh(touched, now)
            self._trigger = True
            yield env.timeout(cfg.repair_s)
            self._account(env.now)
            self.state.set_up(gpus, True)
            self._trigger = True

    # -- results -----------------------------------------------------------------------------
    def _finalise(self) -> None:
        self._account(self.env.now)

    def result(self) -> RunResult:
        makespan = max(0.0, self._last_finish - self._first_arrival)
        return RunResult(
            records=[self.records[j.job_id] for j in self.jobs],
            n_gpus=self.topology.n_gpus,
            makespan_s=makespan,
            energy_j=self.energy_j,
            busy_gpu_s=self.busy_gpu_s,
            idle_floor_j=self._min_power * self.env.now,
            timeline=self.timeline,
            span_s=max(0.0, float(self.env.now) - self._first_arrival),
        )
