"""The window after starts equals its definition (first ``fifo_slots`` queued jobs not started,
then the least work by rank among the rest)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

import gpusched_env  # noqa: F401  (registers the envs)
from gpusched_env.envs import ClusterEnv
from gpusched_env.envs.observe import DecisionBuilder


def _window_by_definition(b: DecisionBuilder) -> list[int]:
    gone = {d.job_id for d in b.decisions}
    alive = [i for i in b._ids if i not in gone]
    fifo = alive[: b.fifo_slots]
    rank = b.cache.rank_l
    assert rank is not None
    rest = sorted(alive[b.fifo_slots:], key=rank.__getitem__)
    return fifo + rest[: b.k - len(fifo)]


def test_window_after_starts_equals_its_definition() -> None:
    """pal_philly with a small FIFO part (2 of 8 slots) and starts taken from the back of the window
    first, so the FIFO part moves and the ranked part loses jobs at the same point: after every
    action the window equals the definition."""
    env = gym.make("gpusched/Cluster-v0", scenario="pal_philly", queue_slots=8, fifo_slots=2)
    u = env.unwrapped
    assert isinstance(u, ClusterEnv)
    rng = np.random.default_rng(5)
    _, info = env.reset(seed=5, options={"workload": 4, "run_seed": 21})
    checked = multi = 0
    for _ in range(600):
        b = u.builder
        assert b is not None
        if u._over:
            break
        assert b._win_ids == _window_by_definition(b)
        checked += 1
        multi += len(b.decisions) >= 2
        valid = np.flatnonzero(info["action_mask"][:-1])
        if valid.size and rng.random() < 0.9:
            a = int(valid[-1] if rng.random() < 0.7 else valid[0])  # the back of the window, or its head
        else:
            a = b.done_action
        _, _, term, trunc, info = env.step(a)
        if term or trunc:
            break
    assert checked > 500 and multi > 50
