"""The registered env ids: Cluster-v1 is its own env, so making Cluster-v0 claims no upgrade."""

from __future__ import annotations

import warnings

import gymnasium as gym
import pytest

import gpusched_env  # noqa: F401  (registers the envs)
from gpusched_env.envs.cluster import ClusterEnv
from gpusched_env.envs.cluster_v1 import ClusterV1Env

SCN = "synthetic_small"


@pytest.mark.parametrize(("env_id", "cls"), [("gpusched/Cluster-v0", ClusterEnv), ("gpusched/Cluster-v1", ClusterV1Env)])
def test_make_cluster_warns_no_out_of_date(env_id, cls):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        env = gym.make(env_id, scenario=SCN)
    assert isinstance(env.unwrapped, cls)
    assert env.spec is not None and env.spec.id == env_id
    stale = [str(w.message) for w in caught if "out of date" in str(w.message)]
    assert stale == []


def test_contract_ids_registered():
    for env_id in ("gpusched/Cluster-v0", "gpusched/Cluster-v1", "gpusched/GPUShare-v0", "gpusched/Pipeline-v0"):
        assert env_id in gym.registry
