"""gpusched/Cluster-v0: checkers on every registered env, determinism, masks, rewards, heuristics."""

from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest

import gpusched_env  # noqa: F401  (registers the envs)
from gpusched.agents.bc import make_teacher
from gpusched_env.cluster.build import simulate
from gpusched_env.data import DataMissing
from gpusched_env.envs import ClusterEnv, run_policy_in_env
from gpusched_env.metrics import compute_metrics
from gpusched_env.scenario import load_scenario
from gpusched_env.types import Start

SCN = "synthetic_small"
ENV_IDS = sorted(i for i in gym.registry if i.startswith("gpusched/"))
SCENARIO_OF = {"gpusched/Pipeline-v0": "adaptra_14b", "gpusched/GPUShare-v0": "tally_pairs"}  # else SCN


def _make(env_id: str = "gpusched/Cluster-v0", **kw):
    return gym.make(env_id, scenario=SCENARIO_OF.get(env_id, SCN), **kw)


def _random_rollout(env, seed: int, steps: int = 400):
    rng = np.random.default_rng(seed)
    obs, info = env.reset(seed=seed)
    trace = [obs.copy()]
    rewards = []
    space = env.action_space
    for _ in range(steps):
        mask = info["action_mask"]
        if isinstance(space, gym.spaces.MultiDiscrete):  # the flat mask is one segment per dimension
            cuts = np.cumsum(space.nvec)[:-1]
            a = np.array([int(rng.choice(np.flatnonzero(m))) for m in np.split(mask, cuts)])
        else:
            a = int(rng.choice(np.flatnonzero(mask)))
        obs, r, term, trunc, info = env.step(a)
        trace.append(obs.copy())
        rewards.append(r)
        if term or trunc:
            break
    return np.array(trace), np.array(rewards)


def test_registered_and_made_by_name():
    assert "gpusched/Cluster-v0" in ENV_IDS
    env = gym.make("gpusched/Cluster-v0", scenario=SCN)
    assert isinstance(env.unwrapped, ClusterEnv)
    assert env.spec is not None and env.spec.entry_point == "gpusched_env.envs.cluster:ClusterEnv"


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_gymnasium_check_env(env_id):
    from gymnasium.utils.env_checker import check_env

    check_env(_make(env_id).unwrapped, skip_render_check=True)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_sb3_check_env(env_id):
    from stable_baselines3.common.env_checker import check_env

    check_env(_make(env_id).unwrapped, warn=False)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_seeded_rollouts_are_identical(env_id):
    o1, r1 = _random_rollout(_make(env_id), seed=3)
    o2, r2 = _random_rollout(_make(env_id), seed=3)
    np.testing.assert_array_equal(o1, o2)
    np.testing.assert_array_equal(r1, r2)
    assert np.isfinite(o1).all()


def test_observation_finite_and_in_bounds():
    env = _make()
    obs, _ = _random_rollout(env, seed=5, steps=2000)
    space = env.observation_space
    assert all(space.contains(o.astype(np.float32)) for o in obs)


def test_action_masks_equal_info_mask():
    env = _make()
    _, info = env.reset(seed=0)
    np.testing.assert_array_equal(env.unwrapped.action_masks(), info["action_mask"])
    u = env.unwrapped
    idle = not u.view().running and info["action_mask"][:-1].any()
    assert info["action_mask"][-1] == (not idle)  # "done" is masked only on an idle cluster


def test_every_unmasked_action_is_a_valid_start_and_every_masked_one_is_rejected():
    env = _make()
    u = env.unwrapped
    rng = np.random.default_rng(1)
    _, info = env.reset(seed=1)
    checked = 0
    for _ in range(60):
        b = u.builder
        mask = info["action_mask"]
        for a in range(u.action_space.n - 1):
            probe = copy.copy(b)
            fresh = type(b)(b.view, b.options, b.k, b.fifo_slots, b.cache)
            for d in b.decisions:  # replay the batch so far on a fresh builder
                fresh.act(fresh.action_for(d.job_id, d.gpus))
            d = fresh.act(a)
            if not mask[a]:
                assert d is None, f"masked action {a} was accepted"
                continue
            slot, _opt = divmod(a, len(b.options))
            assert isinstance(d, Start) and d.job_id == b.window[slot].job_id
            assert len(d.gpus) == b.window[slot].num_gpus
            state = copy.deepcopy(u.sim.state)  # the simulator accepts the whole batch
            state.apply(list(b.decisions) + [d], b.view.now)
            checked += 1
            del probe
        a = int(rng.choice(np.flatnonzero(mask)))
        _, _, term, trunc, info = env.step(a)
        if term or trunc:
            break
    assert checked > 20


