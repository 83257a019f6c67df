"""``gpusched-train``: train a learned scheduler on a gpusched env (Hydra app, conf/train.yaml).

The env is a config group (``conf/env/NAME.yaml``: its registered ``id`` and the env's arguments);
``env=cluster`` (``gpusched/Cluster-v0``) is the default.

    gpusched-train scenario=pal_philly agent=maskable_ppo total_timesteps=200000 seed=0 out_dir=DIR
    gpusched-train ... resume=true                  # continue from DIR/checkpoints (last one)
    gpusched-train -m seed=0,1,2 hydra/launcher=joblib

The run folder DIR replays the run: ``config.yaml`` (resolved config), ``command.txt`` (the command
line), ``model.zip`` (the final model; env arguments inside, loadable by ``agent_path``),
``checkpoints/``, ``tb/`` (tensorboard), ``eval/`` (evaluation callback log), ``bc.json`` (the BC
warm start's data size, loss and accuracy), ``.hydra/``. With ``select.enabled`` (see
:mod:`agents.selection`), ``model.zip`` is the policy selected on the training workloads,
``last_model.zip`` the last one and ``selection.json`` the scores of every candidate.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import hydra
import numpy as np
from omegaconf import DictConfig, OmegaConf

from gpusched_env.config_util import ConfigError
from gpusched_env.levels import LevelScenario
from gpusched_env.scenario import CONF_DIR, Scenario, load_scenario

CLUSTER_V0 = "gpusched/Cluster-v0"
CLUSTER_V1 = "gpusched/Cluster-v1"
BC_ENVS = (CLUSTER_V0, CLUSTER_V1)  # envs with a behaviour-cloning warm start (agents/bc.py)
ENV_KEYS = ("queue_slots", "fifo_slots", "options", "max_actions_per_decision")
TRAIN_ONLY_KEYS = ("workloads", "run_seeds", "max_steps")  # where and how long to train, not the policy


def scenario_of(cfg: DictConfig) -> Scenario:
    raw: dict[str, Any] = OmegaConf.to_container(cfg.scenario, resolve=True)  # type: ignore[assignment]
    return load_scenario(raw)


def scenario_for(cfg: DictConfig, eid: str) -> Scenario | LevelScenario:
    """The scenario trained on, loaded as its ``level`` says (cluster: :func:`scenario_of`; device,
    pipeline: :func:`gpusched_env.levels.load_level_scenario`); a scenario of another level than the env's
    is a one-line ConfigError naming both."""
    from agents.levels import check_env_level
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
    """The env's arguments: ``cfg.env`` less its ``id``."""
    e: dict[str, Any] = OmegaConf.to_container(cfg.env, resolve=True)  # type: ignore[assignment]
    e.pop("id", None)
    if e.get("options") is not None:
        e["options"] = list(e["options"])
    return e


def make_env_fn(eid: str, scn: Scenario | LevelScenario, kwargs: dict[str, Any], seed: int, rank: int) -> Any:
    def _init() -> Any:
        import gymnasium as gym
        from stable_baselines3.common.monitor import Monitor

        import gpusched_env  # noqa: F401  (registers the envs)

        env = gym.make(eid, scenario=scn, **kwargs)
        env.reset(seed=seed + 1000 * rank)
        env.action_space.seed(seed + rank)
        return Monitor(env)

    return _init


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


