"""Config errors name the key; the CLI documents its subcommands."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from gpusched_env.config_util import ConfigError
from real.backend import RealConfig
from real.config import DevicesConf, build_devices, load_sizes, load_workload
from real.launcher import REPO_ROOT


def test_bad_config_names_the_key() -> None:
    with pytest.raises(ConfigError, match=r"models\.bert"):
        load_sizes({"bert": {"arch": "rnn"}})
    with pytest.raises(ConfigError, match=r"models\.mystery"):
        load_sizes({"mystery": {"arch": "mlp"}})  # not in the catalogue and no perf_class
    assert load_sizes({"mystery": {"arch": "mlp", "perf_class": "C"}})["mystery"].perf_class == "C"
    with pytest.raises(ConfigError, match=r"models\.resnet50"):
        load_workload("real_cpu_small", load_sizes({"bert": {"arch": "encoder"}}), 0)
    with pytest.raises(ConfigError, match="devices.kind"):
        build_devices(DevicesConf(kind="tpu"), "auto", None)
    with pytest.raises(ConfigError, match="devices.count"):
        build_devices(DevicesConf(kind="cpu", count=999), "auto", None)
    with pytest.raises(ValueError, match="real.poll_s"):
        RealConfig(poll_s=0)


def test_real_cpu_small_loads() -> None:
    wl, scn = load_workload("real_cpu_small", load_sizes({
        m: {"arch": "mlp"} for m in ("resnet50", "bert", "pointnet")}), 0)
    assert wl.topology.n_gpus == 2 and len(wl.jobs) == 6 and scn.name == "real_cpu_small"


def test_cli_help_lists_subcommands() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    out = subprocess.run([sys.executable, "-m", "real.cli", "--help"], env=env, capture_output=True, text=True,
                         timeout=60, check=True).stdout
    for word in ("profile", "replay", "compare", "cmd=SUBCOMMAND", "profile_dir"):
        assert word in out