def test_invalid_action_is_a_penalised_no_op():
    env = _make(invalid_penalty=2.5)
    obs, info = env.reset(seed=2)
    bad = np.flatnonzero(~info["action_mask"])
    assert bad.size
    obs2, r, term, trunc, info2 = env.step(int(bad[0]))
    assert r == -2.5 and info2["invalid_action"] and not term
    np.testing.assert_array_equal(obs, obs2)
    np.testing.assert_array_equal(info["action_mask"], info2["action_mask"])


def test_done_only_episode_ends_and_never_crashes():
    env = _make(max_steps=50)
    env.reset(seed=0)
    for _ in range(50):  # "done" even where it is masked: a penalised no-op, never a crash
        _, _, term, trunc, _ = env.step(env.action_space.n - 1)
        if term or trunc:
            break
    assert term or trunc


def test_return_is_minus_total_jct():
    env = _make(reward_scale=1.0)
    _, rewards = _random_rollout(env, seed=4, steps=100000)
    res = env.unwrapped.result()
    m = compute_metrics(res)
    assert m["jobs_finished"] == len(res.tracked)
    assert rewards.sum() == pytest.approx(-m["avg_jct_s"] * m["jobs_finished"], rel=1e-9)


def test_placement_options_reproduce_the_heuristics_choices():
    """Option ``packed`` gives exactly packed_gpus; ``pal`` gives PAL's placement."""
    from gpusched.baselines.pal import make_pal
    from gpusched.baselines.placement import packed_gpus
    from gpusched_env.placement import PlacementContext

    env = _make()
    u = env.unwrapped
    _, info = env.reset(seed=6)
    b = u.builder
    job = b.window[0]
    p = list(b.options.names)
    ctx = PlacementContext(b.view)
    expect_packed = packed_gpus(ctx.eligible(job), job.num_gpus, ctx.node_first)
    expect_pal = make_pal().placement.place(job, PlacementContext(b.view))
    fresh = type(b)(b.view, b.options, b.k, b.fifo_slots, b.cache)
    assert fresh.act(p.index("packed")).gpus == expect_packed
    fresh = type(b)(b.view, b.options, b.k, b.fifo_slots, b.cache)
    assert fresh.act(p.index("pal")).gpus == expect_pal


@pytest.mark.parametrize("name", ["fifo", "sjf", "packed_sticky", "packed_nonsticky", "las", "pm_first", "pal"])
def test_heuristic_through_env_equals_bench(name):
    scn = load_scenario(SCN)
    seed = 1
    env = gym.make("gpusched/Cluster-v0", scenario=scn)
    res, ret = run_policy_in_env(env, make_teacher(name, scn, seed), workload=0, run_seed=seed)
    _, bench_res = simulate(scn, make_teacher(name, scn, seed), seed, 0)
    assert compute_metrics(res) == compute_metrics(bench_res)
    assert ret == pytest.approx(-sum(r.jct_s for r in res.tracked) / 3600.0, rel=1e-9)


def test_heuristic_through_env_equals_bench_run_task():
    """Same check through gpusched-bench's own task runner (its make_policy)."""
    from gpusched.bench.runner import Task, make_policy, run_task
    from gpusched_env.cluster.build import with_run_time

    scn = load_scenario(SCN)
    env = gym.make("gpusched/Cluster-v0", scenario=scn)
    for name in ("packed_sticky", "pal"):
        res, _ = run_policy_in_env(env, make_policy(name, scn, 0), workload=0, run_seed=0)
        bench = run_task(scn, Task(name, 0, 0), None, False, False).metrics
        assert with_run_time(compute_metrics(res), res) == bench


def test_workload_choice_and_run_seed_pool():
    with pytest.raises(ValueError):
        gym.make("gpusched/Cluster-v0", scenario="pal_philly", workloads=[8])
    env = gym.make("gpusched/Cluster-v0", scenario="pal_philly", workloads=[1, 2], run_seeds=[7])
    u = env.unwrapped
    seen = set()
    for s in range(6):
        try:
            env.reset(seed=s)
        except DataMissing:
            pytest.skip("PAL workload files absent")
        seen.add(u.workload_index)
        assert u.run_seed == 7
    assert seen == {1, 2}
