"""Cluster-v1 agents: adapter == env for a preempting model, BC of LAS through v1, what results say."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import gpusched_env  # noqa: F401
from gpusched.agents.adapter import PreemptAgentPolicy, describe_agent, load_agent_policy, write_meta
from gpusched.agents.bc import accuracy, clone, collect_v1, make_teacher
from gpusched_env.cluster.build import simulate
from gpusched_env.config_util import ConfigError
from gpusched_env.envs import ClusterV1Env
from gpusched_env.metrics import compute_metrics
from gpusched_env.scenario import load_scenario
from tests.agents.agent_helpers import play_model

SCN = "synthetic_small"


def _scn(n_jobs: int = 300):
    """synthetic_philly at 300 jobs: enough contention that LAS preempts (synthetic_small rarely does)."""
    import yaml

    from gpusched_env.scenario import CONF_DIR

    cfg = yaml.safe_load((CONF_DIR / "scenario" / "synthetic_philly.yaml").read_text())
    cfg["workload"]["n_jobs"] = n_jobs
    return load_scenario(cfg)


def _tiny_model(env: gym.Env, seed: int = 0):
    import torch
    from sb3_contrib import MaskablePPO

    torch.set_num_threads(1)
    return MaskablePPO("MlpPolicy", env, n_steps=64, batch_size=32, n_epochs=1, seed=seed,
                       policy_kwargs={"net_arch": [32]}, device="cpu")


def _meta(u: ClusterV1Env) -> dict:
    return {"algo": "maskable_ppo", "scenario": SCN, "env_id": "gpusched/Cluster-v1", "seed": 0, "num_timesteps": 0,
            "env": {"queue_slots": u.k, "fifo_slots": u.fifo_slots, "running_slots": u.r,
                    "clairvoyant": u.clairvoyant, "migrations": u.migrations,
                    "options": list(u.option_set.names), "max_actions_per_decision": u.max_actions_per_decision}}


@pytest.fixture(scope="module")
def cloned_las(tmp_path_factory) -> Path:
    """A small model cloned from LAS through Cluster-v1 (it preempts), saved as gpusched-train does."""
    scn = _scn()
    env = ClusterV1Env(scn, options=["packed"], run_seeds=[0])
    data = collect_v1(env, lambda s: make_teacher("las", scn, s), episodes=1, seed=0)
    model = _tiny_model(gym.make("gpusched/Cluster-v1", scenario=scn, options=["packed"]))
    clone(model.policy, data, epochs=20, batch_size=64, lr=3e-3, seed=0, masked=True)
    path = tmp_path_factory.mktemp("agent_v1") / "model.zip"
    model.save(str(path))
    write_meta(path, _meta(env))
    return path


def test_bc_of_las_through_v1_learns_lifts():
    scn = _scn()
    env = ClusterV1Env(scn, options=["packed"], run_seeds=[0])
    data = collect_v1(env, lambda s: make_teacher("las", scn, s), episodes=1, seed=0)
    acts = data["action"]
    assert data["mask"][np.arange(len(acts)), acts].all()  # every teacher action is valid
    lift0 = env.k
    assert ((acts >= lift0) & (acts < env.n_actions - 1)).any()  # LAS's preemptions appear as lifts
    model = _tiny_model(gym.make("gpusched/Cluster-v1", scenario=scn, options=["packed"]))
    losses = clone(model.policy, data, epochs=20, batch_size=64, lr=3e-3, seed=0, masked=True)
    assert losses[-1] < losses[0]
    assert accuracy(model.policy, data, True) > 0.9


def test_v1_agent_through_bench_equals_agent_through_env(cloned_las):
    scn = _scn(120)  # the same generator at 120 jobs (the equality, not contention, is under test)
    policy = load_agent_policy(cloned_las, scn)
    assert isinstance(policy, PreemptAgentPolicy)
    _, res_bench = simulate(scn, policy, 0, 0)
    env = gym.make("gpusched/Cluster-v1", scenario=scn, options=["packed"])
    m = compute_metrics(play_model(env, policy.model, run_seed=0))
    assert m == compute_metrics(res_bench)
    assert m["jobs_finished"] == 120


def test_describe_agent_says_env_and_clairvoyance(cloned_las, tmp_path):
    d = describe_agent(cloned_las)
    assert d["env_id"] == "gpusched/Cluster-v1" and d["clairvoyant"] is False and d["algo"] == "maskable_ppo"


def test_v1_model_plays_another_node_count_and_refuses_another_window(cloned_las, tmp_path):
    """Trained on 16 nodes, it plays synthetic_small's 2 through the node fold (every job finishes); the same
    weights with a stored window of another size (running_slots + 1) or another option list are a named error."""
    import copy
    import json
    import zipfile

    scn = load_scenario("synthetic_small")
    policy = load_agent_policy(cloned_las, scn)
    assert policy.model_nodes == 16
    _, res = simulate(scn, policy, 0, 0)
    assert compute_metrics(res)["jobs_finished"] == scn.workload.n_jobs == 40
    with zipfile.ZipFile(cloned_las) as z:
        meta = json.loads(z.read("gpusched_env.json"))
    slots, opts = copy.deepcopy(meta), copy.deepcopy(meta)
    slots["env"]["running_slots"] += 1  # another observation (17 more window entries)
    opts["env"]["options"] += ["spread"]  # the same observation, 8 more start actions
    for i, (changed, needs) in enumerate([(slots, r"\d+ actions .* running_slots=9, 1 options"),
                                          (opts, r"2 options")]):
        bad = tmp_path / f"bad{i}.zip"
        with zipfile.ZipFile(cloned_las) as zin, zipfile.ZipFile(bad, "w") as zout:
            for item in zin.infolist():
                if item.filename != "gpusched_env.json":
                    zout.writestr(item, zin.read(item.filename))
        write_meta(bad, changed)
        with pytest.raises(ConfigError, match=r"trained on scenario 'synthetic_small' \(observation \[\d+\], \d+ "
                                              rf"actions\); scenario 'synthetic_small' needs .*{needs}"):
            load_agent_policy(bad, scn)


def test_env_group_cluster_v1_reaches_the_env_and_the_model_meta():
    from hydra import compose, initialize_config_dir

    from gpusched.agents.train import CLUSTER_V1, _meta, env_id, env_kwargs, scenario_of

    root = Path(__file__).resolve().parents[2]
    with initialize_config_dir(config_dir=str(root / "conf"), version_base=None):
        cfg = compose("train", overrides=[f"scenario={SCN}", "env=cluster_v1", "env.clairvoyant=true",
                                          "env.workloads=[0]", "bc.teacher=srtf"])
    assert env_id(cfg) == CLUSTER_V1
    kwargs = env_kwargs(cfg)
    env = gym.make(CLUSTER_V1, scenario=scenario_of(cfg), **kwargs)
    assert env.unwrapped.clairvoyant and env.unwrapped.r == 8
    meta = _meta(cfg, CLUSTER_V1, scenario_of(cfg), kwargs, "maskable_ppo", 10)
    assert meta["env_id"] == CLUSTER_V1 and meta["env"]["clairvoyant"] is True and meta["bc_teacher"] == "srtf"
    assert "workloads" not in meta["env"] and meta["env"]["running_slots"] == 8
