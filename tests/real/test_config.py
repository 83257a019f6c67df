"""Config errors name the key; the CLI documents its subcommands."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpusched_env.config_util import ConfigError, from_dict
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


@pytest.mark.parametrize(("conf", "key"), [
    ({"cores_per_device": 0}, "devices.cores_per_device must be >= 1; got 0"),
    ({"count": -1}, "devices.count must be >= 1"),
    ({"count": 0}, "devices.count must be >= 1"),
    ({"idle_w_per_core": -1.0}, r"devices.idle_w_per_core must be in \[0, busy_w_per_core=3.5\]"),
])
def test_bad_device_counts_are_named_errors(conf: dict[str, int | float], key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        build_devices(DevicesConf(kind="cpu", **conf), "auto", None)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=rf"devices: {key}"):
        from_dict(DevicesConf, {"kind": "cpu", **conf}, "devices")


def test_nvidia_without_a_gpu_fails_up_front(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """One line before anything runs, not three failed launches per job."""
    monkeypatch.setattr("real.config.nvidia_problem", lambda: "nvidia-smi is not on PATH")
    monkeypatch.delenv("GPUSCHED_CPU_FALLBACK", raising=False)
    log = tmp_path / "commands.jsonl"
    for commands in ("auto", "exec", "dry_run"):
        with pytest.raises(ConfigError) as e:
            build_devices(DevicesConf(kind="nvidia", count=1), commands, log)
        assert str(e.value).startswith("devices.kind=nvidia: no working NVIDIA GPU here (nvidia-smi is not on PATH)")
        assert "\n" not in str(e.value)
    assert not log.exists()  # nothing was run or recorded
    assert build_devices(DevicesConf(kind="auto", count=1), "auto", None)[0].kind == "cpu"


def test_nvidia_dry_run_records_what_would_run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr("real.config.nvidia_problem", lambda: "nvidia-smi is not on PATH")
    monkeypatch.setenv("GPUSCHED_CPU_FALLBACK", "1")
    devices, runner = build_devices(DevicesConf(kind="nvidia", count=2), "dry_run", tmp_path / "commands.jsonl")
    assert devices.kind == "nvidia" and devices.n == 2 and runner.dry_run
    assert [c.argv for c in runner.calls[:3]] == [("nvmlInit",), ("nvmlDeviceGetCount",),
                                                  ("nvmlDeviceGetHandleByIndex", "0")]
    assert devices.placement_env((1,), 1.0)["CUDA_VISIBLE_DEVICES"] == "1"
    with pytest.raises(ConfigError, match="devices.count is required"):
        build_devices(DevicesConf(kind="nvidia"), "dry_run", None)
