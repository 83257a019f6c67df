"""``gpusched-train``: train a learned scheduler on a gpusched env (Hydra app, conf/train.yaml).

The env is a config group (``conf/env/NAME.yaml``: its registered ``id`` and the env's arguments);
``env=cluster`` (``gpusched/Cluster-v0``) is the default. ``gpusched-train --help`` lists the envs,
agents, scenarios and key options.

    gpusched-train scenario=pal_philly agent=maskable_ppo total_timesteps=200000 seed=0 out_dir=DIR
    gpusched-train ... resume=true                  # continue from DIR/checkpoints (last one)
    gpusched-train -m seed=0,1,2 hydra/launcher=joblib

Every input is checked before anything is written (:func:`check`: a one-line error, exit code 2); a DIR
that already holds ``model.zip`` is refused unless ``overwrite=true`` (or ``resume=true``). The run
folder DIR replays the run: ``config.yaml`` (resolved config), ``command.txt`` (the command line),
``train.log`` (the plan and progress lines), ``model.zip`` (the final model; env arguments inside,
loadable by ``agent_path``), ``train_summary.json`` (steps planned and done, and whether a wall-clock
limit or Ctrl-C stopped the run), ``checkpoints/``, ``tb/`` (tensorboard), ``eval/`` (evaluation
callback log), ``bc.json`` (the BC warm start's data size, loss and accuracy), ``.hydra/``. With
``select.enabled`` (see :mod:`gpusched.agents.selection`), ``model.zip`` is the policy selected on the training
workloads, ``last_model.zip`` the last one and ``selection.json`` the scores of every candidate. Ctrl-C
stops at the next env step, saves ``model.zip`` and a checkpoint (atomically) and logs the command that
resumes the run; exit code 130.
"""

from __future__ import annotations

import importlib
import inspect
import json
import logging
import math
import os
import re
import shlex
import shutil
import signal
import sys
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hydra
import numpy as np
import yaml
from omegaconf import DictConfig, OmegaConf

from gpusched.agents.adapter import write_meta
from gpusched_env.config_util import ConfigError
from gpusched_env.levels import LevelScenario
from gpusched_env.scenario import CONF_DIR, Scenario, load_scenario

log = logging.getLogger("gpusched.train")

CLUSTER_V0 = "gpusched/Cluster-v0"
CLUSTER_V1 = "gpusched/Cluster-v1"
BC_ENVS = (CLUSTER_V0, CLUSTER_V1)  # envs with a behaviour-cloning warm start (gpusched/agents/bc.py)
ENV_KEYS = ("queue_slots", "fifo_slots", "options", "max_actions_per_decision", "tokens", "max_nodes", "max_queue")
TRAIN_ONLY_KEYS = ("workloads", "run_seeds", "max_steps")  # where and how long to train, not the policy
# With a mix, every draw comes from SeedSequence(seed): the training envs from its children 0..n_envs-1, the
# BC teacher's episodes and the evaluation episodes from these children (choice: far past any n_envs).
BC_BRANCH = 1 << 20
EVAL_BRANCH = (1 << 20) + 1
DAGGER_BRANCH = (1 << 20) + 2  # DAgger round r (1, 2, ...) across a mix: its child r - 1


def seed_branch(seed: int, branch: int) -> np.random.SeedSequence:
    """Child ``branch`` of ``SeedSequence(seed)`` (the same as its ``branch``-th ``spawn``)."""
    return np.random.SeedSequence(seed, spawn_key=(branch,))


def scenario_of(cfg: DictConfig) -> Scenario:
    raw: dict[str, Any] = OmegaConf.to_container(cfg.scenario, resolve=True)  # type: ignore[assignment]
    return load_scenario(raw)


def scenario_for(cfg: DictConfig, eid: str) -> Scenario | LevelScenario:
    """The scenario trained on, loaded as its ``level`` says (cluster: :func:`scenario_of`; device,
    pipeline: :func:`gpusched_env.levels.load_level_scenario`); a scenario of another level than the env's
    is a one-line ConfigError naming both."""
    from gpusched.agents.level_agents import check_env_level
    from gpusched_env.levels import load_level_scenario

    raw: dict[str, Any] = OmegaConf.to_container(cfg.scenario, resolve=True)  # type: ignore[assignment]
    if check_env_level(raw, eid) == "cluster":
        return scenario_of(cfg)
    return load_level_scenario(raw)[1]


def env_id(cfg: DictConfig) -> str:
    """The registered env id of ``cfg.env`` (a ConfigError naming ``env.id`` if it is not one)."""
    import gymnasium as gym

    import gpusched_env  # noqa: F401  (registers the envs)

    eid = cfg.env.get("id")
    known = sorted(k for k in gym.registry if k.startswith("gpusched/"))
    if eid not in known:
        raise ConfigError(f"env.id must be one of {known} (conf/env/NAME.yaml), got {eid!r}")
    return str(eid)


def env_kwargs(cfg: DictConfig) -> dict[str, Any]:
    """The env's arguments: ``cfg.env`` less its ``id``, with the agent's own env keys (``agent.env``,
    e.g. the set policy's ``tokens: true``) over them."""
    e: dict[str, Any] = OmegaConf.to_container(cfg.env, resolve=True)  # type: ignore[assignment]
    e.pop("id", None)
    own = cfg.agent.get("env")
    if own is not None:
        e.update(OmegaConf.to_container(own, resolve=True))  # type: ignore[arg-type]
    if e.get("options") is not None:
        e["options"] = list(e["options"])
    return e


def make_env_fn(eid: str, scn: Scenario | LevelScenario, kwargs: dict[str, Any], seed: int, rank: int,
                worker: bool = False, mix: list[tuple[str, Scenario, dict[str, Any]]] | None = None,
                n_envs: int = 1) -> Any:
    """A function that builds env ``rank`` (seeded); ``worker``: it runs in a SubprocVecEnv worker, which
    then ignores Ctrl-C (the trainer stops the run and saves the model; the workers must live till then).
    With ``mix`` (variant name, scenario, env arguments) it is a :class:`gpusched.agents.scenario_mix.MixEnv` whose
    draws come from child ``rank`` of ``SeedSequence(seed)`` (of ``n_envs`` children)."""
    def _init() -> Any:
        import gymnasium as gym
        from stable_baselines3.common.monitor import Monitor

        import gpusched_env  # noqa: F401  (registers the envs)

        if worker:
            signal.signal(signal.SIGINT, signal.SIG_IGN)

        if mix:
            return Monitor(mix_env(eid, mix, np.random.SeedSequence(seed).spawn(n_envs)[rank]))
        env = gym.make(eid, scenario=scn, **kwargs)
        env.reset(seed=seed + 1000 * rank)
        env.action_space.seed(seed + rank)
        return Monitor(env)

    return _init


