"""The shipped Hydra launcher configs (conf/hydra/launcher): they compose, a sweep runs through
hydra-submitit-launcher (installed with the dev extras; its local executor stands in for Slurm), and
one runs through hydra-ray-launcher on a Ray cluster started on this machine."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir

ROOT = Path(__file__).resolve().parents[2]
LAUNCHERS = sorted((ROOT / "conf" / "hydra" / "launcher").glob("*.yaml"))


def _hydra_cfg(launcher: str):
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        return compose("train", overrides=[f"hydra/launcher={launcher}"], return_hydra_config=True).hydra


@pytest.mark.parametrize("path", LAUNCHERS, ids=lambda p: p.stem)
def test_launcher_config_does_not_shadow_the_plugin_config_it_extends(path):
    """A file named like the plugin's own config (e.g. ray.yaml with ``defaults: [ray]``) extends
    itself, and Hydra recurses until the stack runs out."""
    defaults = yaml.safe_load(path.read_text()).get("defaults", [])
    assert defaults, f"{path.name} extends no plugin config"
    assert path.stem not in [str(d) for d in defaults]


def test_slurm_config_composes_against_the_submitit_schema():
    launcher = _hydra_cfg("slurm").launcher
    assert launcher._target_.endswith("submitit_launcher.SlurmLauncher")
    assert (launcher.cpus_per_task, launcher.gpus_per_node, launcher.mem_gb, launcher.timeout_min) == (2, 0, 8, 60)
    assert launcher.array_parallelism == 16 and launcher.partition is None


def test_ray_cluster_config_composes_against_the_ray_launcher_schema():
    pytest.importorskip("hydra_plugins.hydra_ray_launcher")
    launcher = _hydra_cfg("ray_cluster").launcher
    assert launcher._target_.endswith("hydra_ray_launcher.ray_launcher.RayLauncher")
    # the key must be present (null) or the plugin sets one, which ray.init refuses when joining a cluster
    assert dict(launcher.ray.init) == {"address": "auto", "object_store_memory": None}
    assert dict(launcher.ray.remote) == {"num_cpus": 2, "num_gpus": 0}


def test_joblib_config_composes():
    assert _hydra_cfg("local_joblib").launcher._target_.endswith("joblib_launcher.JoblibLauncher")


@pytest.mark.slow
def test_seed_sweep_through_submitit(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, "-m", "gpusched.agents.train", "-m", "hydra/launcher=submitit_local", "seed=0,1",
           "scenario=synthetic_small", f"out_dir={tmp_path}", "total_timesteps=128", "n_envs=1",
           "agent.params.n_steps=64", "agent.params.batch_size=32", "agent.params.n_epochs=1", "eval.enabled=false"]
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    for run in ("0_seed0", "1_seed1"):
        assert (tmp_path / "multirun" / run / "model.zip").is_file(), run


def _sweep_cmd(out: Path, *overrides: str) -> list[str]:
    return [sys.executable, "-m", "gpusched.agents.train", "-m", *overrides, "seed=0,1", "scenario=synthetic_small",
            f"out_dir={out}", "total_timesteps=64", "n_envs=1", "agent.params.n_steps=32",
            "agent.params.batch_size=32", "agent.params.n_epochs=1", "eval.enabled=false"]


@pytest.mark.slow  # ~45 s: the Ray cluster takes ~15 s to start here
def test_seed_sweep_through_the_ray_launcher_on_a_local_cluster(tmp_path):
    """``hydra/launcher=ray_cluster`` joins a running cluster (as after ``ray start --head``); the
    cluster's worker processes import the project from the test's PYTHONPATH."""
    pytest.importorskip("hydra_plugins.hydra_ray_launcher")
    from ray.cluster_utils import Cluster

    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    old = dict(os.environ)
    os.environ.update(env)  # the cluster's processes inherit it
    try:
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False})
    finally:
        os.environ.clear()
        os.environ.update(old)
    address = cluster.address
    try:
        cmd = _sweep_cmd(tmp_path, "hydra/launcher=ray_cluster", f"hydra.launcher.ray.init.address={address}")
        p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    finally:
        cluster.shutdown()
    assert p.returncode == 0, p.stderr[-3000:]
    assert "Ray Launcher is launching 2 jobs" in p.stdout + p.stderr
    assert f"Connecting to existing Ray cluster at address: {address}" in p.stderr
    for run in ("0_seed0", "1_seed1"):
        assert (tmp_path / "multirun" / run / "model.zip").is_file(), run
