"""gpusched/GPUShare-v0: heuristics through the env equal gpusched-bench; masks; determinism."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import gpusched_env  # noqa: F401  (registers the envs)
from gpusched_env.device import bench
from gpusched_env.envs.gpushare import GPUShareEnv, first_choice


def _heuristic_run(env: GPUShareEnv, seed: int) -> dict[str, float]:
    _, info = env.reset(seed=seed)
    for _ in range(200_000):
        _, _, term, _, info = env.step(first_choice(info["action_mask"]))
        if term:
            return info["metrics"]
    raise AssertionError("episode did not end")


@pytest.mark.parametrize(("scenario", "policy", "keys"), [
    ("tally_pairs", "mps_priority", ("hp_p99_ms", "hp_mean_ms", "be_norm_throughput")),
    ("h100_pairs", "mps", ("hp_p99_ms", "be_norm_throughput", "sm_utilization")),
    ("daris_rt", "daris", ("throughput_jobs_s", "hp_deadline_miss_rate", "lp_deadline_miss_rate", "lp_response_ms")),
])
def test_heuristic_through_env_equals_bench(scenario, policy, keys):
    env = GPUShareEnv(scenario, workload=1, mechanism=policy if policy != "daris" else "mps_priority", duration_s=0.4)
    got = _heuristic_run(env, 3)
    want = bench.run(env.scn, policy, 3, 1).metrics
    assert [got[k] for k in keys] == [want[k] for k in keys]


def test_masks_hold_and_determinism():
    env = gym.make("gpusched/GPUShare-v0", scenario="daris_rt", workload=0, duration_s=0.2)
    runs = []
    for _ in range(2):
        rng = np.random.default_rng(0)
        _, info = env.reset(seed=5)
        rewards = []
        for _ in range(300):
            m = info["action_mask"]
            assert np.array_equal(m, env.unwrapped.action_masks())
            assert not m[8] or not m[:4].any()  # hold only when no HP stage waits
            _, r, term, _, info = env.step(int(rng.choice(np.flatnonzero(m))))
            rewards.append(r)
            if term:
                break
        runs.append(rewards)
    assert runs[0] == runs[1] and len(runs[0]) == 300
    _, info = env.reset(seed=5)
    bad = int(np.flatnonzero(~info["action_mask"])[0])
    _, r, _, _, info2 = env.step(bad)
    assert r == -1.0 and info2["invalid"]


def test_pair_env_spaces_and_hold():
    env = GPUShareEnv("tally_pairs", workload=0, duration_s=0.3)
    obs, info = env.reset(seed=0)
    assert env.action_space.n == 3 and obs.shape == (17,) and env.observation_space.contains(obs)
    held = 0
    for _ in range(2000):
        m = info["action_mask"]
        a = 2 if m[2] else first_choice(m)  # hold BE whenever allowed
        held += a == 2
        obs, _, term, _, info = env.step(a)
        if term:
            break
    assert term and held > 0
    assert info["metrics"]["hp_p99_ratio"] == pytest.approx(1.0, abs=0.05)  # BE never runs beside HP
    with pytest.raises(ValueError, match="workload"):
        GPUShareEnv("tally_pairs", workload=99)
