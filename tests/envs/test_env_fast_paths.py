"""The env's shortcuts give the same numbers as the plain computation they replace.

- decision points where nothing can start are skipped inside the simulator (``advance(wake)``),
  round ticks are asked for only when a start stayed possible (``wake_at``);
- the queue window of a fresh decision point is computed without the general filter;
- energy and busy GPU-seconds do not depend on how many decision points a backend stops at.
"""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import numpy as np
import pytest

import gpusched_env  # noqa: F401  (registers the envs)
from gpusched_env.cluster.model import FailureConfig, SimModel
from gpusched_env.cluster.simulator import Simulator
from gpusched_env.cluster.variability import VariabilityConfig
from gpusched_env.envs import ClusterEnv
from gpusched_env.envs.observe import DecisionBuilder, JobCache
from gpusched_env.policy import run_policy
from gpusched_env.scenario import load_scenario
from gpusched_env.testing import StrictFifo
from gpusched_env.topology import NodeGroup, Topology
from gpusched_env.types import Job


def _with_failures(name: str):
    scn = load_scenario(name)
    model = dataclasses.replace(scn.model, failures=FailureConfig(mtbf_h=2.0, repair_s=1800.0))
    return dataclasses.replace(scn, model=model)


def _rollout(env: gym.Env, seed: int, steps: int, check) -> int:
    rng = np.random.default_rng(seed)
    _, info = env.reset(seed=seed)
    n = 0
    for _ in range(steps):
        valid = np.flatnonzero(info["action_mask"])
        obs, _, term, trunc, info = env.step(int(valid[int(rng.random() * valid.size)]))
        n += 1
        if term or trunc:
            _, info = env.reset(seed=seed + n)
            continue
        check(env.unwrapped, obs)
    return n


def _reference_window(b) -> list[int]:
    """The documented window, computed naively: the first ``fifo_slots`` jobs not started in
    this batch, then the least-work ones after them (stable), up to K."""
    placed = {d.job_id for d in b.decisions}
    pend = [j for j in b.view.pending if j.job_id not in placed]
    fifo = pend[: b.fifo_slots]
    rest = sorted(pend[len(fifo) :], key=lambda j: b.cache.work[j.job_id]) if len(fifo) == b.fifo_slots else []
    return [j.job_id for j in (fifo + rest)[: b.k]]


@pytest.mark.parametrize("fifo_slots", [0, 3, 8])
def test_window_matches_its_definition(fifo_slots):
    env = gym.make("gpusched/Cluster-v0", scenario="synthetic_small", fifo_slots=fifo_slots, queue_slots=8)

    def check(u: ClusterEnv, obs: np.ndarray) -> None:
        assert [j.job_id for j in u.builder.window] == _reference_window(u.builder)

    assert _rollout(env, seed=4, steps=400, check=check) == 400


def test_skipped_points_had_no_valid_start():
    """Every decision point the env passes over (the cheap GPU-count test or the builder said no
    start is possible) has an all-False mask when built in full."""
    env = gym.make("gpusched/Cluster-v0", scenario="synthetic_small")
    u = env.unwrapped
    outcome: list[bool] = []
    original = u._startable

    def recording() -> bool:
        ok = original()
        if not ok:
            b = DecisionBuilder(u.sim.view(), u.option_set, u.k, u.fifo_slots, u._jobs)
            assert not b.mask()[:-1].any()
        outcome.append(ok)
        return ok

    u._startable = recording
    _rollout(env, seed=6, steps=300, check=lambda *_: None)
    assert outcome.count(False) > 10 and outcome.count(True) > 10


def _toy_sim(ticks: bool) -> Simulator:
    topo = Topology.build([NodeGroup(1, 2)])
    jobs = [Job(0, 0.0, 2, 100, "resnet50", "A", 10.0), Job(1, 25.0, 1, 10, "resnet50", "A", 10.0)]
    sim = Simulator(topo, jobs, SimModel(variability=VariabilityConfig(mode="none")), seed=0)
    sim.start(10.0, events=True, ticks=ticks)
    return sim


