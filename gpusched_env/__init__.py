"""gpusched: calibrated GPU-cluster simulator. Importing it registers the Gymnasium environments."""

from gymnasium.envs.registration import register, registry


def _register(env_id: str, entry_point: str, family: str | None = None) -> None:
    """Register ``env_id`` once. ``family``: the env is its own env, not a newer version of the env
    whose id differs only by ``-vN`` (Gymnasium counts specs by name and version, and would warn that
    the lower version is "out of date"); its spec is filed under the name ``family``, unversioned."""
    if env_id in registry:
        return
    register(id=env_id, entry_point=entry_point)
    if family is not None:
        spec = registry[env_id]
        spec.name, spec.version = family, None


_register("gpusched/Cluster-v0", "gpusched_env.envs.cluster:ClusterEnv")
# Cluster-v1 is Cluster-v0 plus preemption and migration (another action space), not an upgrade of it
_register("gpusched/Cluster-v1", "gpusched_env.envs.cluster_v1:ClusterV1Env", family="ClusterPreempt")
_register("gpusched/GPUShare-v0", "gpusched_env.envs.gpushare:GPUShareEnv")
_register("gpusched/Pipeline-v0", "gpusched_env.envs.pipeline:PipelineEnv")
