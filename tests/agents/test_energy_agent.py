"""The energy goal's training set-up: env=cluster_energy on eaco_cluster trains with an EaCO warm start,
and its model runs through the bench."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from gpusched.agents.adapter import load_agent_policy, read_meta
from gpusched_env.cluster.build import simulate
from gpusched_env.data import DataMissing
from gpusched_env.metrics import compute_metrics
from gpusched_env.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[2]


def test_cluster_energy_config_trains_with_an_eaco_warm_start(tmp_path):
    import json

    from hydra import compose, initialize_config_dir

    from gpusched.agents.train import CLUSTER_V0, env_kwargs, train

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        cfg = compose("train", overrides=[
            "scenario=eaco_cluster", "env=cluster_energy", "total_timesteps=128", "seed=0", "n_envs=1",
            "agent.params.n_steps=128", "agent.params.batch_size=64", "agent.params.n_epochs=1",
            "agent.params.policy_kwargs.net_arch=[32]", "eval.enabled=false", "checkpoint_freq=128",
            "bc.teacher=eaco", "bc.episodes=1", "bc.epochs=2", "env.run_seeds=[1000]"])
    kw = env_kwargs(cfg)
    assert kw["energy_weight"] == 1.0 and kw["slo_weight"] == 0.0
    assert kw["options"] == ["packed", "least_interference", "consolidate"]
    try:
        summary = train(cfg, tmp_path)
    except DataMissing:
        pytest.skip("Philly trace absent")
    bc = json.loads((tmp_path / "bc.json").read_text())
    assert bc["teacher"] == "eaco" and bc["samples"] > 1511  # every start, plus the "done" actions
    assert summary["num_timesteps"] >= 128
    meta = read_meta(tmp_path / "model.zip")
    assert meta["env_id"] == CLUSTER_V0 and meta["env"]["options"] == kw["options"]
    # the model through the bench on a short window of the scenario (the same cluster, its first 60 jobs;
    # test_pretrained.py plays the same way), every job to the end
    scn = load_scenario("eaco_cluster")
    scn = replace(scn, workload=replace(scn.workload, limit=60))
    _, res = simulate(scn, load_agent_policy(tmp_path / "model.zip", scn), 0, 0)
    m = compute_metrics(res)
    assert m["jobs_finished"] == 60 and m["energy_kwh"] > 0