def test_lazy_ticks_and_wake_at_by_hand():
    sim = _toy_sim(ticks=True)
    times = []
    while sim.advance() and len(times) < 4:
        times.append(sim.env.now)
    assert times == [0.0, 10.0, 20.0, 25.0]  # every tick and the second arrival

    sim = _toy_sim(ticks=False)
    assert sim.advance() and sim.env.now == 0.0
    sim.wake_at(20.0)
    assert sim.advance() and sim.env.now == pytest.approx(20.0)  # asked-for tick
    assert sim.advance() and sim.env.now == 25.0  # the arrival; no tick at 30 was asked for
    sim.wake_at(30.0)
    assert sim.advance(wake=lambda: False) is False  # every point filtered out: runs to the end
    assert sim.env.now == pytest.approx(30.0)  # (nothing was started, so nothing else happens)


def test_energy_does_not_depend_on_how_often_the_backend_stops():
    jobs = [Job(i, 7.0 * i, 1 + i % 2, 300 + 40 * i, "resnet50", "A", 10.0) for i in range(6)]
    results = []
    for round_s in (None, 1.0, 13.0):
        policy = StrictFifo(backfill=True)
        policy.round_s = round_s
        sim = Simulator(Topology.build([NodeGroup(2, 2)]), jobs, SimModel(), seed=1)
        run_policy(sim, policy)
        results.append(sim.result())
    for r in results[1:]:
        assert r.energy_j == results[0].energy_j
        assert r.busy_gpu_s == results[0].busy_gpu_s
        assert [x.finish_s for x in r.records] == [x.finish_s for x in results[0].records]


def _ranks_of_queue(cache, view) -> list[int]:
    return sorted(cache.rank_l[i] for i in view.pending_ids)


@pytest.mark.parametrize("scenario", ["pal_philly", "failures"])
def test_ranked_queue_window_equals_a_sort_of_the_queue(scenario):
    """The window read from the cache's ranked queue (kept across points) equals the window of a
    builder that sorts the point's queue (a cache not filled for the whole run) and the naive
    definition; the ranked list stays in step (one rebuild per episode, at its first point)."""
    scn = _with_failures("synthetic_small") if scenario == "failures" else scenario
    k, f = (8, 3) if scenario == "pal_philly" else (4, 1)
    env = gym.make("gpusched/Cluster-v0", scenario=scn, queue_slots=k, fifo_slots=f)
    seen = {"long": 0, "ranked": 0, "started": 0}

    def check(u: ClusterEnv, obs: np.ndarray) -> None:
        b = u.builder
        assert b._ranked is not None or len(b._ids) <= b.fifo_slots
        plain = DecisionBuilder(b.view, b.options, b.k, b.fifo_slots, JobCache())
        for d in b.decisions:  # the same starts on the sorting builder
            assert plain.act(plain.action_for(d.job_id, d.gpus)) is not None
        assert plain._ranked is None and b._win_ids == plain._win_ids == _reference_window(b)
        assert u._jobs._ranked == _ranks_of_queue(u._jobs, b.view) and u._jobs.rebuilds == 1
        seen["long"] += len(b._ids) > b.k + 4
        seen["ranked"] += b._ranked is not None
        seen["started"] += bool(b.decisions)

    steps = 150 if scenario == "pal_philly" else 300
    assert _rollout(env, seed=5, steps=steps, check=check) == steps
    assert seen["ranked"] > 100 and seen["started"] > 20
    assert seen["long"] > 50 or scenario == "failures"


def test_ranked_queue_follows_a_heuristic_in_passthrough():
    """LAS through the env (passthrough) under node failures: restarted jobs re-enter the queue,
    starts leave it; the cache's ranked queue equals the queue's ranks at every point without a
    rebuild, and the window equals a sorting builder's."""
    from gpusched.agents.bc import make_teacher

    scn = _with_failures("synthetic_small")
    env = gym.make("gpusched/Cluster-v0", scenario=scn)
    u = env.unwrapped
    pol = make_teacher("las", load_scenario("synthetic_small"), 0)
    u.reset(options={"workload": 0, "run_seed": 2, "passthrough": True, "round_s": pol.round_s, "events": pol.events})
    points = 0
    while not u._over and points < 600:
        b = u.builder
        assert u._jobs._ranked == _ranks_of_queue(u._jobs, b.view) and u._jobs.rebuilds == 1
        if len(b._ids) > b.fifo_slots:
            plain = DecisionBuilder(b.view, b.options, b.k, b.fifo_slots, JobCache())
            assert b._win_ids == plain._win_ids
        decisions = pol.decide(u.view())
        u.step_decisions(decisions)
        points += 1
    enq = u.view().enqueued
    assert points == 600 and len(enq) - len(set(enq)) > 5  # jobs that entered the queue again
