"""The simulator's fast paths against their plain definitions: the queue kept in deques, the
straggler timeline's written-out toggles and the incremental re-timing of a straggling GPU's jobs."""

from __future__ import annotations

import dataclasses
import heapq
from types import SimpleNamespace

import numpy as np
import pytest

from gpusched.baselines import get_policy
from gpusched_env.allocation import ClusterState
from gpusched_env.cluster.model import FailureConfig, SimModel, StragglerConfig
from gpusched_env.cluster.processes import Stragglers
from gpusched_env.cluster.simulator import Simulator
from gpusched_env.cluster.variability import VariabilityConfig
from gpusched_env.fitted import (
    QUANTILE_GRID,
    STRAGGLER_EPISODE_SAMPLES,
    STRAGGLER_FRACTION,
    STRAGGLER_SLOWDOWN,
)
from gpusched_env.policy import run_policy
from gpusched_env.topology import NodeGroup, Topology
from gpusched_env.types import Job, Preempt, Start

# -- the queue ------------------------------------------------------------------------------


def test_queue_matches_a_sorted_list_through_starts_preemptions_and_compaction():
    """Random submits (some out of arrival order), starts at the head and in the middle, and
    preemptions (back into the middle); 3,000 head starts pass the bulk drop of old keys twice.
    After every step the queue is the (arrival, id)-sorted list of the jobs waiting."""
    rng = np.random.default_rng(5)
    s = ClusterState(Topology.build([NodeGroup(1, 4, "V100", 16.0)]), max_jobs_per_gpu=64)
    waiting: dict[int, Job] = {}
    running: list[int] = []
    heads = 0

    def check() -> None:
        want = sorted(waiting.values(), key=lambda j: (j.arrival_s, j.job_id))
        assert list(s.pending) == want
        assert list(s.pending_ids) == [j.job_id for j in want]
        assert s.pending_gpus == len(want)

    for i in range(4000):
        late = rng.random() < 0.1  # an arrival time earlier than jobs already queued
        job = Job(i, float(i - 50 * late + rng.integers(0, 3)), 1, 10, "resnet50")
        s.submit(job)
        waiting[i] = job
        op = rng.random()
        if op < 0.75 and waiting:  # start the head (FIFO) or, now and then, a job further back
            ids = list(s.pending_ids)
            jid = ids[0] if rng.random() < 0.9 else ids[int(rng.integers(0, len(ids)))]
            heads += jid == ids[0]
            if len(running) == 64:  # keep the GPUs' job count within the limit: one leaves first
                s.finish(running.pop(0))
            s.apply([Start(jid, (int(rng.integers(0, 4)),))], float(i))
            running.append(jid)
            del waiting[jid]
        elif op < 0.8 and running:
            jid = running.pop(int(rng.integers(0, len(running))))
            s.apply([Preempt(jid)], float(i))
            waiting[jid] = s.jobs[jid]
        if i % 10 == 0 or i > 3990:
            check()
        for jid in list(waiting)[:3]:
            assert s.is_pending(jid)
        for jid in running[:3]:
            assert not s.is_pending(jid)
    assert heads > 2500 and s._k0 < 1024  # the keys that left the head were dropped


# -- the straggler timeline -----------------------------------------------------------------


