"""The wake filter's shortcut (points passed over without building their window when no job that
can be in it fits) passes over exactly the points the built window passes over."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

import gpusched_env  # noqa: F401  (registers the envs)
from gpusched_env.envs import ClusterEnv


def _roll(skip: bool, workload: int, run_seed: int, counts: dict[str, int]) -> list[tuple[object, ...]]:
    env = gym.make("gpusched/Cluster-v0", scenario="pal_philly")
    u = env.unwrapped
    assert isinstance(u, ClusterEnv)
    u._skip_known_passes = skip
    aim = u._aim

    def counted(sim):  # type: ignore[no-untyped-def]
        counts["aims"] += 1
        return aim(sim)

    u._aim = counted  # type: ignore[method-assign]
    rng = np.random.default_rng(run_seed)
    obs, info = env.reset(seed=1, options={"workload": workload, "run_seed": run_seed})
    out: list[tuple[object, ...]] = [(obs.tobytes(), info["action_mask"].tobytes(), info["time_s"])]
    over = False
    while not over:
        valid = np.flatnonzero(info["action_mask"])
        obs, r, term, trunc, info = env.step(int(valid[int(rng.random() * valid.size)]))
        out.append((obs.tobytes(), info["action_mask"].tobytes(), info["time_s"], r, term, trunc))
        over = term or trunc
    out.append((u.decision_points, u.result().makespan_s))
    return out


def test_shortcut_passes_over_the_same_points() -> None:
    """Two pal_philly runs, every step's observation, mask, time and reward equal with and without
    the shortcut, which skips hundreds of windows."""
    with_skip, without = {"aims": 0}, {"aims": 0}
    for workload, run_seed in ((1, 11), (4, 3)):
        assert _roll(True, workload, run_seed, with_skip) == _roll(False, workload, run_seed, without)
    assert without["aims"] - with_skip["aims"] > 800
