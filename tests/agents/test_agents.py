"""Agents: BC loop, save -> load -> same actions, adapter == env, gpusched-train smoke run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import gpusched_env  # noqa: F401
from gpusched.agents.adapter import load_agent_policy, load_model, read_meta, write_meta
from gpusched.agents.bc import accuracy, clone, collect, make_teacher
from gpusched_env.cluster.build import simulate
from gpusched_env.envs import ClusterEnv
from gpusched_env.metrics import compute_metrics
from gpusched_env.scenario import load_scenario
from tests.agents.agent_helpers import play_model

ROOT = Path(__file__).resolve().parents[2]
SCN = "synthetic_small"


def _tiny_model(env: gym.Env, seed: int = 0):
    import torch
    from sb3_contrib import MaskablePPO

    torch.set_num_threads(1)
    return MaskablePPO("MlpPolicy", env, n_steps=64, batch_size=32, n_epochs=1, seed=seed,
                       policy_kwargs={"net_arch": [32]}, device="cpu")


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory) -> Path:
    env = gym.make("gpusched/Cluster-v0", scenario=SCN)
    model = _tiny_model(env)
    model.learn(128)
    path = tmp_path_factory.mktemp("agent") / "model.zip"
    model.save(str(path))
    u = env.unwrapped
    write_meta(path, {"algo": "maskable_ppo", "scenario": SCN,
                      "env": {"queue_slots": u.k, "fifo_slots": u.fifo_slots,
                              "options": list(u.option_set.names), "max_actions_per_decision": 64}})
    return path


def test_save_load_same_actions(saved_model):
    from sb3_contrib import MaskablePPO

    env = gym.make("gpusched/Cluster-v0", scenario=SCN)
    obs, info = env.reset(seed=0)
    original = MaskablePPO.load(str(saved_model), device="cpu")
    loaded = load_model(saved_model)
    assert read_meta(saved_model)["algo"] == "maskable_ppo"
    rng = np.random.default_rng(0)
    for _ in range(50):
        mask = info["action_mask"]
        a1, _ = original.predict(obs, action_masks=mask, deterministic=True)
        a2, _ = loaded.predict(obs, action_masks=mask, deterministic=True)
        assert int(a1) == int(a2) and mask[int(a1)]
        obs, _, term, trunc, info = env.step(int(rng.choice(np.flatnonzero(mask))))
        if term or trunc:
            obs, info = env.reset(seed=1)


def test_agent_through_bench_equals_agent_through_env(saved_model):
    """The adapter (gpusched-bench's `agent`) and the env give the same run for the same model."""
    scn = load_scenario(SCN)
    policy = load_agent_policy(saved_model, scn)
    _, res_bench = simulate(scn, policy, 2, 0)
    env = gym.make("gpusched/Cluster-v0", scenario=scn)
    assert compute_metrics(play_model(env, policy.model, run_seed=2)) == compute_metrics(res_bench)


def test_behaviour_cloning_learns_the_teacher():
    # one placement option (sjf places packed), so every teacher start has exactly one action
    scn = load_scenario(SCN)
    env = ClusterEnv(scn, options=["packed"])
    data = collect(env, lambda s: make_teacher("sjf", scn, s), episodes=2, seed=0)
    assert len(data["action"]) > 20
    assert data["mask"][np.arange(len(data["action"])), data["action"]].all()  # teacher actions are valid
    model = _tiny_model(gym.make("gpusched/Cluster-v0", scenario=SCN, options=["packed"]))
    before = accuracy(model.policy, data, True)
    losses = clone(model.policy, data, epochs=60, batch_size=64, lr=3e-3, seed=0, masked=True)
    after = accuracy(model.policy, data, True)
    assert losses[-1] < losses[0]
    assert after > max(before, 0.9)


def _train_cmd(out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "gpusched.agents.train", f"scenario={SCN}", "agent=maskable_ppo", "total_timesteps=256",
            "seed=0", f"out_dir={out}", "n_envs=1", "agent.params.n_steps=128", "agent.params.batch_size=64",
            "agent.params.n_epochs=1", "eval.enabled=false", "checkpoint_freq=128", *extra]


def _run(cmd: list[str]) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow  # the CLI in-process: tests/agents/test_train_cli.py
def test_train_smoke_subprocess(tmp_path):
    out = tmp_path / "run"
    p = _run(_train_cmd(out))
    assert p.returncode == 0, p.stderr[-3000:]
    for name in ("model.zip", "config.yaml", "command.txt"):
        assert (out / name).is_file(), name
    assert (out / "checkpoints").is_dir() and (out / "tb").is_dir()
    policy = load_agent_policy(out / "model.zip", load_scenario(SCN))
    _, res = simulate(load_scenario(SCN), policy, 0, 0)
    assert compute_metrics(res)["jobs_finished"] == len(res.tracked)


@pytest.mark.slow
def test_train_resume_and_bc_subprocess(tmp_path):
    out = tmp_path / "run"
    p = _run(_train_cmd(out, "bc.teacher=sjf", "bc.episodes=1", "bc.epochs=2"))
    assert p.returncode == 0, p.stderr[-3000:]
    assert (out / "bc.json").is_file()
    p = _run(_train_cmd(out, "resume=true", "total_timesteps=384"))
    assert p.returncode == 0, p.stderr[-3000:]
    assert "model_256_steps.zip" in (out / "train_summary.json").read_text()
    assert read_meta(out / "model.zip")["num_timesteps"] >= 384


def test_eval_episodes_are_capped_for_unmasked_agents(tmp_path):
    """An unmasked policy that keeps choosing invalid actions must not hang the evaluation."""
    from hydra import compose, initialize_config_dir

    from gpusched.agents.train import _eval_callback, env_id, env_kwargs, scenario_of

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        cfg = compose("train", overrides=[f"scenario={SCN}", "agent=ppo", "eval.max_steps=40"])
    cb = _eval_callback(cfg, env_id(cfg), scenario_of(cfg), env_kwargs(cfg), False, tmp_path, 1)
    env = cb.eval_env.envs[0]
    env.reset(seed=0)
    done_action = env.unwrapped.n_actions - 1
    steps, truncated = 0, False
    while not truncated:  # "done" on an idle cluster is invalid: a penalised no-op, forever
        _, _, term, truncated, _ = env.step(done_action)
        steps += 1
        assert not term and steps <= 40
    assert steps == 40


@pytest.mark.parametrize(("override", "message"), [
    ("vec_env=subproc", "vec_env must be dummy or subprocess, got 'subproc'"),
    ("n_envs=0", "n_envs must be >= 1, got 0"),
    ("total_timesteps=0", "total_timesteps must be >= 1, got 0"),
    ("env.id=gpusched/Nope-v0", r"env.id must be one of \['gpusched/Cluster-v0', .*got 'gpusched/Nope-v0'"),
])
def test_bad_training_keys_are_named_errors(tmp_path, override, message):
    from hydra import compose, initialize_config_dir

    from gpusched.agents.train import train

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        cfg = compose("train", overrides=[f"scenario={SCN}", override])
    with pytest.raises(ValueError, match=message):
        train(cfg, tmp_path)


def test_env_group_reaches_the_env_and_the_model_meta(tmp_path):
    """env=cluster is the default group; its id is recorded in model.zip; BC refuses other envs."""
    from hydra import compose, initialize_config_dir

    from gpusched.agents.train import CLUSTER_V0, _meta, env_id, env_kwargs, scenario_of, train

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        cfg = compose("train", overrides=[f"scenario={SCN}", "env.queue_slots=4"])
        bad = compose("train", overrides=[f"scenario={SCN}", "env.id=gpusched/Pipeline-v0", "bc.teacher=sjf"])
    assert env_id(cfg) == CLUSTER_V0
    kwargs = env_kwargs(cfg)
    assert "id" not in kwargs and kwargs["queue_slots"] == 4 and kwargs["options"][0] == "pal"
    meta = _meta(cfg, env_id(cfg), scenario_of(cfg), kwargs, "maskable_ppo", 10)
    assert meta["env_id"] == CLUSTER_V0 and meta["env"]["queue_slots"] == 4
    assert set(meta["env"]) == {"queue_slots", "fifo_slots", "options", "max_actions_per_decision",
                                "tokens", "max_nodes", "max_queue"}  # the token observation (set policy)
    with pytest.raises(ValueError, match="bc.teacher: the BC warm start is built for gpusched/Cluster-v0 and gpusched/Cluster-v1 only"):
        train(bad, tmp_path)
    assert not any(tmp_path.iterdir())  # refused before anything was written
