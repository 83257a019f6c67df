"""The bench app's backend seam (gpusched_env.backends): ``backend=sim`` (default) and ``backend=real``
run the same scenario through the same runner and write results.json alike; an unknown backend is one
line naming ``backend`` and the allowed values."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpusched_env.backends import BACKENDS, SimRuns, check_backend, make_backend
from gpusched_env.config_util import ConfigError

# two short pointnet jobs on the two devices of real_cpu_small, and a tiny stand-in model (tests/real)
JOBS = ("scenario.workload.jobs=[{job_id:0,arrival_s:0.0,num_gpus:1,work_iters:20,model:pointnet,perf_class:D,"
        "mem_gb:0.5},{job_id:1,arrival_s:0.0,num_gpus:1,work_iters:30,model:pointnet,perf_class:D,mem_gb:0.5}]")
TINY = "real.models={pointnet:{arch:mlp,width:32,depth:1,batch:8,input:32}}"
REAL_ONLY = {"avg_startup_s", "deadlocked", "interrupted", "timed_out", "wall_s"}  # gpusched.real.backend's result


def run_bench(argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    from gpusched.bench import cli
    from tests.cli_helpers import run_main

    return run_main(cli.main, "gpusched-bench", argv, capsys, monkeypatch)


def test_backends_by_name() -> None:
    assert list(BACKENDS) == ["sim", "real"]
    assert isinstance(make_backend("sim"), SimRuns) and make_backend("sim").parallel
    real = make_backend("real", {"devices": {"kind": "cpu"}})
    assert type(real).__module__ == "gpusched.real.runs" and not real.parallel  # registered by path: nothing imports real
    with pytest.raises(ConfigError, match=r"^backend: sim takes no options, got \['devices'\]$"):
        make_backend("sim", {"devices": {}})
    with pytest.raises(ConfigError, match=r"^real\.colour: unknown key; a real run reads devices, real, models"):
        make_backend("real", {"colour": "red"})
    with pytest.raises(ConfigError, match=r"^real\.devices: unknown key\(s\) \['kinds'\]"):
        make_backend("real", {"devices": {"kinds": "cpu"}})


@pytest.mark.parametrize("bad", ["gpu", "", 3])
def test_unknown_backend_is_one_line_naming_the_allowed_values(bad: object) -> None:
    with pytest.raises(ConfigError) as e:
        check_backend(bad)
    assert str(e.value) == f"backend: unknown backend {bad!r}; allowed: sim, real"


def test_bench_cli_unknown_backend(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "run"
    code, err = run_bench(["scenario=synthetic_small", "backend=gpu", f"out_dir={out}"], capsys, monkeypatch)
    assert code == 2 and err == "gpusched-bench: error: backend: unknown backend 'gpu'; allowed: sim, real\n"
    assert not out.exists()
    code, err = run_bench(["scenario=tally_pairs", "backend=real", f"out_dir={out}"], capsys, monkeypatch)
    assert code == 2 and err == ("gpusched-bench: error: backend: real runs cluster-level scenarios; tally_pairs is a "
                                 "device-level scenario (backend=sim runs every level)\n")
    code, err = run_bench(["perf=true", "backend=real", f"out_dir={out}"], capsys, monkeypatch)
    assert code == 2 and err == ("gpusched-bench: error: backend: perf=true times the simulator (backend=sim), "
                                 "got backend=real\n")


def test_backend_real_refuses_a_model_without_stand_in(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Checked before any run: nothing is written."""
    out = tmp_path / "run"
    code, err = run_bench(["scenario=real_cpu_small", JOBS, "policies=[fifo]", "seeds=[0]", "backend=real",
                           "real.devices.kind=cpu", "real.models={bert:{arch:encoder,width:16,depth:1,batch:4,input:16}}",
                           f"out_dir={out}"], capsys, monkeypatch)
    assert code == 2 and err.startswith("gpusched-bench: error: models.pointnet: job 0 uses model 'pointnet', which "
                                        "has no real stand-in"), err
    assert not out.exists()


@pytest.mark.slow
def test_same_scenario_through_sim_and_real(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """One tiny scenario, backend=sim and backend=real (CPU stand-in devices): the same results.json
    layout and metrics (the real run adds its own), and the real run's folder as gpusched-real replay
    writes it."""
    docs = {}
    for backend in ("sim", "real"):
        out = tmp_path / backend
        extra = ["real.devices.kind=cpu", TINY] if backend == "real" else []
        code, err = run_bench(["scenario=real_cpu_small", JOBS, "policies=[fifo]", "seeds=[0]", f"backend={backend}",
                               f"out_dir={out}", "plots=false", *extra], capsys, monkeypatch)
        assert code == 0, err
        docs[backend] = json.loads((out / "results.json").read_text())
    sim, real = docs["sim"], docs["real"]
    assert list(sim) == list(real) == ["scenario", "seeds", "policies"]
    assert sim["scenario"] == real["scenario"] == "real_cpu_small" and sim["seeds"] == real["seeds"] == [0]
    s, r = sim["policies"]["fifo"], real["policies"]["fifo"]
    assert list(s) == list(r) == ["metrics", "per_seed"]
    assert set(r["metrics"]) - set(s["metrics"]) == REAL_ONLY and set(s["metrics"]) <= set(r["metrics"])
    assert s["metrics"]["jobs_finished"] == r["metrics"]["jobs_finished"] == 2
    run = tmp_path / "real" / "runs" / "fifo-seed0-w0"
    one = json.loads((run / "results.json").read_text())
    assert one["real"]["status"] == "complete" and one["real"]["device_kind"] == "cpu"
    assert one["policies"]["fifo"]["metrics"]["jobs_finished"] == 2
    assert (run / "telemetry.csv").is_file() and (run / "commands.jsonl").is_file()
    assert not (tmp_path / "sim" / "runs").exists()
