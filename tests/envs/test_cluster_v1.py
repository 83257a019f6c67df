"""gpusched/Cluster-v1: preemption in the action space — toy JCTs by hand, masks, the information the
observation hides, determinism, and preempting heuristics replayed through the env exactly."""

from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest

import gpusched_env  # noqa: F401  (registers the envs)
from gpusched.agents.bc import make_teacher, play_v1
from gpusched_env.catalog import MODELS
from gpusched_env.cluster.build import simulate
from gpusched_env.envs import ClusterV1Env
from gpusched_env.envs.preempt import SLOT_FEATURES_V1, obs_size_v1
from gpusched_env.metrics import compute_metrics
from gpusched_env.scenario import load_scenario
from gpusched_env.types import Migrate, Preempt, Start

T = MODELS["resnet50"].base_iter_s  # 0.1754 s per iteration on a V100


def toy(jobs, gpus=1, restart_s=30.0, round_s=100.0):
    """A one-node scenario without variability, inline jobs ``(arrival, GPUs, iterations)``."""
    return load_scenario({
        "name": "toy", "round_s": round_s,
        "cluster": {"nodes": [{"count": 1, "gpus_per_node": gpus, "gpu_type": "V100", "gpu_mem_gb": 32.0}],
                    "max_jobs_per_gpu": 1},
        "workload": {"kind": "inline", "jobs": [
            {"job_id": i, "arrival_s": a, "num_gpus": g, "work_iters": w, "model": "resnet50"}
            for i, (a, g, w) in enumerate(jobs)]},
        "model": {"variability": {"mode": "none"}, "restart_cost_s": restart_s, "start_cost_s": 0.0},
    })


def _env(scn, **kw):
    return ClusterV1Env(scn, options=["packed"], queue_slots=2, fifo_slots=1, running_slots=2, **kw)


def test_registered_with_its_own_spaces():
    env = gym.make("gpusched/Cluster-v1", scenario="synthetic_small")
    u = env.unwrapped
    assert isinstance(u, ClusterV1Env)
    assert env.spec is not None and env.spec.entry_point == "gpusched_env.envs.cluster_v1:ClusterV1Env"
    n_nodes = u.topo.n_nodes
    assert env.observation_space.shape == (obs_size_v1(n_nodes, 12, 8),) == (n_nodes * 8 + 20 * 17 + 10,)
    assert env.action_space.n == 12 * 5 + 8 + 1


def test_preempt_on_one_gpu_jct_by_hand():
    """J0 (1000 iterations) starts at 0; J1 (200) arrives at 10. At the round point t=100 the agent
    lifts J0 (preempted: it ran 100 s) and starts J1, which ends at 100 + 200T; J0 restarts then and
    pays the 30 s restart cost: it ends at 100 + 200T + 30 + (1000T - 100) = 1200T + 30."""
    env = _env(toy([(0.0, 1, 1000), (10.0, 1, 200)]), reward_scale=1.0)
    _, info = env.reset(options={"workload": 0, "run_seed": 0})
    b = env.builder
    assert info["time_s"] == 0.0 and info["round"]
    assert not info["action_mask"][-1]  # "done" would idle the cluster
    assert not info["action_mask"][b.lift0:-1].any()  # nothing runs
    _, r0, *_ , info = env.step(0)  # start J0 (slot 0, packed): the point ends (nothing else valid)
    assert info["time_s"] == pytest.approx(100.0) and info["round"]  # J1's arrival at 10 was passed over
    b = env.builder
    assert b.running_window == [0] and [j.job_id for j in b.window] == [1]
    assert not info["action_mask"][0]  # J1 does not fit before J0 is lifted
    _, _, *_, info = env.step(b.lift0)  # lift J0
    assert info["action_mask"][0] and not info["action_mask"][-1]  # J1 fits; done would idle the GPU
    assert [j.job_id for j in env.builder.window] == [0, 1]  # the lifted job may be restarted
    assert env.builder.decisions == [Preempt(0)]
    env.step(1)  # start J1 (slot 1)
    assert env.unwrapped.builder is not b
    rets = []
    over = False
    while not over:
        mask = env.action_masks()
        _, r, term, trunc, _ = env.step(int(np.flatnonzero(mask)[0]))
        rets.append(r)
        over = term or trunc
    res = env.result()
    fin = {r.job.job_id: r.finish_s for r in res.records}
    assert fin[1] == pytest.approx(100 + 200 * T)
    assert fin[0] == pytest.approx(1200 * T + 30.0)
    rec0 = next(r for r in res.records if r.job.job_id == 0)
    assert (rec0.preemptions, rec0.restarts) == (1, 1)
    assert env.episode_return == pytest.approx(-((1200 * T + 30.0) + (100 + 200 * T - 10.0)))


