"""Config errors name the key; the CLI documents its subcommands."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpusched.real.backend import RealConfig
from gpusched.real.config import DevicesConf, build_devices, load_sizes, load_workload
from gpusched_env.config_util import ConfigError, from_dict


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


def test_cli_help_lists_subcommands(real_help: str) -> None:
    for word in ("profile", "replay", "compare", "cmd=SUBCOMMAND", "profile_dir"):
        assert word in real_help


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
    monkeypatch.setattr("gpusched.real.config.nvidia_problem", lambda: "nvidia-smi is not on PATH")
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
    monkeypatch.setattr("gpusched.real.config.nvidia_problem", lambda: "nvidia-smi is not on PATH")
    monkeypatch.setenv("GPUSCHED_CPU_FALLBACK", "1")
    devices, runner = build_devices(DevicesConf(kind="nvidia", count=2), "dry_run", tmp_path / "commands.jsonl")
    assert devices.kind == "nvidia" and devices.n == 2 and runner.dry_run
    assert [c.argv for c in runner.calls[:3]] == [("nvmlInit",), ("nvmlDeviceGetCount",),
                                                  ("nvmlDeviceGetHandleByIndex", "0")]
    assert devices.placement_env((1,), 1.0)["CUDA_VISIBLE_DEVICES"] == "1"
    with pytest.raises(ConfigError, match="devices.count is required"):
        build_devices(DevicesConf(kind="nvidia"), "dry_run", None)


def _real_main(argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    """``gpusched-real argv`` in this process: (exit code, stderr)."""
    from gpusched.real import cli
    from tests.cli_helpers import run_main

    return run_main(cli.main, "gpusched-real", argv, capsys, monkeypatch)


REAL_CASES = [
    (["nope"], "gpusched-real: error: unknown subcommand 'nope'; use one of: profile, replay, compare, pairs"),
    (["replay", "scenario=tally_pairs"], "gpusched-real replay: error: scenario: tally_pairs is a device-level "
                                         "scenario; gpusched-real profile, replay and compare run cluster-level"),
    (["replay", "profile_dir=/nonexist"], "gpusched-real replay: error: profile_dir: /nonexist is not a profile folder "
                                          "written by gpusched-real profile (no /nonexist/profile.csv)"),
    (["replay", "bogus=1"], "gpusched-real: error: Could not override 'bogus'"),
    (["replay", "+bogus=1"], "gpusched-real: error: bogus: unknown key; gpusched-real reads only ['agent_path'"),
    (["replay", "scenario.workload.jobs=[]"], "gpusched-real: error: scenario.workload.jobs: gpusched-real takes no "
                                              "scenario.* overrides; copy the scenario's YAML file"),
]


@pytest.mark.parametrize(("argv", "message"), REAL_CASES, ids=[" ".join(c[0]) for c in REAL_CASES])
def test_cli_input_errors_are_one_line_exit_2(argv: list[str], message: str, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    code, err = _real_main([*argv, f"out_dir={tmp_path / 'o'}", "devices.kind=cpu"], capsys, monkeypatch)
    lines = [x for x in err.splitlines() if x.strip()]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(message), lines[0]


def test_cli_unwritable_out_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    code, err = _real_main(["replay", f"out_dir={blocker / 'sub'}"], capsys, monkeypatch)
    assert code == 2 and err.strip() == (f"gpusched-real: error: out_dir: cannot create or write {blocker / 'sub'} "
                                         "(Not a directory)"), err


def test_cli_help_documents_the_scenario_file_path(real_help: str) -> None:
    assert "copy its\nYAML file, edit it and pass scenario=PATH.yaml" in real_help


def test_replay_progress_lines(capsys: pytest.CaptureFixture[str]) -> None:
    from gpusched.real.cli import print_progress

    wl, _ = load_workload("real_cpu_small", load_sizes({m: {"arch": "mlp"} for m in ("resnet50", "bert", "pointnet")}), 0)
    show = print_progress(wl, every_s=10.0)
    for done, t in [(0, 0.0), (0, 0.5), (1, 0.7), (1, 1.2), (2, 3.0), (2, 12.9), (2, 13.1)]:
        show(done, t)
    assert capsys.readouterr().out.splitlines() == [
        "replay real_cpu_small: 0/6 jobs finished, 0 s elapsed",   # first call
        "replay real_cpu_small: 1/6 jobs finished, 1 s elapsed",   # count changed, >= 1 s after the last line
        "replay real_cpu_small: 2/6 jobs finished, 3 s elapsed",
        "replay real_cpu_small: 2/6 jobs finished, 13 s elapsed",  # 10 s without a change
    ]