def mix_env(eid: str, mix: list[tuple[str, Scenario, dict[str, Any]]], seed_seq: np.random.SeedSequence) -> Any:
    """The :class:`gpusched.agents.scenario_mix.MixEnv` over ``mix``'s variants."""
    import gymnasium as gym

    from gpusched.agents.scenario_mix import MixEnv

    return MixEnv([(name, gym.make(eid, scenario=s, **kw)) for name, s, kw in mix], seed_seq)


def mix_variants(cfg: DictConfig, eid: str, kwargs: dict[str, Any]) -> list[tuple[str, Scenario, dict[str, Any]]]:
    """``cfg.mix``'s training variants as (name, scenario, env arguments); [] without a mix. ConfigError
    naming the ``mix.*`` key that is wrong (:func:`gpusched.agents.scenario_mix.parse_mix`)."""
    from gpusched.agents.scenario_mix import parse_mix

    mix = OmegaConf.to_container(cfg.mix, resolve=True) if cfg.get("mix") is not None else None
    base: dict[str, Any] = OmegaConf.to_container(cfg.scenario, resolve=True)  # type: ignore[assignment]
    train, _ = parse_mix(base, mix)  # type: ignore[arg-type]
    if not train:
        return []
    if eid not in BC_ENVS:
        raise ConfigError(f"mix.variants: training across scenarios is built for {' and '.join(BC_ENVS)}, "
                          f"not env.id={eid!r}")
    out = []
    for v in train:
        try:
            scn = load_scenario(v.raw)
        except (ConfigError, ValueError, KeyError, TypeError) as e:
            raise ConfigError(f"mix.variants: {v.name!r}: {e}") from None
        kw = dict(kwargs, workloads=list(v.workloads)) if v.workloads is not None else dict(kwargs)
        out.append((v.name, scn, kw))
    return out


def _algo_class(algo: str) -> Any:
    if algo == "maskable_ppo":
        from sb3_contrib import MaskablePPO

        return MaskablePPO
    if algo == "ppo":
        from stable_baselines3 import PPO

        return PPO
    if algo == "dqn":
        from stable_baselines3 import DQN

        return DQN
    raise ConfigError(f"agent.algo must be maskable_ppo, ppo or dqn, got {algo!r}")