class _PlainTimeline:
    """The straggler timeline as first written: a heap of (time, order, GPU, turns on) tuples, one
    draw (magnitude, exponential) per toggle from batches of 4,096 of the stream, taken in order."""

    def __init__(self, cfg: StragglerConfig, n: int, rng: np.random.Generator) -> None:
        frac = min(0.99, STRAGGLER_FRACTION * cfg.fraction_scale)
        self.mean_on = STRAGGLER_EPISODE_SAMPLES * cfg.sample_s
        self.mean_off = self.mean_on * (1 - frac) / frac
        self.rng, self.buf = rng, []
        self.slowed = [False] * n
        self.stale: dict[int, float] = {}
        self.heap: list[tuple[float, int, int, bool]] = []
        self.seq = 0
        for g in range(n):
            self.toggle(0.0, g, False)

    def draw(self) -> tuple[float, float]:
        if not self.buf:
            mags = np.interp(self.rng.random(4096), QUANTILE_GRID, STRAGGLER_SLOWDOWN)
            self.buf = list(zip(mags.tolist(), self.rng.standard_exponential(4096).tolist(), strict=True))[::-1]
        return self.buf.pop()

    def toggle(self, t: float, g: int, on: bool) -> float | None:
        mag, exp = self.draw()
        factor: float | None
        if on:
            self.slowed[g] = mag != 1.0
            factor, delay = mag, exp * self.mean_on
        else:
            factor = 1.0 if self.slowed[g] else None
            self.slowed[g] = False
            delay = exp * self.mean_off
        heapq.heappush(self.heap, (t + delay, self.seq, g, not on))
        self.seq += 1
        return factor

    def next_hit(self, limit: float, resident: list[list[int]]) -> tuple[float, int, float] | None:
        """Pop and toggle up to the first toggle before ``limit`` that touches jobs."""
        while self.heap and self.heap[0][0] < limit:
            t, _, g, on = heapq.heappop(self.heap)
            factor = self.toggle(t, g, on)
            if factor is None:
                continue
            if resident[g]:
                return t, g, factor
            self.stale[g] = factor
        return None


class _Host:
    """Takes the toggles that touch jobs; one of a GPU divisible by 3 moves the limit to 40 s
    after it (as a completion it arms would)."""

    def __init__(self, limit: float) -> None:
        self.limit = limit
        self.got: list[tuple[float, int, float]] = []

    def apply(self, t: float, g: int, factor: float) -> float:
        self.got.append((t, g, factor))
        if g % 3 == 0:
            self.limit = min(self.limit, t + 40.0)
        return self.limit


def test_run_before_makes_the_plain_toggles():
    """The compiled timeline against the plain one of the same seed, under changing limits (some
    moved earlier by the toggles themselves, as an armed completion does) and GPUs that hold jobs:
    the same hits, factors noted, GPU states and next toggle times (past refills of the draws);
    flushing hands over the noted factors in the GPUs' order and forgets them."""
    cfg = StragglerConfig(enabled=True, fraction_scale=2.0, sample_s=5.0)
    host = SimpleNamespace(env=SimpleNamespace(now=0.0))
    fast = Stragglers(host, cfg, 16, np.random.default_rng(3))  # type: ignore[arg-type]
    plain = _PlainTimeline(cfg, 16, np.random.default_rng(3))
    rng = np.random.default_rng(4)
    hits = 0
    limit = 0.0
    for step in range(3000):
        limit += float(rng.exponential(150.0))
        resident: list[list[int]] = [[1] if rng.random() < 0.3 else [] for _ in range(16)]
        host_side = _Host(limit)
        fast.run_before(limit, np.array([len(r) for r in resident], dtype=np.int64), host_side.apply)
        got = host_side.got
        want = []
        lim = limit
        while (b := plain.next_hit(lim, resident)) is not None:
            want.append(b)
            if b[1] % 3 == 0:
                lim = min(lim, b[0] + 40.0)
        assert got == want
        hits += len(got)
        limit = lim  # the next window starts where this one stopped
        assert fast.slowed == plain.slowed and fast.stale == plain.stale
        assert fast.next_t == plain.heap[0][0]
        if step % 7 == 0:  # a job starts on GPUs 2, 5 and 11
            told: list[tuple[int, float]] = []
            fast.flush([11, 2, 5], lambda g, f, out=told: out.append((g, f)))
            assert told == [(g, plain.stale.pop(g)) for g in (11, 2, 5) if g in plain.stale]
            assert fast.stale == plain.stale
    assert hits > 2000 and plain.seq > 2 * 4096  # past two refills
    told = []
    fast.flush_all(lambda g, f, out=told: out.append((g, f)))
    assert told == sorted(plain.stale.items()) and fast.stale == {}


