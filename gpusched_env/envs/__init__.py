"""Gymnasium environments of gpusched (registered in :mod:`gpusched_env` with string entry points)."""

from gpusched_env.envs.cluster import ClusterEnv, run_policy_in_env

__all__ = ["ClusterEnv", "run_policy_in_env"]
