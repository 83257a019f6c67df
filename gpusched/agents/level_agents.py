"""Learned agents at the levels below the cluster: the device (``gpusched/GPUShare-v0``) and the
pipeline (``gpusched/Pipeline-v0``).

Training side (``gpusched-train``): :func:`check_env_level` refuses a cluster env with a device or
pipeline scenario, or the reverse, before anything is written (the scenario itself is loaded by
:func:`gpusched_env.levels.load_level_scenario`, as the bench loads it).

Bench side (``gpusched-bench ... policies=[...,agent] agent_path=FILE``): :func:`load_level_agent`
checks that a ``model.zip`` was trained on this level's env and this scenario (a ConfigError naming
both otherwise), and :func:`run_level_agent` runs it through the env on exactly the run a heuristic
gets (same seed, same pair / taskset / case, the scenario's duration), returning the same metrics.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from gpusched_env.config_util import ConfigError
from gpusched_env.levels import LevelRun, LevelScenario

ENV_LEVELS: dict[str, str] = {"gpusched/GPUShare-v0": "device", "gpusched/Pipeline-v0": "pipeline"}
"""The level each env of a lower level runs on; every other gpusched env is a cluster env."""
ENV_CONF: dict[str, str] = {"cluster": "cluster", "device": "gpushare", "pipeline": "pipeline"}
"""The ``conf/env/NAME.yaml`` to pick for a level's scenarios."""
BENCH_SETS = ("workload", "workloads", "run_seeds", "duration_s", "max_steps")
"""Env arguments the bench's run fixes itself (its pair / case, seed and the scenario's duration):
a model's training values of these are not used at evaluation."""


def env_level(eid: str) -> str:
    """The level an env id runs on (``cluster`` for any env not in :data:`ENV_LEVELS`)."""
    return ENV_LEVELS.get(eid, "cluster")


def check_env_level(raw: dict[str, Any], eid: str) -> str:
    """The scenario's level, if ``eid`` trains on it; else a one-line ConfigError naming both."""
    from gpusched_env.levels import level_of

    have, want = level_of(raw), env_level(eid)
    if have != want:
        raise ConfigError(f"scenario {raw.get('name', '?')!r} is a {have}-level scenario but env.id {eid!r} trains on "
                          f"{want}-level ones: use env={ENV_CONF[have]} (conf/env/{ENV_CONF[have]}.yaml)")
    return have


@dataclass
class LevelAgent:
    """A trained model (anything with SB3's ``predict``) and the env arguments it was trained with."""

    model: Any
    level: str
    env_kwargs: dict[str, Any]
    masked: bool = True


def make_env(agent: LevelAgent, scn: LevelScenario, workload: int) -> Any:
    """The agent's env on workload ``workload`` of ``scn`` with the scenario's own run settings."""
    if agent.level == "device":
        from gpusched_env.envs.gpushare import GPUShareEnv

        return GPUShareEnv(scn, workload=workload, **agent.env_kwargs)  # type: ignore[arg-type]
    from gpusched_env.envs.pipeline import PipelineEnv

    return PipelineEnv(scn, **agent.env_kwargs)  # type: ignore[arg-type]


def masked_mode(model: Any, obs: np.ndarray, mask: np.ndarray) -> Any:
    """MaskablePPO's deterministic action (``predict(obs, action_masks=mask, deterministic=True)``:
    the highest masked logit, per dimension for MultiDiscrete) straight from the policy network,
    ~5x faster than ``predict``'s checks and conversions (a device episode has ~20,000 steps)."""
    import torch

    pol = model.policy
    with torch.no_grad():
        x = torch.as_tensor(obs, dtype=torch.float32).reshape(1, -1)
        feats = pol.extract_features(x, pol.pi_features_extractor)
        logits = pol.action_net(pol.mlp_extractor.forward_actor(feats))[0].numpy()
    masked = np.where(np.asarray(mask, dtype=bool), logits, -np.inf)
    nvec = getattr(model.action_space, "nvec", None)
    if nvec is None:
        return int(np.argmax(masked))
    return np.array([int(np.argmax(part)) for part in np.split(masked, np.cumsum(nvec)[:-1])], dtype=np.int64)


def _predict(agent: LevelAgent, obs: np.ndarray, mask: np.ndarray) -> Any:
    if agent.masked and hasattr(agent.model, "policy"):
        return masked_mode(agent.model, obs, mask)
    if agent.masked:
        a, _ = agent.model.predict(obs, action_masks=mask, deterministic=True)
    else:
        a, _ = agent.model.predict(obs, deterministic=True)
    return a


def run_level_agent(agent: LevelAgent, scn: LevelScenario, seed: int, workload: int) -> LevelRun:
    """One run of the model through its env: seed ``seed`` and workload ``workload`` exactly as
    ``gpusched-bench`` runs a heuristic (device: ``reset(seed)`` of the pair / taskset; pipeline: case
    ``workload`` with the bench's jitter for ``seed``). Returns the run's metrics and series."""
    env = make_env(agent, scn, workload)
    options = {"workload": workload} if agent.level == "pipeline" else None
    obs, info = env.reset(seed=seed, options=options)
    while True:
        obs, _, term, trunc, info = env.step(_predict(agent, obs, info["action_mask"]))
        if term or trunc:
            break
    if "metrics" not in info:
        raise RuntimeError(f"agent run of {scn.name} workload {workload} seed {seed} was truncated")
    return LevelRun(dict(info["metrics"]), dict(info.get("series", {})))


def load_level_agent(path: str, level: str, scn: LevelScenario) -> LevelAgent:
    """The ``model.zip`` at ``path`` as a :class:`LevelAgent` for ``scn`` (a ``level`` scenario).
    A model of another env, level or scenario, or with other observation / action sizes, is a
    ConfigError naming what it was trained on and the command that trains one for ``scn``."""
    from gpusched.agents.adapter import load_model_checked, read_meta

    meta = read_meta(path)
    where = f"agent_path {str(path)!r}"
    want_env = next(e for e, lv in ENV_LEVELS.items() if lv == level)
    hint = f"train one with gpusched-train scenario={scn.name} env={ENV_CONF[level]}"
    got_env, got_scn = meta.get("env_id", "gpusched/Cluster-v0"), meta.get("scenario", "?")
    if got_env != want_env or got_scn != scn.name:
        raise ConfigError(f"{where}: this model was trained on env {got_env!r} ({env_level(str(got_env))} level), "
                          f"scenario {got_scn!r}; scenario {scn.name!r} needs a {want_env} model of that scenario: {hint}")
    model = load_model_checked(path, meta, where)
    kwargs = {k: v for k, v in dict(meta.get("env", {})).items() if k not in BENCH_SETS}
    agent = LevelAgent(model, level, kwargs, meta.get("algo", "maskable_ppo") == "maskable_ppo")
    env = make_env(agent, scn, 0)
    got_obs = tuple(getattr(model.observation_space, "shape", ()) or ())
    if got_obs != env.observation_space.shape or model.action_space != env.action_space:
        raise ConfigError(f"{where}: observation {list(got_obs)} / actions {model.action_space} do not fit "
                          f"{scn.name}'s env ({list(env.observation_space.shape)} / {env.action_space}): {hint}")
    return agent


_CACHE: dict[tuple[str, str, str], LevelAgent] = {}


def cached_level_agent(path: str, level: str, scn: LevelScenario) -> LevelAgent:
    """:func:`load_level_agent`, once per process (bench workers run many runs of one model)."""
    key = (str(path), level, scn.name)
    if key not in _CACHE:
        _CACHE[key] = load_level_agent(path, level, scn)
    return _CACHE[key]