def test_toggled_slowness_rows_are_the_product():
    """After straggler toggles (the end of a period takes a kept row) and drift steps, each GPU's
    slowness row is factor x straggle / speed computed afresh, float for float."""
    topo = Topology.build([NodeGroup(2, 4, "V100", 16.0), NodeGroup(1, 4, "P100", 16.0)])
    sim = Simulator(topo, _jobs(4, 1), SimModel(), seed=2)
    speed, rng = sim.speed, np.random.default_rng(8)
    straggle = [1.0] * topo.n_gpus
    for step in range(400):
        g = int(rng.integers(0, topo.n_gpus))
        straggle[g] = 1.0 if rng.random() < 0.5 else float(rng.uniform(1.0, 3.0))
        _, new = speed.toggle(g, straggle[g])
        want = (speed.factors * np.array(straggle)[:, None] / speed.speed[:, None]).tolist()
        assert speed._slow == want and new == want[g]
        if step % 50 == 49:
            speed.set_factors(speed.factors * rng.uniform(0.9, 1.1, speed.factors.shape))


# -- incremental re-timing of a straggling GPU's jobs ---------------------------------------

MODELS = ["resnet50", "vgg19", "bert", "dcgan", "alexnet", "resnet18"]


def _jobs(n: int, seed: int) -> list[Job]:
    rng = np.random.default_rng(seed)
    return [
        Job(i, float(rng.uniform(0, 20000)), int(rng.choice([1, 1, 2, 4, 8, 12])), float(rng.integers(200, 20000)),
            MODELS[int(rng.integers(0, len(MODELS)))], perf_class="ABCD"[int(rng.integers(0, 4))], mem_gb=4.0)
        for i in range(n)
    ]


def _run(policy: str, incremental: bool, model: SimModel, checked: list[int] | None = None) -> Simulator:
    topo = Topology.build([NodeGroup(3, 4, "V100", 16.0), NodeGroup(1, 4, "P100", 16.0)])
    jobs = [  # every third job with a deadline (met or missed: a completion's record is written out)
        dataclasses.replace(j, deadline_s=j.arrival_s + 4 * j.work_iters) if j.job_id % 3 == 0 else j
        for j in _jobs(120, 1)
    ]
    sim = Simulator(topo, jobs, model, seed=2)
    sim.incremental_toggles = sim.written_out = incremental
    if checked is not None:  # every toggle leaves each job there at iter_time's speed
        plain_toggle = sim.set_straggle

        def toggle(g: int, factor: float) -> None:
            plain_toggle(g, factor)
            for jid in sim.state.resident[g]:
                run = sim.runs[jid]
                want = sim.speed.iter_time(sim.state.jobs[jid], sim.state.running[jid], run.loc_mult, run.comm_s)
                assert run.iter_s == want
                checked[0] += 1
                checked[1] += run.worst is not None

        sim.set_straggle = toggle  # type: ignore[method-assign]
        batch = sim._toggles

        def one_at_a_time(hits: list[float], limit: float, last_t: float) -> tuple[int, float]:
            """The flat batch path, fed one toggle at a time, checked after each."""
            for i in range(0, len(hits), 3):
                k, limit = batch(hits[i : i + 3], limit, last_t)
                for jid in sim.state.resident[int(hits[i + 1])]:
                    run = sim.runs[jid]
                    want = sim.speed.iter_time(sim.state.jobs[jid], sim.state.running[jid], run.loc_mult, run.comm_s)
                    assert run.iter_s == want
                    checked[0] += 1
                    checked[1] += run.worst is not None
                if k >= 0:
                    checked[2] += 1
                    return i // 3 + k, limit
            return -1, limit

        sim._toggles = one_at_a_time  # type: ignore[method-assign]
    run_policy(sim, get_policy(policy))
    return sim