def test_lift_and_restart_on_the_same_gpus_is_no_decision_and_elsewhere_a_migration():
    scn = toy([(0.0, 1, 5000), (10.0, 1, 5000), (20.0, 1, 5000)], gpus=2)  # J2 waits: t=100 is a point
    env = ClusterV1Env(scn, options=["packed", "spread"], queue_slots=2, fifo_slots=1, running_slots=2)
    env.reset(options={"workload": 0, "run_seed": 0})
    env.step(0)  # t=0: J0 packed on GPU 0
    b = env.builder
    assert b.view.now == pytest.approx(10.0) and not b.is_round  # J1 arrives: a start, no lift
    assert not b.mask()[b.lift0:-1].any()
    env.step(0)  # J1 on GPU 1
    b = env.builder
    assert b.view.now == pytest.approx(100.0) and b.is_round
    assert b.mask()[b.lift0:-1].any()  # at a round point every running job may be lifted
    b.act(b.lift0)
    b.act(b.lift0)  # both lifted
    assert sorted(d.job_id for d in b.decisions) == [0, 1] and all(isinstance(d, Preempt) for d in b.decisions)
    ids = [j.job_id for j in b.window]
    b.act(ids.index(0) * 2 + 0)  # J0 packed again: GPU 0 -> no decision
    assert [type(d) for d in b.decisions] == [Preempt]
    b.act(b.window.index(next(j for j in b.window if j.job_id == 1)) * 2 + 0)  # J1 packed: GPU 1 again
    assert b.decisions == []


def test_migration_when_the_gpus_change():
    scn = toy([(0.0, 1, 5000), (0.0, 1, 5000), (0.0, 1, 5000)], gpus=2)
    env = ClusterV1Env(scn, options=["packed"], queue_slots=3, fifo_slots=2, running_slots=2)
    env.reset(options={"workload": 0, "run_seed": 0})
    env.step(1)  # J1 packed on GPU 0; the point goes on (J0 still fits)
    env.step(0)  # J0 on GPU 1
    b = env.builder
    assert b.is_round and b.view.now == pytest.approx(100.0)
    assert b.running_window[0] in (0, 1)
    b.act(b.lift0 + b.running_window.index(1))  # lift J1 (GPU 0)
    b.act(b.lift0 + b.running_window.index(0))  # lift J0 (GPU 1)
    ids = [j.job_id for j in b.window]
    b.act(ids.index(0))  # J0 first now: packed -> GPU 0
    assert b.decisions[0] == Migrate(0, (0,))
    ids = [j.job_id for j in b.window]
    b.act(ids.index(1))
    assert b.decisions == [Migrate(0, (0,)), Migrate(1, (1,))]
    env.step(b.done_action)
    res = env.result()
    assert sum(r.migrations for r in res.records) == 2


def test_masks_match_what_the_simulator_accepts():
    env = ClusterV1Env("synthetic_small")
    rng = np.random.default_rng(1)
    _, info = env.reset(seed=1)
    checked = lifts = 0
    taken: list[int] = []  # actions so far at this decision point
    point = env.builder
    for _ in range(300):
        b = env.builder
        if b is not point:
            point, taken = b, []
        mask = info["action_mask"]
        np.testing.assert_array_equal(mask, env.action_masks())
        assert mask[b.lift0:-1].any() <= b.is_round  # lifts only at round points
        for a in range(env.action_space.n - 1):
            probe = env._build(b.is_round)  # a fresh builder with this point's actions replayed
            for t in taken:
                assert probe.act(t) is not None
            got = probe.act(a)
            if not mask[a]:
                assert got is None, f"masked action {a} was accepted"
                continue
            assert got is not None
            state = copy.deepcopy(env.sim.state)
            state.apply(probe.decisions, b.view.now)  # the simulator accepts the batch
            checked += 1
            lifts += a >= b.lift0
        a = int(rng.choice(np.flatnonzero(mask)))
        taken.append(a)
        _, _, term, trunc, info = env.step(a)
        if term or trunc:
            break
    assert checked > 50 and lifts > 5


def test_done_is_masked_only_when_the_cluster_would_idle():
    env = _env(toy([(0.0, 1, 1000), (10.0, 1, 200)]))
    env.reset(options={"workload": 0, "run_seed": 0})
    env.step(0)
    b = env.builder
    assert b.mask()[-1]  # J0 runs: done keeps it running
    b.act(b.lift0)
    assert not b.mask()[-1]  # everything lifted, nothing started, a start possible


def _obs_before_first_completion(clairvoyant: bool, scale: int) -> list[np.ndarray]:
    """Observations along a fixed policy ("first valid action") on a 1-GPU toy whose jobs differ
    only in their length (x ``scale``), up to the first completion (none before 3 rounds)."""
    scn = toy([(0.0, 1, 3000 * scale), (50.0, 1, 2000 * scale), (120.0, 1, 4000 * scale)])
    env = ClusterV1Env(scn, clairvoyant=clairvoyant, queue_slots=4, fifo_slots=1, running_slots=2)
    obs, info = env.reset(options={"workload": 0, "run_seed": 0})
    out = [obs]
    while info["time_s"] < 400.0:
        lifts = np.flatnonzero(info["action_mask"][env.builder.lift0:-1])
        a = env.builder.lift0 + int(lifts[0]) if lifts.size and info["round"] else int(np.flatnonzero(info["action_mask"])[0])
        obs, _, term, _, info = env.step(a)
        out.append(obs)
        assert not term
    return out