def policy_class(name: str) -> Any:
    """``agent.policy``: an SB3 policy alias (``MlpPolicy``) as it is, or a ``module:Class`` imported."""
    if ":" not in name:
        return name
    module, _, attr = name.partition(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise ConfigError(f"agent.policy: cannot import {name!r} ({type(e).__name__}: {e})") from None


def last_checkpoint(ckpt_dir: Path) -> tuple[Path, Path | None] | None:
    """The newest ``model_<steps>_steps.zip`` and its VecNormalize file (if any)."""
    best: tuple[int, Path] | None = None
    for p in ckpt_dir.glob("model_*_steps.zip"):
        m = re.fullmatch(r"model_(\d+)_steps\.zip", p.name)
        if m and (best is None or int(m.group(1)) > best[0]):
            best = (int(m.group(1)), p)
    if best is None:
        return None
    vn = ckpt_dir / f"model_vecnormalize_{best[0]}_steps.pkl"
    return best[1], vn if vn.exists() else None


@dataclass
class Plan:
    """What :func:`check` found valid: the env, its scenario and arguments, the algorithm and the
    checkpoint a resumed run starts from."""

    eid: str
    scn: Scenario | LevelScenario
    kwargs: dict[str, Any]
    algo: str
    n_envs: int
    resumed: tuple[Path, Path | None] | None
    mix: list[tuple[str, Scenario, dict[str, Any]]]


def check(cfg: DictConfig, out: Path) -> Plan:
    """Every input of a training run, checked before anything is written: a ConfigError naming the
    key and what is allowed."""
    if cfg.vec_env not in ("dummy", "subprocess"):
        raise ConfigError(f"vec_env must be dummy or subprocess, got {cfg.vec_env!r}")
    for key in ("n_envs", "total_timesteps", "checkpoint_freq"):
        v = cfg[key]
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ConfigError(f"{key} must be >= 1, got {v}")
    _check_flags(cfg)
    algo = str(cfg.agent.algo)
    Algo = _algo_class(algo)  # noqa: N806
    eid = env_id(cfg)
    _check_bc(cfg, eid)
    scn = scenario_for(cfg, eid)  # a bad scenario (or one of another level) is named before anything is written
    kwargs = env_kwargs(cfg)
    _check_env(eid, scn, kwargs)
    _check_params(cfg, Algo)
    policy_class(str(cfg.agent.policy))
    mix = mix_variants(cfg, eid, kwargs)
    if mix:
        for name, s, kw in mix:
            try:
                _check_env(eid, s, kw)
            except ConfigError as e:
                raise ConfigError(f"mix.variants: {name!r}: {e}") from None
        mix_env(eid, mix, np.random.SeedSequence(0)).close()  # every variant gives the same spaces
    return Plan(eid, scn, kwargs, algo, int(cfg.n_envs), _check_out_dir(cfg, out), mix)


def _check_flags(cfg: DictConfig) -> None:
    for key in ("resume", "overwrite", "normalize_reward"):
        if not isinstance(cfg[key], bool):
            raise ConfigError(f"{key} must be true or false, got {cfg[key]!r}")
    m = cfg.max_train_minutes
    if m is not None and (isinstance(m, bool) or not isinstance(m, (int, float)) or not math.isfinite(m) or m <= 0):
        raise ConfigError(f"max_train_minutes must be a number of minutes > 0 or null (no wall-clock limit), got {m!r}")
    p = cfg.progress_s
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not math.isfinite(p) or p <= 0:
        raise ConfigError(f"progress_s must be a number of seconds > 0, got {p!r}")


def _check_bc(cfg: DictConfig, eid: str) -> None:
    from gpusched.baselines import POLICY_NAMES

    teachers = [p for p in POLICY_NAMES if p != "agent"]
    if cfg.bc.teacher is not None and cfg.bc.teacher not in teachers:
        raise ConfigError(f"bc.teacher must be a heuristic ({', '.join(teachers)}) or null, got {cfg.bc.teacher!r}")
    if cfg.bc.teacher and eid not in BC_ENVS:
        raise ConfigError(f"bc.teacher: the BC warm start is built for {' and '.join(BC_ENVS)} only, not env.id={eid!r}")
    if cfg.bc.teacher and not cfg.agent.bc_supported:
        raise ConfigError(f"bc.teacher: agent {cfg.agent.name} has no BC warm start (use agent=maskable_ppo or ppo)")
    if _int_at_least(cfg.bc.dagger_rounds, "bc.dagger_rounds", 0) and (eid != CLUSTER_V1 or not cfg.bc.teacher):
        raise ConfigError(f"bc.dagger_rounds: DAgger is built for {CLUSTER_V1} with a bc.teacher, not env.id={eid!r}"
                          f" with bc.teacher={cfg.bc.teacher!r}")
    for key, lowest in (("episodes", 1), ("epochs", 1), ("batch_size", 1)):
        _int_at_least(cfg.bc[key], f"bc.{key}", lowest)
    lr = cfg.bc.learning_rate
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not math.isfinite(lr) or lr <= 0:
        raise ConfigError(f"bc.learning_rate must be a number > 0, got {lr!r}")


def _not_finite(value: Any) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, dict):
        return any(_not_finite(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_not_finite(v) for v in value)
    return False


def _check_env(eid: str, scn: Scenario | LevelScenario, kwargs: dict[str, Any]) -> None:
    """Unknown env keys, non-finite numbers, workload indices out of range, then the env's own checks
    (an env built once, not reset)."""
    import gymnasium as gym
    from gymnasium.envs.registration import load_env_creator

    spec = gym.spec(eid)
    creator = load_env_creator(spec.entry_point) if isinstance(spec.entry_point, str) else spec.entry_point
    assert isinstance(creator, type), eid  # every gpusched env is registered with its class
    allowed = _init_params(creator)
    unknown = sorted(set(kwargs) - set(allowed))
    if unknown:
        raise ConfigError(f"env.{unknown[0]}: unknown key for {eid}; allowed: {', '.join(allowed)}")
    for key, value in kwargs.items():
        if _not_finite(value):
            raise ConfigError(f"env.{key} must be finite, got {value!r}")
    names = getattr(scn, "workload_names", None)
    n = len(names) if names is not None else len(getattr(scn, "workloads", []))
    for key in ("workloads", "workload"):
        given = kwargs.get(key)
        idx = [given] if key == "workload" and given is not None else list(given or [])
        bad = [w for w in idx if isinstance(w, bool) or not isinstance(w, int) or not 0 <= w < n]
        if bad:
            raise ConfigError(f"env.{key}: indices {bad} out of range; scenario {scn.name} has {n} workload"
                              f"{'s' if n != 1 else ''} (indices 0..{n - 1})")
    try:
        gym.make(eid, scenario=scn, **kwargs).close()
    except ValueError as e:
        msg = str(e)
        named = any(re.match(rf"{k}\b", msg) for k in kwargs)  # the env's message starts with the argument's name
        raise ConfigError(f"env.{msg}" if named else f"env ({eid}): {msg}") from None


def _init_params(cls: type) -> list[str]:
    """The keyword arguments ``cls(...)`` accepts, following ``**kwargs`` passed on to a base class."""
    names: set[str] = set()
    for c in cls.__mro__:
        if "__init__" not in vars(c):
            continue
        params = inspect.signature(vars(c)["__init__"]).parameters.values()
        names |= {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            break
    return sorted(names - {"self", "scenario"})


# agent.params checked before the model is built: name -> (is valid, what is expected)
_PARAM_RULES: dict[str, tuple[Callable[[float], bool], str]] = {
    "learning_rate": (lambda v: v > 0, "a number > 0"),
    "n_steps": (lambda v: v >= 1 and v == int(v), "an integer >= 1"),
    "batch_size": (lambda v: v >= 1 and v == int(v), "an integer >= 1"),
    "n_epochs": (lambda v: v >= 1 and v == int(v), "an integer >= 1"),
    "gamma": (lambda v: 0 < v <= 1, "in (0, 1]"),
    "gae_lambda": (lambda v: 0 <= v <= 1, "in [0, 1]"),
    "clip_range": (lambda v: v > 0, "a number > 0"),
    "ent_coef": (lambda v: v >= 0, "a number >= 0"),
    "vf_coef": (lambda v: v >= 0, "a number >= 0"),
    "max_grad_norm": (lambda v: v > 0, "a number > 0"),
    "buffer_size": (lambda v: v >= 1 and v == int(v), "an integer >= 1"),
    "learning_starts": (lambda v: v >= 0 and v == int(v), "an integer >= 0"),
    "train_freq": (lambda v: v >= 1 and v == int(v), "an integer >= 1"),
    "target_update_interval": (lambda v: v >= 1 and v == int(v), "an integer >= 1"),
    "exploration_fraction": (lambda v: 0 <= v <= 1, "in [0, 1]"),
    "exploration_initial_eps": (lambda v: 0 <= v <= 1, "in [0, 1]"),
    "exploration_final_eps": (lambda v: 0 <= v <= 1, "in [0, 1]"),
    "tau": (lambda v: 0 < v <= 1, "in (0, 1]"),
}


def _check_params(cfg: DictConfig, Algo: Any) -> None:  # noqa: N803 (a class)
    params: dict[str, Any] = OmegaConf.to_container(cfg.agent.params, resolve=True)  # type: ignore[assignment]
    allowed = sorted(n for n in inspect.signature(Algo.__init__).parameters
                     if n not in ("self", "policy", "env", "seed", "device", "verbose", "tensorboard_log", "_init_setup_model"))
    for key, value in params.items():
        where = f"agent.params.{key}"
        if key not in allowed:
            raise ConfigError(f"{where}: unknown parameter of {Algo.__name__}; allowed: {', '.join(allowed)}")
        if _not_finite(value):
            raise ConfigError(f"{where} must be finite, got {value!r}")
        rule = None if isinstance(value, (list, dict)) and key == "train_freq" else _PARAM_RULES.get(key)  # (n, unit)
        if rule is not None and not (isinstance(value, (int, float)) and not isinstance(value, bool) and rule[0](value)):
            raise ConfigError(f"{where} must be {rule[1]}, got {value!r}")


def _check_out_dir(cfg: DictConfig, out: Path) -> tuple[Path, Path | None] | None:
    """``out`` can be written; it holds no model.zip unless ``overwrite`` or ``resume``; with ``resume``,
    its last checkpoint (an error when there is none)."""
    anc = next(p for p in (out, *out.parents) if p.exists() or p == p.parent)
    if not anc.is_dir():
        raise ConfigError(f"out_dir: cannot create {out}: {anc} is not a folder")
    if not os.access(anc, os.W_OK | os.X_OK):
        raise ConfigError(f"out_dir: cannot write into {anc} (permission denied)")
    if cfg.resume:
        resumed = last_checkpoint(out / "checkpoints") if out.is_dir() else None
        if resumed is None:
            raise ConfigError(f"resume=true: no checkpoint to resume in {out / 'checkpoints'} "
                              f"(model_<steps>_steps.zip); train without resume=true first")
        return resumed
    if (out / "model.zip").exists() and not cfg.overwrite:
        raise ConfigError(f"out_dir: {out} already holds model.zip; overwrite=true replaces that run, "
                          f"resume=true continues it, or choose another out_dir")
    return None


def train(cfg: DictConfig, out: Path) -> dict[str, Any]:
    """Train as ``cfg`` says into ``out`` (see the module docstring); the summary written to
    ``train_summary.json``. A ConfigError, before anything is written, when an input is bad."""
    plan = check(cfg, out)
    sel = (_selection_callback(cfg, plan.eid, plan.scn, plan.kwargs, plan.algo == "maskable_ppo", out, plan.n_envs,
                               plan.mix) if cfg.select.enabled else None)  # so is a bad select.*
    if cfg.overwrite and not cfg.resume and (out / "checkpoints").is_dir():
        shutil.rmtree(out / "checkpoints")  # a later resume=true must not pick up the replaced run's checkpoints
    out.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(out / "train.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s", "%Y-%m-%d %H:%M:%S"))
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        return _train(cfg, out, plan, sel)
    finally:
        log.removeHandler(handler)
        handler.close()


def _train(cfg: DictConfig, out: Path, plan: Plan, sel: Any) -> dict[str, Any]:
    import torch
    from stable_baselines3.common.callbacks import BaseCallback, CallbackList, CheckpointCallback
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecNormalize

    from gpusched.agents.train_callbacks import Progress, SigintStop, StopRequest
    from gpusched_env.atomic import write_atomic, write_json_atomic

    eid, scn, kwargs, algo, n_envs, resumed = plan.eid, plan.scn, plan.kwargs, plan.algo, plan.n_envs, plan.resumed
    masked = algo == "maskable_ppo"
    torch.set_num_threads(int(cfg.torch_threads))
    write_atomic(out / "config.yaml", OmegaConf.to_yaml(cfg, resolve=True))
    write_atomic(out / "command.txt", command_line() + "\n")
    _save_hydra_files(cfg, out)
    seed = int(cfg.seed)
    sub = cfg.vec_env == "subprocess" and n_envs > 1
    fns = [make_env_fn(eid, scn, kwargs, seed, i, worker=sub, mix=plan.mix, n_envs=n_envs) for i in range(n_envs)]
    venv: Any = SubprocVecEnv(fns) if sub else DummyVecEnv(fns)
    Algo = _algo_class(algo)  # noqa: N806
    ckpt_dir = out / "checkpoints"
    params: dict[str, Any] = OmegaConf.to_container(cfg.agent.params, resolve=True)  # type: ignore[assignment]
    total = int(cfg.total_timesteps)
    summary: dict[str, Any] = {"algo": algo, "resumed_from": str(resumed[0]) if resumed else None,
                               "planned_timesteps": total}
    if cfg.normalize_reward:
        if resumed and resumed[1] is not None:
            venv = VecNormalize.load(str(resumed[1]), venv)
        else:
            venv = VecNormalize(venv, norm_obs=False, norm_reward=True, gamma=float(params.get("gamma", 0.99)))
    if resumed:
        model = Algo.load(str(resumed[0]), env=venv, device=cfg.device, tensorboard_log=str(out / "tb"))
    else:
        model = Algo(policy_class(str(cfg.agent.policy)), venv, seed=seed, device=cfg.device, verbose=0,
                     tensorboard_log=str(out / "tb"), **params)
        if cfg.bc.teacher:
            assert isinstance(scn, Scenario)  # bc.teacher is refused above for the other levels' envs
            summary["bc"] = warm_start(cfg, eid, scn, kwargs, model, masked, out, plan.mix)
            _save_model(model, out / "bc_model.zip", _meta(cfg, eid, scn, kwargs, algo, int(model.num_timesteps)))
    t0 = time.perf_counter()
    start_steps = int(model.num_timesteps)
    callbacks: list[BaseCallback] = [
        CheckpointCallback(max(1, int(cfg.checkpoint_freq) // n_envs), str(ckpt_dir), name_prefix="model",
                           save_vecnormalize=bool(cfg.normalize_reward)),
        Progress(total, float(cfg.progress_s), log),
    ]
    clock = None
    if cfg.max_train_minutes:  # before the selection: its clock starts before the first score
        clock = _WallClock(float(cfg.max_train_minutes) * 60.0, (lambda: sel.spent_s) if sel is not None else (lambda: 0.0))
        callbacks.append(clock)
    if sel is not None:
        callbacks.append(sel)
    if cfg.eval.enabled:
        callbacks.append(_eval_callback(cfg, eid, scn, kwargs, masked, out, n_envs, plan.mix))
    remaining = total - start_steps
    log.info(_plan_line(cfg, algo, eid, scn.name, total, start_steps, params, n_envs, out))
    interrupted = False
    if remaining > 0:
        with SigintStop(log) as stop:
            callbacks.append(StopRequest(lambda: stop.requested))
            try:
                model.learn(remaining, callback=CallbackList(callbacks), reset_num_timesteps=not resumed,
                            tb_log_name="rl", progress_bar=False)
            except KeyboardInterrupt:  # the second Ctrl-C: stop at once, still save what was learnt
                log.warning("stopped at once; saving the model")
            interrupted = stop.requested
    wall = time.perf_counter() - t0
    steps = int(model.num_timesteps) - start_steps
    meta = _meta(cfg, eid, scn, kwargs, algo, int(model.num_timesteps))
    if interrupted:  # a checkpoint at this step, for resume=true
        n = int(model.num_timesteps)
        _save_model(model, ckpt_dir / f"model_{n}_steps.zip")
        if isinstance(venv, VecNormalize):
            _save_vecnormalize(venv, ckpt_dir / f"model_vecnormalize_{n}_steps.pkl")
    if sel is not None and sel.chosen is not None:  # model.zip = the selected policy; last_model.zip = the last
        _save_model(model, out / "last_model.zip", meta)
        os.replace(out / "selected.zip", out / "model.zip")
        write_meta(out / "model.zip", dict(meta, num_timesteps=sel.chosen.steps))
        summary.update(selected_steps=sel.chosen.steps, selection_s=round(sel.spent_s, 1))  # inside rl_wall_s
    else:
        _save_model(model, out / "model.zip", meta)
    if isinstance(venv, VecNormalize):
        _save_vecnormalize(venv, out / "vecnormalize.pkl")
    stopped = bool(clock is not None and clock.fired)
    summary.update({"rl_steps": steps, "rl_wall_s": round(wall, 1),
                    "rl_steps_per_s": round(steps / wall, 1) if wall > 0 else None,
                    "num_timesteps": int(model.num_timesteps), "stopped_by_wall_clock": stopped,
                    "interrupted": interrupted})
    write_json_atomic(out / "train_summary.json", summary)
    venv.close()
    if stopped:
        log.warning(f"max_train_minutes={cfg.max_train_minutes} stopped training at {int(model.num_timesteps):,} of "
                    f"{total:,} planned steps: this is not the planned model (train_summary.json: "
                    f"stopped_by_wall_clock)")
    if interrupted:
        log.warning(f"interrupted at {int(model.num_timesteps):,} of {total:,} steps; saved {out / 'model.zip'} and "
                    f"a checkpoint. Resume with: {resume_command()}")
    return summary


def _plan_line(cfg: DictConfig, algo: str, eid: str, scenario: str, total: int, start: int, params: dict[str, Any],
               n_envs: int, out: Path) -> str:
    """The run about to start, in one line: what, where, and the steps it will take."""
    line = f"training {algo} on {eid} ({scenario}), seed {cfg.seed}, into {out}: {total - start:,} steps"
    if start:
        line += f" (from {start:,} to {total:,})"
    if algo in ("maskable_ppo", "ppo"):
        rollout = int(params.get("n_steps", 2048)) * n_envs
        line += f", rounded up to whole rollouts of n_steps x n_envs = {rollout:,}"
    elif algo == "dqn":
        tf = params.get("train_freq", 4)
        line += f", rounded up to whole train_freq x n_envs ({tf} x {n_envs})"
    if cfg.max_train_minutes:
        line += f"; wall-clock limit {cfg.max_train_minutes} min"
    return line


def _save_model(model: Any, path: Path, meta: dict[str, Any] | None = None) -> None:
    """``model`` (and its meta, if any) saved to ``path`` through a temporary file and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.tmp.zip")
    model.save(str(tmp))
    if meta is not None:
        write_meta(tmp, meta)
    os.replace(tmp, path)


def _save_vecnormalize(venv: Any, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    venv.save(str(tmp))
    os.replace(tmp, path)


def _save_hydra_files(cfg: DictConfig, out: Path) -> None:
    """Hydra's record of the run (``.hydra/config.yaml``, ``hydra.yaml``, ``overrides.yaml``), written
    after the checks (the app config sets ``hydra.output_subdir`` to null so that Hydra writes nothing
    before them). Nothing outside a Hydra run."""
    from hydra.core.hydra_config import HydraConfig

    from gpusched_env.atomic import write_atomic

    if not HydraConfig.initialized():
        return
    hc = HydraConfig.get()
    task = OmegaConf.create(list(hc.overrides.task))
    write_atomic(out / ".hydra" / "config.yaml", OmegaConf.to_yaml(cfg))
    write_atomic(out / ".hydra" / "overrides.yaml", OmegaConf.to_yaml(task))
    write_atomic(out / ".hydra" / "hydra.yaml", OmegaConf.to_yaml(OmegaConf.create({"hydra": hc})))


def command_line(argv: list[str] | None = None) -> str:
    """The ``gpusched-train`` command of this run, shell-quoted."""
    return " ".join(shlex.quote(a) for a in ["gpusched-train", *(sys.argv[1:] if argv is None else argv)])


def resume_command(argv: list[str] | None = None) -> str:
    """This run's command with ``resume=true`` (and without ``resume=`` / ``overwrite=`` overrides)."""
    args = [a for a in (sys.argv[1:] if argv is None else argv)
            if not re.match(r"^\+{0,2}(resume|overwrite)=", a)]
    return command_line([*args, "resume=true"])


def _meta(cfg: DictConfig, eid: str, scn: Scenario | LevelScenario, kwargs: dict[str, Any], algo: str, steps: int) -> dict[str, Any]:
    """What travels inside model.zip: the env id and the arguments that shape the policy's inputs and
    outputs (Cluster-v0: :data:`ENV_KEYS`; other envs: every argument but :data:`TRAIN_ONLY_KEYS`)."""
    env = ({k: kwargs.get(k) for k in ENV_KEYS} if eid == CLUSTER_V0
           else {k: v for k, v in kwargs.items() if k not in TRAIN_ONLY_KEYS})
    meta = {"algo": algo, "env_id": eid, "scenario": scn.name, "env": env,
            "seed": int(cfg.seed), "num_timesteps": steps, "bc_teacher": cfg.bc.teacher or None}
    if cfg.get("mix") is not None and cfg.mix.get("variants"):
        meta["mix"] = OmegaConf.to_container(cfg.mix, resolve=True)
    return meta


def warm_start(
    cfg: DictConfig, eid: str, scn: Scenario, kwargs: dict[str, Any], model: Any, masked: bool, out: Path,
    mix: list[tuple[str, Scenario, dict[str, Any]]] | None = None,
) -> dict[str, Any]:
    """Behaviour cloning of ``cfg.bc.teacher`` on the training workloads (see :mod:`gpusched.agents.bc`):
    through Cluster-v0 (starts) or Cluster-v1 (starts, preemptions, migrations), then
    ``bc.dagger_rounds`` DAgger rounds (Cluster-v1, :func:`gpusched.agents.bc.dagger_v1`). With ``mix``
    (the training variants), the teacher's episodes go round-robin over the variants
    (:func:`gpusched.agents.bc.collect_mix`), drawn from child :data:`BC_BRANCH` of the run's SeedSequence;
    ``bc.json`` then counts the episodes and samples of every variant."""
    from gpusched.agents.bc import accuracy, clone, collect, collect_mix, collect_v1, make_teacher
    from gpusched_env.envs.cluster import ClusterEnv
    from gpusched_env.envs.cluster_v1 import ClusterV1Env

    if not cfg.agent.bc_supported:
        raise ValueError(f"bc.teacher is set but agent {cfg.agent.name} has no BC warm start (use maskable_ppo or ppo)")
    t0 = time.perf_counter()
    teacher = str(cfg.bc.teacher)
    episodes, seed = int(cfg.bc.episodes), int(cfg.seed) + 7
    teach = lambda run_seed: make_teacher(teacher, scn, run_seed)  # noqa: E731
    Env = ClusterV1Env if eid == CLUSTER_V1 else ClusterEnv  # noqa: N806
    per_variant: dict[str, dict[str, int]] | None = None
    if mix:
        envs = [(name, s, Env(s, **kw)) for name, s, kw in mix]
        data = collect_mix(envs, lambda s, run_seed: make_teacher(teacher, s, run_seed), episodes,
                           seed_branch(int(cfg.seed), BC_BRANCH))
        n = len(mix)
        per_variant = {name: {"episodes": len(range(i, episodes, n)), "samples": int(np.sum(data["variant"] == i))}
                       for i, (name, _, _) in enumerate(mix)}
    else:
        env = Env(scn, **kwargs)
        data = collect_v1(env, teach, episodes, seed) if isinstance(env, ClusterV1Env) else collect(env, teach, episodes, seed)
    t1 = time.perf_counter()
    fit = (int(cfg.bc.epochs), int(cfg.bc.batch_size), float(cfg.bc.learning_rate), int(cfg.seed), masked)
    losses = clone(model.policy, data, *fit)
    info: dict[str, Any] = {"teacher": teacher, "samples": int(len(data["action"])), "collect_s": round(t1 - t0, 1),
                            "fit_s": round(time.perf_counter() - t1, 1), "loss_first": losses[0] if losses else None,
                            "loss_last": losses[-1] if losses else None, "accuracy": accuracy(model.policy, data, masked)}
    if per_variant is not None:
        info["variants"] = per_variant
        if episodes < len(per_variant):
            log.warning(f"bc.episodes={episodes} < the mix's {len(per_variant)} training variants: the BC data "
                        f"cover only the first {episodes} (bc.json: variants)")
    if cfg.bc.dagger_rounds:
        if mix:
            info["dagger"] = _dagger_rounds_mix(int(cfg.bc.dagger_rounds), mix, teacher, model, masked, data, episodes,
                                                int(cfg.seed), fit)
        else:
            info["dagger"] = _dagger_rounds(int(cfg.bc.dagger_rounds), scn, kwargs, model, masked, teach, data,
                                            episodes, seed, fit)
    (out / "bc.json").write_text(json.dumps(info, indent=2))
    return info


def _dagger_rounds(rounds: int, scn: Scenario, kwargs: dict[str, Any], model: Any, masked: bool, teach: Any,
                   data: dict[str, np.ndarray], episodes: int, seed: int, fit: tuple[Any, ...]) -> list[dict[str, Any]]:
    """``rounds`` DAgger rounds (:func:`gpusched.agents.bc.dagger_v1`) through Cluster-v1: the clone drives, the
    teacher labels, the data are pooled and the clone refitted; the figures of each round."""
    from gpusched.agents.adapter import predict
    from gpusched.agents.bc import dagger_v1
    from gpusched_env.envs.cluster_v1 import ClusterV1Env

    # choice: a clone's episode is cut at 10 x the teacher's mean episode length
    env = ClusterV1Env(scn, **dict(kwargs, max_steps=10 * -(-len(data["action"]) // episodes)))
    out: list[dict[str, Any]] = []
    for r in range(rounds):
        t0 = time.perf_counter()
        new = dagger_v1(env, teach, lambda obs, mask: predict(model, obs, mask, masked), episodes, seed + 1000 * (r + 1))
        data, figures, _ = _dagger_refit(r, new, data, model, masked, fit, t0)
        out.append(figures)
    return out


def _dagger_rounds_mix(rounds: int, mix: list[tuple[str, Scenario, dict[str, Any]]], teacher: str, model: Any,
                       masked: bool, data: dict[str, Any], episodes: int, seed: int,
                       fit: tuple[Any, ...]) -> list[dict[str, Any]]:
    """:func:`_dagger_rounds` across ``mix``'s training variants (:func:`gpusched.agents.bc.dagger_mix`):
    round r's learner episodes go round-robin over the variants, drawn from child r - 1 of
    :data:`DAGGER_BRANCH`; the data are pooled with the teacher's and the clone refitted; the figures of
    each round, per variant too."""
    from gpusched.agents.adapter import predict
    from gpusched.agents.bc import dagger_mix, make_teacher
    from gpusched_env.envs.cluster_v1 import ClusterV1Env

    envs = []
    for i, (name, s, kw) in enumerate(mix):
        # choice: a clone's episode is cut at 10 x the teacher's mean episode length on its variant
        n_ep = max(len(range(i, episodes, len(mix))), 1)
        cap = 10 * max(-(-int(np.sum(data["variant"] == i)) // n_ep), 1)
        envs.append((name, s, ClusterV1Env(s, **dict(kw, max_steps=cap))))
    out: list[dict[str, Any]] = []
    for r in range(rounds):
        t0 = time.perf_counter()
        new = dagger_mix(envs, lambda s, run_seed: make_teacher(teacher, s, run_seed),
                         lambda obs, mask: predict(model, obs, mask, masked), episodes,
                         np.random.SeedSequence(seed, spawn_key=(DAGGER_BRANCH, r)))
        data, figures, metrics = _dagger_refit(r, new, data, model, masked, fit, t0)
        of = {id(res): m for res, m in zip(new["results"], metrics, strict=True)}  # each episode's metrics, computed once
        figures["variants"] = {name: {"episodes": v["episodes"], "steps": v["steps"], "labelled": v["labelled"],
                                      **_episode_figures([of[id(res)] for res in v["results"]])}
                               for name, v in new["per_variant"].items()}
        out.append(figures)
    return out


def _dagger_refit(r: int, new: dict[str, Any], data: dict[str, Any], model: Any, masked: bool, fit: tuple[Any, ...],
                  t0: float) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
    """One DAgger round's end: ``new`` pooled into ``data``, the clone refitted on them; returns the pooled
    data, the round's figures and the metrics of the learner's episodes."""
    from gpusched.agents.bc import accuracy, clone, pool
    from gpusched_env.metrics import compute_metrics

    data = pool(data, new)
    losses = clone(model.policy, data, *fit)
    metrics = [compute_metrics(res) for res in new["results"]]
    figures = {"round": r + 1, "steps": new["steps"], "labelled": new["labelled"],
               "agreed": round(new["agreed"] / max(new["labelled"], 1), 4), **_episode_figures(metrics),
               "samples": int(len(data["action"])), "loss_last": losses[-1] if losses else None,
               "accuracy": accuracy(model.policy, data, masked), "s": round(time.perf_counter() - t0, 1)}
    return data, figures, metrics


def _episode_figures(metrics: list[dict[str, Any]]) -> dict[str, Any]:
    """The learner's episodes in a DAgger round: their mean average JCT (None without any) and jobs finished."""
    return {"avg_jct_s": round(float(np.mean([m["avg_jct_s"] for m in metrics])), 1) if metrics else None,
            "jobs_finished": int(sum(m["jobs_finished"] for m in metrics))}


def _int_at_least(value: Any, key: str, lowest: int) -> int:
    """``value`` as an int, or a ConfigError naming ``key`` when it is not an integer >= ``lowest``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < lowest:
        raise ConfigError(f"{key} must be an integer >= {lowest}, got {value!r}")
    return value


def _eval_args(cfg: DictConfig, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The env arguments of the evaluation episodes: ``kwargs`` with ``eval.workloads``, ``eval.run_seeds``
    and ``eval.max_steps`` over them."""
    ev = dict(kwargs)
    if cfg.eval.workloads is not None:
        ev["workloads"] = [int(w) for w in cfg.eval.workloads]
    if cfg.eval.run_seeds is not None:
        ev["run_seeds"] = [int(s) for s in cfg.eval.run_seeds]
    if cfg.eval.get("max_steps") is not None:
        ev["max_steps"] = int(cfg.eval.max_steps)
    return ev


def _eval_callback(cfg: DictConfig, eid: str, scn: Scenario | LevelScenario, kwargs: dict[str, Any], masked: bool, out: Path,
                   n_envs: int, mix: list[tuple[str, Scenario, dict[str, Any]]] | None = None) -> Any:
    """SB3's evaluation callback (log in ``out/eval``). With ``mix`` it plays ``eval.episodes`` episodes
    of every training variant per evaluation (never a held-out one): a
    :class:`gpusched.agents.scenario_mix.MixEnv` taking the variants in turn (``cycle``), its episodes drawn
    from child :data:`EVAL_BRANCH` of the run's SeedSequence; ``eval/variants.json`` names the variants."""
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    from gpusched_env.atomic import write_json_atomic

    n_eval = int(cfg.eval.episodes)
    if mix:
        from gpusched.agents.scenario_mix import MixEnv

        variants = [(name, s, _eval_args(cfg, kw)) for name, s, kw in mix]

        def _mix_eval() -> Any:
            import gymnasium as gym

            return Monitor(MixEnv([(name, gym.make(eid, scenario=s, **kw)) for name, s, kw in variants],
                                  seed_branch(int(cfg.seed), EVAL_BRANCH), cycle=True))

        eval_env: Any = DummyVecEnv([_mix_eval])
        write_json_atomic(out / "eval" / "variants.json", {
            "variants": [name for name, _, _ in variants], "episodes_per_variant": n_eval,
            "order": "each evaluation plays n_eval_episodes = episodes_per_variant x variants consecutive episodes, "
                     "the variants taken in turn (every variant equally often); none is held out of this list"})
        n_eval *= len(variants)
    else:
        eval_env = DummyVecEnv([make_env_fn(eid, scn, _eval_args(cfg, kwargs), int(cfg.seed) + 99, 0)])
    if cfg.normalize_reward:  # same wrapper type as training; returns stay raw (job-hours)
        eval_env = VecNormalize(eval_env, norm_obs=False, norm_reward=False, training=False)
    freq = max(1, int(cfg.eval.freq) // n_envs)
    kw: dict[str, Any] = dict(n_eval_episodes=n_eval, eval_freq=freq, log_path=str(out / "eval"),
                              best_model_save_path=str(out / "eval"), deterministic=True, verbose=0)
    if masked:
        from sb3_contrib.common.maskable.callbacks import MaskableEvalCallback

        return MaskableEvalCallback(eval_env, **kw)
    from stable_baselines3.common.callbacks import EvalCallback

    return EvalCallback(eval_env, **kw)


def _selection_callback(cfg: DictConfig, eid: str, scn: Scenario | LevelScenario, kwargs: dict[str, Any],
                        masked: bool, out: Path, n_envs: int,
                        mix: list[tuple[str, Scenario, dict[str, Any]]] | None = None) -> Any:
    """The checkpoint-selection callback (:mod:`gpusched.agents.selection`), its reference heuristics scored
    first on the same validation episodes (ConfigError naming the ``select.*`` key that is wrong). With
    ``mix`` the episodes are every training variant's (its workloads, or ``select.workloads``, x
    ``select.run_seeds``), scored together."""
    import gymnasium as gym

    from gpusched.agents.selection import (
        BOUND_KEYS,
        OBJECTIVES,
        Rule,
        VariantSet,
        heuristic_results,
        score_runs,
        selection_callback,
    )
    from gpusched.baselines import POLICY_NAMES

    if not isinstance(scn, Scenario) or eid not in BC_ENVS:
        raise ConfigError(f"select.enabled: checkpoint selection is built for {' and '.join(BC_ENVS)} only, "
                          f"not env.id={eid!r}")
    sc = cfg.select
    workloads = [int(w) for w in (sc.workloads if sc.workloads is not None else
                                  (kwargs.get("workloads") or range(len(scn.workload_names))))]
    seeds = [int(s) for s in sc.run_seeds]
    if not seeds:
        raise ConfigError("select.run_seeds must name at least one run seed")
    freq = _int_at_least(sc.freq, "select.freq", 1)
    max_steps = None if sc.max_steps is None else _int_at_least(sc.max_steps, "select.max_steps", 1)
    slack = float(sc.slack)
    if slack < 0:
        raise ConfigError(f"select.slack must be >= 0, got {slack}")
    if sc.objective not in OBJECTIVES:
        raise ConfigError(f"select.objective must be one of {', '.join(OBJECTIVES)}, got {sc.objective!r}")
    bounds: dict[str, str] = {}  # metric -> the heuristic bounding it
    for key, m in BOUND_KEYS.items():
        if sc[key] is not None and sc[key] not in POLICY_NAMES:
            raise ConfigError(f"select.{key} must be a heuristic ({', '.join(POLICY_NAMES)}) or null, got {sc[key]!r}")
        if sc[key] is not None:
            bounds[m] = str(sc[key])
    if sc.objective == "worst_ratio" and not bounds:
        raise ConfigError("select.objective=worst_ratio needs a bound (select.avg_bound, p99_bound or run_bound)")
    heuristics = sorted(set(bounds.values()))
    if mix:
        sets: list[VariantSet] = []
        runs: dict[str, list[Any]] = {h: [] for h in heuristics}
        for name, s, kw in mix:
            wl = [int(w) for w in (sc.workloads if sc.workloads is not None else
                                   (kw.get("workloads") or range(len(s.workload_names))))]
            eps = [(w, r) for r in seeds for w in wl]
            res = {h: heuristic_results(s, h, eps) for h in heuristics}
            for h in heuristics:
                runs[h] += res[h]
            sets.append(VariantSet(name, gym.make(eid, scenario=s, **dict(kw, max_steps=max_steps)), eps,
                                   {h: score_runs(0, res[h]) for h in heuristics}))
        pooled = {h: score_runs(0, runs[h]) for h in heuristics}
        rule = Rule({m: (1.0 + slack) * float(getattr(pooled[name], m)) for m, name in bounds.items()}, str(sc.objective))
        return selection_callback(sets[0].env, [], rule, pooled, max(1, freq // n_envs), masked, out, sets)
    episodes = [(w, s) for s in seeds for w in workloads]
    refs = {name: score_runs(0, heuristic_results(scn, name, episodes)) for name in heuristics}
    rule = Rule({m: (1.0 + slack) * float(getattr(refs[name], m)) for m, name in bounds.items()}, str(sc.objective))
    env = gym.make(eid, scenario=scn, **dict(kwargs, max_steps=max_steps))
    return selection_callback(env, episodes, rule, refs, max(1, freq // n_envs), masked, out)


def _WallClock(limit_s: float, excluded: Callable[[], float] = lambda: 0.0) -> Any:  # noqa: N802 (factory named like its class)
    from gpusched.agents.train_callbacks import WallClock

    return WallClock(limit_s, excluded)


def _output_dir(cfg: DictConfig) -> Path:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    hc = HydraConfig.get()
    if hc.mode == RunMode.MULTIRUN:
        return Path(hc.runtime.output_dir)
    return Path(cfg.out_dir)


def fail(msg: str, code: int = 2) -> None:
    """The one line an input error prints (on stderr), then exit ``code``."""
    line = " ".join(x.strip() for x in str(msg).splitlines() if x.strip())
    print(f"gpusched-train: error: {line}", file=sys.stderr, flush=True)
    raise SystemExit(code)


@hydra.main(config_path=str(CONF_DIR), config_name="train", version_base="1.3")
def _main(cfg: DictConfig) -> None:
    out = _output_dir(cfg)
    try:
        summary = train(cfg, out)
    except ConfigError as e:
        fail(str(e))
    if summary.get("interrupted"):  # the last line logged is the command that resumes the run
        raise SystemExit(130)
    print(json.dumps(summary, indent=2))
    print(f"wrote {out}/model.zip and {out}/config.yaml")


def _unknown_key(err: BaseException) -> str | None:
    """Hydra's "Could not override 'a.b'... not in struct" as one line naming the keys allowed at ``a``
    (the config composed without that override); None for another error."""
    m = re.search(r"Could not override '([^']+)'", str(err))
    if m is None or "not in struct" not in f"{err} {err.__cause__}":
        return None
    key = m.group(1)
    parent, _, name = key.rpartition(".")
    try:
        from hydra import compose, initialize_config_dir

        rest = [a for a in sys.argv[1:] if not a.startswith("-") and a.split("=", 1)[0].lstrip("+~") != key]
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose("train", overrides=rest)
        node = OmegaConf.select(cfg, parent) if parent else cfg
        allowed = sorted(str(k) for k in node.keys())  # type: ignore[union-attr]
    except Exception:  # noqa: BLE001 (another bad override: Hydra's own message then)
        return None
    return f"{key}: unknown key; allowed at {parent or 'the top level'}: {', '.join(allowed)}"


HELP_USAGE = """\
gpusched-train: train a learned scheduler (stable-baselines3 RL, optional behaviour-cloning warm start)
on a gpusched Gymnasium env and save it for gpusched-bench (policies=[agent] agent_path=DIR/model.zip).

Usage:  gpusched-train scenario=NAME env=ENV agent=AGENT total_timesteps=N seed=S out_dir=DIR [key=value ...]
        gpusched-train ... resume=true                    continue DIR from its last checkpoint
        gpusched-train -m seed=0,1,2 hydra/launcher=joblib   a sweep (launchers: conf/hydra/launcher/)
"""

HELP_OPTIONS = """\
Key options (key=value; every default is in conf/train.yaml; --cfg job prints the whole config):
  total_timesteps=N     env steps of RL after the BC warm start (default {total_timesteps}). ppo and
                        maskable_ppo round it UP to whole rollouts of agent.params.n_steps x n_envs
                        (default {n_steps} x {n_envs} = {rollout}); dqn to whole agent.params.train_freq x n_envs
  seed=S                the one seed: env resets, model init, BC data (same seed, same machine: same model)
  out_dir=DIR           model.zip, config.yaml, command.txt, train.log, train_summary.json, checkpoints/, tb/
  overwrite=true        train into a DIR that already holds model.zip (refused otherwise)
  resume=true           continue DIR from checkpoints/ up to total_timesteps (an error if there is none)
  max_train_minutes=M   a wall-clock stop (default null: none). When it stops a run, a warning says so and
                        train_summary.json has "stopped_by_wall_clock": true with the steps done and planned
  n_envs=K              parallel training envs (vec_env=dummy: in this process; subprocess: one each)
  progress_s=S          seconds between progress lines on the terminal and in train.log (steps,
                        episodes, mean episode reward, elapsed, time left)
  env.KEY=V             the env's arguments (conf/env/ENV.yaml), e.g. env.workloads=[0,1]
  mix=NAME              each training episode on a variant of the scenario drawn from the run's seed
                        (conf/mix/NAME.yaml: variants, grids, held-out variants; default none); the BC
                        warm start, evaluation and selection then run on its training variants
  agent.params.KEY=V    the algorithm's arguments (conf/agent/AGENT.yaml), e.g. agent.params.learning_rate=3e-4
  bc.teacher=H          behaviour-clone heuristic H before RL (Cluster-v0/v1 envs), one of
{teachers}
                        bc.episodes, bc.epochs, bc.batch_size, bc.learning_rate, bc.dagger_rounds (Cluster-v1)
  select.enabled=true   model.zip = the checkpoint scored best on validation episodes: select.freq,
                        select.run_seeds, select.avg_bound, select.p99_bound, select.run_bound,
                        select.slack, select.objective (gpusched/agents/selection.py)
  eval.enabled=BOOL     the evaluation callback on held-out run seeds: eval.freq, eval.episodes, ...

Ctrl-C saves the model so far (model.zip and a checkpoint) and prints the command that resumes it.
More: gpusched/agents/README.md.
"""


def help_text() -> str:
    """``gpusched-train --help``: usage, the config groups read from conf/ (envs with their ids,
    agents, scenarios with their level) and the key options."""
    from gpusched.baselines import POLICY_NAMES

    def first_comment(path: Path) -> str:
        return next((x for x in path.read_text().splitlines() if x.startswith("#")), "#").lstrip("# ")

    def load(path: Path) -> dict[str, Any]:
        return yaml.safe_load(path.read_text()) or {}

    envs = [f"  env={p.stem:<15} {load(p).get('id')}" for p in sorted((CONF_DIR / "env").glob("*.yaml"))]
    agents = [f"  agent={p.stem:<13} {first_comment(p)}" for p in sorted((CONF_DIR / "agent").glob("*.yaml"))]
    by_level: dict[str, list[str]] = {}
    for p in sorted((CONF_DIR / "scenario").glob("*.yaml")):
        by_level.setdefault(str(load(p).get("level") or "cluster"), []).append(p.stem)
    scenarios = [textwrap.fill(", ".join(names), 100, initial_indent=f"  {lvl + ':':<10}", subsequent_indent=" " * 12)
                 for lvl, names in sorted(by_level.items())]
    train_cfg = OmegaConf.load(CONF_DIR / "train.yaml")
    defaults = {k: v for d in train_cfg.defaults if isinstance(d, DictConfig) for k, v in d.items()}
    n_steps = int(OmegaConf.load(CONF_DIR / "agent" / f"{defaults.get('agent')}.yaml").params.n_steps)
    teachers = textwrap.fill(", ".join(p for p in POLICY_NAMES if p != "agent"), 100,
                             initial_indent=" " * 24, subsequent_indent=" " * 24)
    options = HELP_OPTIONS.format(total_timesteps=train_cfg.total_timesteps, n_envs=train_cfg.n_envs, n_steps=n_steps,
                                  rollout=n_steps * int(train_cfg.n_envs), teachers=teachers)
    return "\n".join([
        HELP_USAGE,
        f"Envs (env=ENV, default {defaults.get('env')}; cluster-level scenarios train on the Cluster envs,"
        " device-level ones\non gpushare, pipeline-level ones on pipeline; conf/env/ENV.yaml):", *envs, "",
        f"Agents (agent=AGENT, default {defaults.get('agent')}):", *agents, "",
        f"Scenarios (scenario=NAME, default {defaults.get('scenario')}; conf/scenario/NAME.yaml), by level:", *scenarios, "",
        options])


def main() -> None:
    """Entry point: Hydra's own errors (a bad override, an unknown key) are one line and exit code 2
    as well; anything else (a bug) keeps its traceback."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    if any(a in ("--help", "-h") for a in sys.argv[1:]):
        print(help_text())
        return
    os.environ.setdefault("HYDRA_FULL_ERROR", "1")  # let exceptions reach this function
    try:
        _main()
    except (HydraException, OmegaConfBaseException) as e:
        fail(_unknown_key(e) or str(e))


if __name__ == "__main__":
    np.set_printoptions(precision=4)
    main()