@pytest.mark.parametrize("policy", ["fifo", "gandiva", "las"])
def test_incremental_toggles_give_the_plain_floats(policy):
    """fifo (whole jobs alone on 1-12 GPUs), gandiva (co-located jobs: the plain path) and las
    (preemptions and restarts), with stragglers, drift and node failures: the incremental
    re-timing and the steps written out in the re-timing after starts and completions and in a
    completion's settle give every job's records float for float as the plain steps, and after every
    toggle each job there runs at ``iter_time``'s speed (the flat batch path, :meth:`Simulator._toggles`,
    fed one toggle at a time, against the plain per-toggle steps)."""
    model = SimModel(
        stragglers=StragglerConfig(enabled=True, fraction_scale=1.0, sample_s=20.0),
        variability=VariabilityConfig(drift_sigma=0.05, drift_interval_s=3000.0),
        failures=FailureConfig(mtbf_h=20.0, repair_s=600.0),
        restart_cost_s=5.0,
    )
    checked = [0, 0, 0]  # toggled jobs, of them re-timed incrementally, batches cut short
    fast = _run(policy, True, model, checked)
    plain = _run(policy, False, model)
    if policy == "gandiva":  # the plain path for shared GPUs, the incremental one for the rest
        assert checked[0] - checked[1] > 1000 and checked[1] > 0
    else:
        assert checked[1] == checked[0] > 500
    if policy == "fifo":  # some toggle armed a completion before a toggle the loop had run
        assert checked[2] > 0
    batched = _run(policy, True, model)  # the flat path with whole batches
    met = [r.deadline_met for r in plain.records.values()]
    assert met.count(True) > 0 and met.count(False) > 0
    for sim in (fast, batched):
        for jid, rec in sim.records.items():
            other = plain.records[jid]
            assert (rec.finish_s, rec.gpu_seconds, rec.energy_j, rec.preemptions) == (
                other.finish_s, other.gpu_seconds, other.energy_j, other.preemptions)
            assert rec == other  # every field: first start, restarts, deadline met, ...
        assert sim.result().energy_j == plain.result().energy_j
        assert sim.power.busy_gpu_s == plain.power.busy_gpu_s and sim.power.busy_gpu_s > 0
        assert sim.power.timeline == plain.power.timeline and sim.power.timeline is not None


# -- decision points at which nothing can start ----------------------------------------------


class _Counting:
    """A policy's decide, counted (and nothing else: no ``can_start``)."""

    def __init__(self, policy) -> None:
        self.policy, self.calls, self.name = policy, 0, policy.name
        self.round_s, self.events = policy.round_s, policy.events

    def decide(self, view):
        self.calls += 1
        return self.policy.decide(view)


@pytest.mark.parametrize("policy", ["fifo", "sjf", "las"])
def test_skipped_decision_points_leave_the_run_the_same(policy):
    """``run_policy`` passes over the points ``can_start`` rules out (fifo: nothing queued, no free
    GPU, the head needs more GPUs than are free; sjf: the first two); the run is the one every
    point is handed to ``decide`` for (stragglers, drift and failures on), with fewer calls; las
    (rounds) is never filtered."""
    model = SimModel(
        stragglers=StragglerConfig(enabled=True, fraction_scale=1.0, sample_s=20.0),
        variability=VariabilityConfig(drift_sigma=0.05, drift_interval_s=3000.0),
        failures=FailureConfig(mtbf_h=20.0, repair_s=600.0),
        restart_cost_s=5.0,
    )
    topo = Topology.build([NodeGroup(3, 4, "V100", 16.0), NodeGroup(1, 4, "P100", 16.0)])
    sims, calls = [], []
    for skip in (True, False):
        sim = Simulator(topo, _jobs(120, 1), model, seed=2)
        counted = _Counting(get_policy(policy))
        if skip:
            counted.can_start = counted.policy.can_start  # type: ignore[attr-defined]
        run_policy(sim, counted)
        sims.append(sim)
        calls.append(counted.calls)
    fast, plain = sims
    assert repr(fast.result()) == repr(plain.result()) and fast.state.enqueued == plain.state.enqueued
    if policy == "las":
        assert calls[0] == calls[1]
    else:
        assert calls[0] < calls[1], calls

