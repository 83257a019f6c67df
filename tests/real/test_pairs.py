"""``gpusched-real pairs``: the exact GPU commands and process environments of each mechanism
(recorded, not executed), input validation, and a tiny real CPU run whose CSV the device model's
reader accepts."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest
from realtest_helpers import descendants

from gpusched.real.commands import Call, DryRunRunner
from gpusched.real.devices import CpuDevices, NvidiaDevices
from gpusched.real.launcher import REPO_ROOT
from gpusched.real.pairs import COLUMNS, CellFailed, PairsConf, load_pairs_conf, plan, run_pairs, usable_cores
from gpusched_env.config_util import ConfigError

FAKE = Path(__file__).with_name("fake_pairs_worker.py")
H100_CSV = REPO_ROOT.parent / "shared" / "data" / "calibration" / "colocation-h100" / "h100_hp_be_pairs.csv"
H100_HEADER = ("run,measure_s,mechanism,hp_model,be_model,hp_load,hp_solo_ms,hp_requests,hp_mean_ms,hp_p50_ms,"
               "hp_p99_ms,be_iter_per_s,be_solo_iter_per_s")


class FakeWorkers(DryRunRunner):
    """Records each spawn exactly as a GPU run would issue it, then starts the torch-free fake worker."""

    def spawn(self, argv, env, cwd, log):  # type: ignore[no-untyped-def]
        self._record(Call("spawn", tuple(argv), dict(env)))
        return subprocess.Popen([sys.executable, str(FAKE), argv[-1]], env={**os.environ, **env}, cwd=cwd,
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)


def _quiet(*a: object, **k: object) -> None:
    pass


def test_columns_are_the_h100_csv_columns() -> None:
    assert ",".join(COLUMNS) == H100_HEADER
    if H100_CSV.exists():
        assert H100_CSV.read_text().splitlines()[0] == H100_HEADER


def test_recorded_commands_and_env_per_mechanism(run_dir: Path) -> None:
    runner = FakeWorkers(run_dir / "commands.jsonl")
    devices = NvidiaDevices(runner, count=1)
    conf = PairsConf(hp_models=["resnet50_inf"], be_models=["gpt2_train"],
                     mechanisms=["time_slicing", "mps", "mps_priority", "mps_be50"], duration_s=0.1, warmup_s=0.1, calib_s=0.1)
    rows = run_pairs(conf, devices, runner, run_dir, log=_quiet)
    assert not descendants()
    py, pypath = sys.executable, os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)
    gpu = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "0", "GPUSCHED_TORCH_DEVICE": "cuda",
           "PYTHONPATH": pypath, "PYTHONUNBUFFERED": "1"}
    cells = sorted((run_dir / "cells").iterdir())
    assert [c.name for c in cells] == ["001-r1-exclusive-resnet50_inf-none", "002-r1-exclusive-none-gpt2_train",
                                       "003-r1-time_slicing-resnet50_inf-gpt2_train", "004-r1-mps-resnet50_inf-gpt2_train",
                                       "005-r1-mps_priority-resnet50_inf-gpt2_train", "006-r1-mps_be50-resnet50_inf-gpt2_train"]

    def spawn(cell: Path, role: str, **extra: str) -> tuple:
        return ("spawn", (py, "-m", "gpusched.real.pairs_worker", str(cell / f"{role}.spec.json")), {**gpu, **extra}, None)

    def mps(cell: Path) -> dict[str, str]:
        return {"CUDA_MPS_PIPE_DIRECTORY": str(cell / "mps" / "pipe"), "CUDA_MPS_LOG_DIRECTORY": str(cell / "mps" / "log")}

    def daemon(cell: Path) -> tuple[tuple, tuple]:
        return (("run", ("nvidia-cuda-mps-control", "-d"), mps(cell), None),
                ("run", ("nvidia-cuda-mps-control",), mps(cell), "quit\n"))

    c1, c2, ts, m, mp, cap = cells
    expected = [
        spawn(c1, "hp"),                                   # exclusive: alone, no MPS
        spawn(c2, "be"),
        spawn(ts, "hp"), spawn(ts, "be"),                  # time_slicing: two contexts, no MPS daemon
        daemon(m)[0], spawn(m, "hp", **mps(m)), spawn(m, "be", **mps(m)), daemon(m)[1],
        daemon(mp)[0], spawn(mp, "hp", **mps(mp), CUDA_MPS_CLIENT_PRIORITY="0"),
        spawn(mp, "be", **mps(mp), CUDA_MPS_CLIENT_PRIORITY="1"), daemon(mp)[1],
        daemon(cap)[0], spawn(cap, "hp", **mps(cap)),
        spawn(cap, "be", **mps(cap), CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="50"), daemon(cap)[1],
    ]
    got = [(c.kind, c.argv, c.env, c.stdin) for c in runner.calls if c.kind != "nvml"]
    assert got == expected
    logged = (run_dir / "commands.jsonl").read_text()
    assert logged.count('"nvidia-cuda-mps-control", "-d"') == 3 and "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" in logged
    # rows: solo values from the exclusive cells of the same run, the fake workers' numbers
    by = {(r["mechanism"], r["hp_model"], r["be_model"]): r for r in rows}
    assert by[("exclusive", "resnet50_inf", "")]["hp_solo_ms"] == "2"
    assert by[("mps", "resnet50_inf", "gpt2_train")]["be_iter_per_s"] == "15"
    assert by[("mps", "resnet50_inf", "gpt2_train")]["be_solo_iter_per_s"] == "20"
    assert by[("time_slicing", "resnet50_inf", "gpt2_train")]["hp_p99_ms"] == "9.25"
    assert all(r["device"] == "gpu0" for r in rows)


def test_cpu_mechanisms_map_to_threads_and_nice(run_dir: Path) -> None:
    from gpusched.real.mps import MpsDaemon
    from gpusched.real.pairs import cell_sides

    dev = CpuDevices([usable_cores()[:1]], nice=0)
    mps = MpsDaemon(DryRunRunner(), run_dir)
    hp, be = cell_sides("mps_priority", "bert_inf", "gpt2_train", dev, mps)
    assert be.env["GPUSCHED_NICE"] == "10" and "GPUSCHED_NICE" not in hp.env
    assert be.env["CUDA_MPS_CLIENT_PRIORITY"] == "1" and hp.env["CUDA_MPS_CLIENT_PRIORITY"] == "0"
    assert be.env["OMP_WAIT_POLICY"] == "PASSIVE"
    dev4 = CpuDevices([[0, 1, 2, 3]])  # only the environment is built: the cores need not exist
    hp, be = cell_sides("mps_be25", "bert_inf", "gpt2_train", dev4, mps)
    assert be.env["GPUSCHED_NUM_THREADS"] == "1" and hp.env["GPUSCHED_NUM_THREADS"] == "4"
    assert be.env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"


def test_failing_worker_stops_everything(run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_PAIRS_CRASH", "hp")
    runner = FakeWorkers()
    conf = PairsConf(hp_models=["bert_inf"], be_models=["resnet50_train"], mechanisms=["mps"], duration_s=0.1)
    with pytest.raises(CellFailed, match="hp worker"):
        run_pairs(conf, NvidiaDevices(runner, count=1), runner, run_dir, log=_quiet)
    assert not descendants()


@pytest.mark.parametrize(("key", "value", "msg"), [
    ("hp_models", ["resnet50_train"], "pairs.hp_models: unknown HP model 'resnet50_train'"),
    ("be_models", ["llama"], "pairs.be_models: unknown BE model 'llama'"),
    ("mechanisms", ["mig"], "pairs.mechanisms: unknown mechanism 'mig'"),
    ("mechanisms", ["mps_be100"], "pairs.mechanisms: unknown mechanism 'mps_be100'"),
    ("load", 1.0, "pairs.load: must be in (0, 1)"),
    ("load", 0, "pairs.load: must be in (0, 1)"),
    ("duration_s", 0, "pairs.duration_s: must be > 0"),
    ("warmup_s", -1.0, "pairs.warmup_s: must be > 0"),
    ("repeats", 0, "pairs.repeats: must be >= 1"),
    ("scale", "huge", "pairs.scale"),
    ("colour", "red", "pairs: unknown key(s) ['colour']"),
])
def test_validation(key: str, value: object, msg: str) -> None:
    with pytest.raises(ConfigError) as e:
        load_pairs_conf({key: value})
    assert msg in str(e.value) and "\n" not in str(e.value)


def test_old_mechanism_names_are_read_with_a_one_line_note(capsys: pytest.CaptureFixture[str]) -> None:
    from gpusched_env import vocabulary

    vocabulary._told.clear()  # each old name is noted once per place and process
    conf = load_pairs_conf({"mechanisms": ["timeslice", "mps", "mps_prio", "mps_be50"]})
    assert conf.mechanisms == ["time_slicing", "mps", "mps_priority", "mps_be50"]
    assert capsys.readouterr().err.splitlines() == [
        "pairs.mechanisms: 'timeslice' is an old name; use 'time_slicing'",
        "pairs.mechanisms: 'mps_prio' is an old name; use 'mps_priority'"]


def test_defaults_plan_the_h100_cells() -> None:
    conf = load_pairs_conf(None)
    cells = plan(conf)
    assert len(cells) == 2 + 2 + 4 * 2 * 2
    assert cells[0] == (1, "exclusive", "resnet50_inf", None) and cells[-1] == (1, "mps_be50", "bert_inf", "gpt2_train")


def test_cli_bad_input_exits_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """In this process (the CLI runs as a process in test_kill.py)."""
    from gpusched.real import cli
    from tests.cli_helpers import run_main

    code, err = run_main(cli.main, "gpusched-real", ["pairs", "pairs.load=1.5", f"out_dir={tmp_path / 'run'}"],
                         capsys, monkeypatch)
    assert code == 2
    assert err.strip().splitlines() == ["gpusched-real pairs: error: pairs.load: must be in (0, 1) "
                                        "(a fraction of the HP's standalone rate); got 1.5"]
    assert not (tmp_path / "run" / "cells").exists()


@pytest.mark.slow  # ~6-15 s: three cells, each starting torch in two processes
def test_tiny_real_cpu_run_is_read_by_the_device_model(run_dir: Path) -> None:
    """Real processes on the CPU stand-in (small models): rows well-formed, readable as calibration."""
    from gpusched_env.device.measured import measured_cells

    runner = DryRunRunner(run_dir / "commands.jsonl")
    dev = CpuDevices([usable_cores()])
    conf = PairsConf(hp_models=["resnet50_inf"], be_models=["gpt2_train"], mechanisms=["mps_be50"],
                     duration_s=0.6, warmup_s=0.2, calib_s=0.2, drain_s=2.0)
    run_pairs(conf, dev, runner, run_dir, log=_quiet)
    assert not descendants()
    path = run_dir / "pairs.csv"
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == [*COLUMNS, "device"]
    assert [(r["mechanism"], r["hp_model"], r["be_model"]) for r in rows] == [
        ("exclusive", "resnet50_inf", ""), ("exclusive", "", "gpt2_train"), ("mps_be50", "resnet50_inf", "gpt2_train")]
    hp, be, pair = rows
    assert all(r["device"].startswith("CPU cores ") and r["run"] == "1" and r["measure_s"] == "0.6" for r in rows)
    assert float(hp["hp_solo_ms"]) > 0 and int(hp["hp_requests"]) >= 1 and hp["be_iter_per_s"] == ""
    assert float(hp["hp_p50_ms"]) <= float(hp["hp_p99_ms"])
    assert be["hp_load"] == "" and be["be_iter_per_s"] == be["be_solo_iter_per_s"] and float(be["be_iter_per_s"]) > 0
    assert pair["hp_solo_ms"] == hp["hp_solo_ms"] and pair["be_solo_iter_per_s"] == be["be_iter_per_s"]
    assert pair["hp_load"] == "0.5" and float(pair["be_iter_per_s"]) > 0 and float(pair["hp_p99_ms"]) > 0
    measured_cells.cache_clear()
    cells = measured_cells(str(path))  # an absolute path: the reader takes it as is
    assert set(cells) == {("exclusive", "resnet50_inf", "gpt2_train"), ("mps_be50", "resnet50_inf", "gpt2_train")}
    cell = cells[("mps_be50", "resnet50_inf", "gpt2_train")]
    assert cell.be_norm == (pytest.approx(float(pair["be_iter_per_s"]) / float(be["be_iter_per_s"])),)
    assert cell.hp_p99_ms == (float(pair["hp_p99_ms"]),)
    spawns = runner.commands("spawn")
    assert spawns[-1].env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"
    assert spawns[-1].env["GPUSCHED_TORCH_DEVICE"] == "cpu"


@pytest.mark.slow  # ~15 s: two standalone cells, then SIGTERM during the MPS cell
def test_sigterm_mid_cell_leaves_nothing_behind(tmp_path: Path) -> None:
    import json
    import signal
    import time

    from realtest_helpers import processes_mentioning

    run = tmp_path / "run"
    argv = [sys.executable, "-m", "gpusched.real.cli", "pairs", f"out_dir={run}", "devices.kind=cpu", "pairs.hp_models=[bert_inf]",
            "pairs.be_models=[gpt2_train]", "pairs.mechanisms=[mps]", "pairs.duration_s=0.5", "pairs.warmup_s=0.2",
            "pairs.calib_s=0.2", "pairs.drain_s=60"]
    cli = subprocess.Popen(argv, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while not list(run.glob("cells/003-*/be.progress.jsonl")):
            assert cli.poll() is None, cli.stdout.read().decode() if cli.stdout else ""
            assert time.monotonic() < deadline, "the pair cell never started"
            time.sleep(0.05)
        cli.send_signal(signal.SIGTERM)
        out = cli.communicate(timeout=60)[0].decode()
    finally:
        if cli.poll() is None:
            cli.kill()
    assert cli.returncode == 130, out
    assert "interrupted" in out and "2 finished row(s)" in out
    assert not processes_mentioning(str(run)), "worker processes left behind"
    runs = [c for c in map(json.loads, (run / "commands.jsonl").read_text().splitlines()) if c["kind"] == "run"]
    assert [c["stdin"] for c in runs] == [None, "quit\n"]  # this cell's MPS daemon stopped
    assert len((run / "pairs.csv").read_text().splitlines()) == 3  # header + the two standalone rows
