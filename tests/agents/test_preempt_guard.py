"""The play-time guard of Cluster-v1 agents (``scenario.policies.agent.min_run_rounds``): a running job may be
lifted only after ``min_run_rounds`` round lengths on its GPUs; starts and "done" are untouched; off by default."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from gpusched.agents.adapter import PreemptAgentPolicy
from gpusched_env.config_util import ConfigError
from gpusched_env.envs import ClusterV1Env
from gpusched_env.envs.preempt import PreemptBuilder
from gpusched_env.types import Preempt
from tests.envs.test_cluster_v1 import toy

ROUND_S = 100.0


class _Lifter:
    """A stand-in model that lifts whatever it may: the highest valid lift, else "done" where valid, else the
    first valid start (actions ``K*P + R + 1`` with the toy's K = 2 start slots, P = 1 option)."""

    lift0 = 2

    def predict(self, obs: Any, action_masks: np.ndarray, deterministic: bool = True) -> tuple[int, None]:
        lifts = np.flatnonzero(action_masks[self.lift0 : -1])
        if lifts.size:
            return self.lift0 + int(lifts[-1]), None
        if action_masks[-1]:
            return len(action_masks) - 1, None
        return int(np.flatnonzero(action_masks)[0]), None


def _env() -> ClusterV1Env:
    """Two GPUs, rounds of 100 s: J0 starts at 0, J1 at its arrival at 150 (a GPU is free), J2 arrives at 160
    and waits. At the round point t = 200 J0 has run 200 s (2 rounds) and J1 50 s (half a round)."""
    scn = toy([(0.0, 1, 100_000), (150.0, 1, 100_000), (160.0, 1, 100_000)], gpus=2, round_s=ROUND_S)
    return ClusterV1Env(scn, options=["packed"], queue_slots=2, fifo_slots=1, running_slots=2)


def _at_round_200(env: ClusterV1Env) -> PreemptBuilder:
    _, info = env.reset(options={"workload": 0, "run_seed": 0})
    assert info["time_s"] == 0.0
    _, _, _, _, info = env.step(0)  # start J0
    assert info["time_s"] == pytest.approx(150.0)
    _, _, _, _, info = env.step(0)  # start J1 (J2's arrival at 160 has no valid action: passed over)
    assert info["time_s"] == pytest.approx(200.0) and info["round"]
    b = env.builder
    assert b is not None and b.running_window == [0, 1]  # largest attained service first: J0 (200 GPU-s), J1 (50 GPU-s)
    return b


def _policy(env: ClusterV1Env, q: float) -> PreemptAgentPolicy:
    meta = {"algo": "maskable_ppo", "env_id": "gpusched/Cluster-v1",
            "env": {"queue_slots": env.k, "fifo_slots": env.fifo_slots, "running_slots": env.r, "clairvoyant": False,
                    "migrations": True, "options": ["packed"], "max_actions_per_decision": 16, "round_s": ROUND_S}}
    return PreemptAgentPolicy(_Lifter(), meta, env.scn, 0, min_run_rounds=q)


def test_guard_removes_the_lift_of_a_job_started_less_than_q_rounds_ago():
    env = _env()
    b = _at_round_200(env)
    m = b.mask().copy()
    lift0 = b.lift0
    assert m[lift0] and m[lift0 + 1] and m[-1]  # both lifts and "done" valid without the guard
    g = _policy(env, 2).guard_mask(b)
    assert g[lift0] and not g[lift0 + 1]  # J0 ran 2 rounds: liftable; J1 ran 0.5: not
    assert np.array_equal(np.delete(g, lift0 + 1), np.delete(m, lift0 + 1))  # nothing else changed
    assert np.array_equal(b.mask(), m)  # the builder's own mask is untouched
    g = _policy(env, 0.5).guard_mask(b)  # J1 ran exactly half a round
    assert np.array_equal(g, m)
    g = _policy(env, 2.01).guard_mask(b)  # J0 short of 2.01 rounds too: no lift left, "done" stays valid
    assert not g[lift0 : b.done_action].any() and g[-1]


def test_guard_off_is_the_builders_mask():
    env = _env()
    b = _at_round_200(env)
    assert _policy(env, 0).guard_mask(b) is b.mask()
    assert _policy(env, 0).min_run_rounds == 0.0


def test_decide_with_the_guard_never_lifts_a_young_job():
    """The stand-in lifts whatever it may. Unguarded at t = 200: J1 (the higher lift slot), then J0; "done" would
    idle the cluster, so it restarts the first start slot, J0 (earliest arrival), on its own GPU: J1 preempted.
    With Q = 2 only J0 may be lifted, and "done" is then valid (J1 runs): J0 preempted. With Q = 3 nothing."""
    def batch(q: float) -> list:
        env = _env()
        b = _at_round_200(env)
        return _policy(env, q).decide(b.view)

    assert batch(0) == [Preempt(1)]
    assert batch(2) == [Preempt(0)]
    assert batch(3) == []


@pytest.mark.parametrize("bad", [-1, float("nan"), "2", True])
def test_bad_min_run_rounds_is_a_named_error(bad):
    env = _env()
    with pytest.raises(ConfigError, match="scenario.policies.agent.min_run_rounds"):
        _policy(env, bad)