def train(cfg: DictConfig, out: Path) -> dict[str, Any]:
    import torch
    from stable_baselines3.common.callbacks import BaseCallback, CallbackList, CheckpointCallback
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecNormalize

    from agents.adapter import write_meta

    if cfg.vec_env not in ("dummy", "subprocess"):
        raise ConfigError(f"vec_env must be dummy or subprocess, got {cfg.vec_env!r}")
    for key in ("n_envs", "total_timesteps", "checkpoint_freq"):
        v = cfg[key]
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ConfigError(f"{key} must be >= 1, got {v}")
    _algo_class(str(cfg.agent.algo))
    eid = env_id(cfg)
    if cfg.bc.teacher and eid not in BC_ENVS:
        raise ConfigError(f"bc.teacher: the BC warm start is built for {' and '.join(BC_ENVS)} only, not env.id={eid!r}")
    if _int_at_least(cfg.bc.dagger_rounds, "bc.dagger_rounds", 0) and (eid != CLUSTER_V1 or not cfg.bc.teacher):
        raise ConfigError(f"bc.dagger_rounds: DAgger is built for {CLUSTER_V1} with a bc.teacher, not env.id={eid!r}"
                          f" with bc.teacher={cfg.bc.teacher!r}")
    scn = scenario_for(cfg, eid)  # a bad scenario (or one of another level) is named before anything is written
    kwargs = env_kwargs(cfg)
    algo = str(cfg.agent.algo)
    masked = algo == "maskable_ppo"
    n_envs = int(cfg.n_envs)
    sel = _selection_callback(cfg, eid, scn, kwargs, masked, out, n_envs) if cfg.select.enabled else None  # so is a bad select.*
    torch.set_num_threads(int(cfg.torch_threads))
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    (out / "command.txt").write_text(" ".join(shlex.quote(a) for a in ["gpusched-train", *sys.argv[1:]]) + "\n")
    seed = int(cfg.seed)
    fns = [make_env_fn(eid, scn, kwargs, seed, i) for i in range(n_envs)]
    venv: Any = SubprocVecEnv(fns) if cfg.vec_env == "subprocess" and n_envs > 1 else DummyVecEnv(fns)
    Algo = _algo_class(algo)
    ckpt_dir = out / "checkpoints"
    resumed = last_checkpoint(ckpt_dir) if cfg.resume else None
    params: dict[str, Any] = OmegaConf.to_container(cfg.agent.params, resolve=True)  # type: ignore[assignment]
    summary: dict[str, Any] = {"algo": algo, "resumed_from": str(resumed[0]) if resumed else None}
    if cfg.normalize_reward:
        if resumed and resumed[1] is not None:
            venv = VecNormalize.load(str(resumed[1]), venv)
        else:
            venv = VecNormalize(venv, norm_obs=False, norm_reward=True, gamma=float(params.get("gamma", 0.99)))
    if resumed:
        model = Algo.load(str(resumed[0]), env=venv, device=cfg.device, tensorboard_log=str(out / "tb"))
    else:
        model = Algo(cfg.agent.policy, venv, seed=seed, device=cfg.device, verbose=0,
                     tensorboard_log=str(out / "tb"), **params)
        if cfg.bc.teacher:
            assert isinstance(scn, Scenario)  # bc.teacher is refused above for the other levels' envs
            summary["bc"] = warm_start(cfg, eid, scn, kwargs, model, masked, out)
            model.save(str(out / "bc_model.zip"))  # the warm start alone, for comparison
            write_meta(out / "bc_model.zip", _meta(cfg, eid, scn, kwargs, algo, int(model.num_timesteps)))
    t0 = time.perf_counter()
    start_steps = int(model.num_timesteps)
    callbacks: list[BaseCallback] = [
        CheckpointCallback(max(1, int(cfg.checkpoint_freq) // n_envs), str(ckpt_dir), name_prefix="model",
                           save_vecnormalize=bool(cfg.normalize_reward)),
    ]
    if cfg.max_train_minutes:  # before the selection: its clock starts before the first score
        callbacks.append(_WallClock(float(cfg.max_train_minutes) * 60.0,
                                    (lambda: sel.spent_s) if sel is not None else (lambda: 0.0)))
    if sel is not None:
        callbacks.append(sel)
    if cfg.eval.enabled:
        callbacks.append(_eval_callback(cfg, eid, scn, kwargs, masked, out, n_envs))
    remaining = int(cfg.total_timesteps) - start_steps
    if remaining > 0:
        model.learn(remaining, callback=CallbackList(callbacks), reset_num_timesteps=not resumed,
                    tb_log_name="rl", progress_bar=False)
    wall = time.perf_counter() - t0
    steps = int(model.num_timesteps) - start_steps
    meta = _meta(cfg, eid, scn, kwargs, algo, int(model.num_timesteps))
    if sel is not None and sel.chosen is not None:  # model.zip = the selected policy; last_model.zip = the last
        model.save(str(out / "last_model.zip"))
        write_meta(out / "last_model.zip", meta)
        os.replace(out / "selected.zip", out / "model.zip")
        write_meta(out / "model.zip", dict(meta, num_timesteps=sel.chosen.steps))
        summary.update(selected_steps=sel.chosen.steps, selection_s=round(sel.spent_s, 1))  # inside rl_wall_s
    else:
        model.save(str(out / "model.zip"))
        write_meta(out / "model.zip", meta)
    if isinstance(venv, VecNormalize):
        venv.save(str(out / "vecnormalize.pkl"))
    summary.update({"rl_steps": steps, "rl_wall_s": round(wall, 1),
                    "rl_steps_per_s": round(steps / wall, 1) if wall > 0 else None,
                    "num_timesteps": int(model.num_timesteps)})
    (out / "train_summary.json").write_text(json.dumps(summary, indent=2))
    venv.close()
    return summary


def _meta(cfg: DictConfig, eid: str, scn: Scenario | LevelScenario, kwargs: dict[str, Any], algo: str, steps: int) -> dict[str, Any]:
    """What travels inside model.zip: the env id and the arguments that shape the policy's inputs and
    outputs (Cluster-v0: :data:`ENV_KEYS`; other envs: every argument but :data:`TRAIN_ONLY_KEYS`)."""
    env = ({k: kwargs.get(k) for k in ENV_KEYS} if eid == CLUSTER_V0
           else {k: v for k, v in kwargs.items() if k not in TRAIN_ONLY_KEYS})
    return {"algo": algo, "env_id": eid, "scenario": scn.name, "env": env,
            "seed": int(cfg.seed), "num_timesteps": steps, "bc_teacher": cfg.bc.teacher or None}


def warm_start(
    cfg: DictConfig, eid: str, scn: Scenario, kwargs: dict[str, Any], model: Any, masked: bool, out: Path
) -> dict[str, Any]:
    """Behaviour cloning of ``cfg.bc.teacher`` on the training workloads (see :mod:`agents.bc`):
    through Cluster-v0 (starts) or Cluster-v1 (starts, preemptions, migrations), then
    ``bc.dagger_rounds`` DAgger rounds (Cluster-v1, :func:`agents.bc.dagger_v1`)."""
    from agents.bc import accuracy, clone, collect, collect_v1, make_teacher
    from gpusched_env.envs.cluster import ClusterEnv
    from gpusched_env.envs.cluster_v1 import ClusterV1Env

    if not cfg.agent.bc_supported:
        raise ValueError(f"bc.teacher is set but agent {cfg.agent.name} has no BC warm start (use maskable_ppo or ppo)")
    t0 = time.perf_counter()
    teacher = str(cfg.bc.teacher)
    episodes, seed = int(cfg.bc.episodes), int(cfg.seed) + 7
    teach = lambda run_seed: make_teacher(teacher, scn, run_seed)  # noqa: E731
    env = ClusterV1Env(scn, **kwargs) if eid == CLUSTER_V1 else ClusterEnv(scn, **kwargs)
    data = collect_v1(env, teach, episodes, seed) if isinstance(env, ClusterV1Env) else collect(env, teach, episodes, seed)
    t1 = time.perf_counter()
    fit = (int(cfg.bc.epochs), int(cfg.bc.batch_size), float(cfg.bc.learning_rate), int(cfg.seed), masked)
    losses = clone(model.policy, data, *fit)
    info: dict[str, Any] = {"teacher": teacher, "samples": int(len(data["action"])), "collect_s": round(t1 - t0, 1),
                            "fit_s": round(time.perf_counter() - t1, 1), "loss_first": losses[0] if losses else None,
                            "loss_last": losses[-1] if losses else None, "accuracy": accuracy(model.policy, data, masked)}
    if cfg.bc.dagger_rounds:
        info["dagger"] = _dagger_rounds(int(cfg.bc.dagger_rounds), scn, kwargs, model, masked, teach, data, episodes,
                                        seed, fit)
    (out / "bc.json").write_text(json.dumps(info, indent=2))
    return info



def _dagger_rounds(rounds: int, scn: Scenario, kwargs: dict[str, Any], model: Any, masked: bool, teach: Any,
                   data: dict[str, np.ndarray], episodes: int, seed: int, fit: tuple[Any, ...]) -> list[dict[str, Any]]:
    """``rounds`` DAgger rounds (:func:`agents.bc.dagger_v1`) through Cluster-v1: the clone drives, the
    teacher labels, the data are pooled and the clone refitted; the figures of each round."""
    from agents.adapter import predict
    from agents.bc import accuracy, clone, dagger_v1
    from gpusched_env.envs.cluster_v1 import ClusterV1Env
    from gpusched_env.metrics import compute_metrics

    # choice: a clone's episode is cut at 10 x the teacher's mean episode length
    env = ClusterV1Env(scn, **dict(kwargs, max_steps=10 * -(-len(data["action"]) // episodes)))
    out: list[dict[str, Any]] = []
    for r in range(rounds):
        t0 = time.perf_counter()
        new = dagger_v1(env, teach, lambda obs, mask: predict(model, obs, mask, masked), episodes, seed + 1000 * (r + 1))
        data = {k: np.concatenate([data[k], new[k]]) for k in ("obs", "mask", "action")}
        losses = clone(model.policy, data, *fit)
        jct = [compute_metrics(res) for res in new["results"]]
        out.append({"round": r + 1, "steps": new["steps"], "labelled": new["labelled"],
                    "agreed": round(new["agreed"] / max(new["labelled"], 1), 4),
                    "avg_jct_s": round(float(np.mean([m["avg_jct_s"] for m in jct])), 1),
                    "jobs_finished": int(sum(m["jobs_finished"] for m in jct)),
                    "samples": int(len(data["action"])), "loss_last": losses[-1] if losses else None,
                    "accuracy": accuracy(model.policy, data, masked), "s": round(time.perf_counter() - t0, 1)})
    return out


def _int_at_least(value: Any, key: str, lowest: int) -> int:
    """``value`` as an int, or a ConfigError naming ``key`` when it is not an integer >= ``lowest``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < lowest:
        raise ConfigError(f"{key} must be an integer >= {lowest}, got {value!r}")
    return value


def _eval_callback(cfg: DictConfig, eid: str, scn: Scenario | LevelScenario, kwargs: dict[str, Any], masked: bool, out: Path,
                   n_envs: int) -> Any:
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    ev = dict(kwargs)
    if cfg.eval.workloads is not None:
        ev["workloads"] = [int(w) for w in cfg.eval.workloads]
    if cfg.eval.run_seeds is not None:
        ev["run_seeds"] = [int(s) for s in cfg.eval.run_seeds]
    if cfg.eval.get("max_steps") is not None:
        ev["max_steps"] = int(cfg.eval.max_steps)
    eval_env: Any = DummyVecEnv([make_env_fn(eid, scn, ev, int(cfg.seed) + 99, 0)])
    if cfg.normalize_reward:  # same wrapper type as training; returns stay raw (job-hours)
        eval_env = VecNormalize(eval_env, norm_obs=False, norm_reward=False, training=False)
    freq = max(1, int(cfg.eval.freq) // n_envs)
    kw: dict[str, Any] = dict(n_eval_episodes=int(cfg.eval.episodes), eval_freq=freq, log_path=str(out / "eval"),
                              best_model_save_path=str(out / "eval"), deterministic=True, verbose=0)
    if masked:
        from sb3_contrib.common.maskable.callbacks import MaskableEvalCallback

        return MaskableEvalCallback(eval_env, **kw)
    from stable_baselines3.common.callbacks import EvalCallback

    return EvalCallback(eval_env, **kw)


def _selection_callback(cfg: DictConfig, eid: str, scn: Scenario | LevelScenario, kwargs: dict[str, Any],
                        masked: bool, out: Path, n_envs: int) -> Any:
    """The checkpoint-selection callback (:mod:`agents.selection`), its reference heuristics scored
    first on the same validation episodes (ConfigError naming the ``select.*`` key that is wrong)."""
    import gymnasium as gym

    from agents.selection import (
        BOUND_KEYS,
        OBJECTIVES,
        Rule,
        heuristic_results,
        score_runs,
        selection_callback,
    )
    from baselines import POLICY_NAMES

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
    episodes = [(w, s) for s in seeds for w in workloads]
    refs = {name: score_runs(0, heuristic_results(scn, name, episodes)) for name in sorted(set(bounds.values()))}
    rule = Rule({m: (1.0 + slack) * float(getattr(refs[name], m)) for m, name in bounds.items()}, str(sc.objective))
    env = gym.make(eid, scenario=scn, **dict(kwargs, max_steps=max_steps))
    return selection_callback(env, episodes, rule, refs, max(1, freq // n_envs), masked, out)


def _wallclock_cls() -> Any:
    from stable_baselines3.common.callbacks import BaseCallback

    class WallClock(BaseCallback):
        """Stop training after ``limit_s`` seconds of wall time, less ``excluded()`` seconds (time
        spent in checkpoint selection)."""

        def __init__(self, limit_s: float, excluded: Callable[[], float]) -> None:
            super().__init__()
            self.limit_s = limit_s
            self.excluded = excluded
            self.t0 = 0.0

        def _on_training_start(self) -> None:
            self.t0 = time.perf_counter()

        def _on_step(self) -> bool:
            return time.perf_counter() - self.t0 - self.excluded() < self.limit_s

    return WallClock


def _WallClock(limit_s: float, excluded: Callable[[], float] = lambda: 0.0) -> Any:  # noqa: N802 (factory named like its class)
    return _wallclock_cls()(limit_s, excluded)


def _output_dir(cfg: DictConfig) -> Path:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    hc = HydraConfig.get()
    if hc.mode == RunMode.MULTIRUN:
        return Path(hc.runtime.output_dir)
    return Path(cfg.out_dir)


@hydra.main(config_path=str(CONF_DIR), config_name="train", version_base="1.3")
def _main(cfg: DictConfig) -> None:
    out = _output_dir(cfg)
    try:
        summary = train(cfg, out)
    except ConfigError as e:
        line = " ".join(x.strip() for x in str(e).splitlines() if x.strip())
        print(f"gpusched-train: error: {line}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None
    print(json.dumps(summary, indent=2))
    print(f"wrote {out}/model.zip and {out}/config.yaml")


def main() -> None:
    _main()


if __name__ == "__main__":
    np.set_printoptions(precision=4)
    main()
