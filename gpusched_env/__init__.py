"""gpusched: calibrated GPU-cluster simulator. Importing it registers the Gymnasium environments."""

from gymnasium.envs.registration import register, registry

if "gpusched/Cluster-v0" not in registry:
    register(id="gpusched/Cluster-v0", entry_point="gpusched_env.envs.cluster:ClusterEnv")
if "gpusched/Cluster-v1" not in registry:
    register(id="gpusched/Cluster-v1", entry_point="gpusched_env.envs.cluster_v1:ClusterV1Env")
if "gpusched/GPUShare-v0" not in registry:
    register(id="gpusched/GPUShare-v0", entry_point="gpusched_env.envs.gpushare:GPUShareEnv")
if "gpusched/Pipeline-v0" not in registry:
    register(id="gpusched/Pipeline-v0", entry_point="gpusched_env.envs.pipeline:PipelineEnv")