def test_observation_hides_job_length_unless_clairvoyant():
    short = _obs_before_first_completion(False, 1)
    long = _obs_before_first_completion(False, 3)
    assert len(short) == len(long) > 4
    for a, b in zip(short, long, strict=True):
        np.testing.assert_array_equal(a, b)  # nothing in the observation depends on the job lengths
    short_c = _obs_before_first_completion(True, 1)
    long_c = _obs_before_first_completion(True, 3)
    assert any(not np.array_equal(a, b) for a, b in zip(short_c, long_c, strict=False))


def test_clairvoyant_columns_are_zero_when_not_clairvoyant():
    env = ClusterV1Env("synthetic_small")
    obs, _ = env.reset(seed=0)
    n_nodes = env.topo.n_nodes
    slots = obs[n_nodes * 8 : n_nodes * 8 + 20 * SLOT_FEATURES_V1].reshape(20, SLOT_FEATURES_V1)
    assert slots[:, 0].any() and not slots[:, 14:16].any()
    env_c = ClusterV1Env("synthetic_small", clairvoyant=True)
    obs_c, _ = env_c.reset(seed=0)
    slots_c = obs_c[n_nodes * 8 : n_nodes * 8 + 20 * SLOT_FEATURES_V1].reshape(20, SLOT_FEATURES_V1)
    assert slots_c[slots_c[:, 0] > 0, 14].min() > 0


def test_seeded_random_rollouts_are_identical():
    def roll(seed):
        env = ClusterV1Env("synthetic_small")
        rng = np.random.default_rng(seed)
        obs, info = env.reset(seed=seed)
        out, rew = [obs], []
        for _ in range(500):
            obs, r, term, trunc, info = env.step(int(rng.choice(np.flatnonzero(info["action_mask"]))))
            out.append(obs)
            rew.append(r)
            if term or trunc:
                break
        return np.array(out), np.array(rew), compute_metrics(env.result())

    o1, r1, m1 = roll(3)
    o2, r2, m2 = roll(3)
    np.testing.assert_array_equal(o1, o2)
    np.testing.assert_array_equal(r1, r2)
    assert m1 == m2 and m1["preemptions"] > 0


@pytest.mark.parametrize(("name", "clairvoyant"), [("las", False), ("tiresias", False), ("srtf", True)])
def test_preempting_heuristic_replayed_as_actions_equals_bench(name, clairvoyant):
    scn = load_scenario("synthetic_small")
    seed = 0
    env = ClusterV1Env(scn, clairvoyant=clairvoyant)
    res = play_v1(env, make_teacher(name, scn, seed), workload=0, run_seed=seed)
    _, bench_res = simulate(scn, make_teacher(name, scn, seed), seed, 0)
    m = compute_metrics(res)
    assert m == compute_metrics(bench_res)
    assert m["preemptions"] > 0
    assert env.invalid_actions == 0
    assert env.episode_return == pytest.approx(-sum(r.jct_s for r in res.tracked) / 3600.0, rel=1e-9)


@pytest.mark.slow
@pytest.mark.parametrize(("name", "clairvoyant"), [("las", False), ("srtf", True)])
def test_preempting_heuristic_replayed_on_pal_philly(name, clairvoyant):
    scn = load_scenario("pal_philly")
    env = ClusterV1Env(scn, clairvoyant=clairvoyant)
    res = play_v1(env, make_teacher(name, scn, 0), workload=6, run_seed=0)
    _, bench_res = simulate(scn, make_teacher(name, scn, 0), 0, 6)
    assert compute_metrics(res) == compute_metrics(bench_res)


def test_v0_heuristics_passthrough_still_works_on_v1():
    """step_decisions (any batch) as in v0: a heuristic run through v1's passthrough equals the bench."""
    from gpusched_env.envs import run_policy_in_env

    scn = load_scenario("synthetic_small")
    env = ClusterV1Env(scn)
    res, _ = run_policy_in_env(env, make_teacher("pal", scn, 0), workload=0, run_seed=0)
    _, bench_res = simulate(scn, make_teacher("pal", scn, 0), 0, 0)
    assert compute_metrics(res) == compute_metrics(bench_res)
    assert env.observation_space.contains(env.builder_obs())


def test_start_decisions_keep_types():
    env = ClusterV1Env("synthetic_small")
    env.reset(seed=0)
    b = env.builder
    a = int(np.flatnonzero(b.mask()[: b.lift0])[0])
    b.act(a)
    assert isinstance(b.decisions[0], Start)
