"""Gymnasium environments of gpusched (registered in :mod:`gpusched_env` with string entry points)."""

from gpusched_env.envs.cluster import ClusterEnv, run_policy_in_env
from gpusched_env.envs.cluster_v1 import ClusterV1Env

__all__ = ["ClusterEnv", "ClusterV1Env", "run_policy_in_env"]
