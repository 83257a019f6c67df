"""gpusched.agents.adapter.env_args: a model's env arguments are the stored ones, else the env's own defaults."""

from __future__ import annotations

from gpusched.agents.adapter import ENV_V0, ENV_V1, env_args
from gpusched_env.envs.options import OPTION_NAMES


def test_v0_defaults_come_from_cluster_v0():
    a = env_args({"env_id": ENV_V0, "env": {}})
    assert (a["queue_slots"], a["fifo_slots"], a["max_actions_per_decision"]) == (16, 8, 64)
    assert tuple(a["options"]) == OPTION_NAMES and a["pal"] is None and "running_slots" not in a


def test_v1_defaults_are_cluster_v1s_over_v0s():
    a = env_args({"env_id": ENV_V1})
    assert (a["queue_slots"], a["fifo_slots"], a["running_slots"], a["max_actions_per_decision"]) == (12, 4, 8, 128)
    assert a["clairvoyant"] is False and a["migrations"] is True and a["reward_scale"] == 1.0 / 3600.0


def test_stored_values_win_and_null_means_the_default():
    a = env_args({"env_id": ENV_V1, "env": {"queue_slots": 6, "fifo_slots": 0, "clairvoyant": True,
                                           "running_slots": None}})
    assert (a["queue_slots"], a["fifo_slots"], a["clairvoyant"], a["running_slots"]) == (6, 0, True, 8)
