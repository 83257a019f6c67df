"""How a real run ends (issue 11, items 1-2): every queued job runs, the status tells the truth
(``complete``, ``deadlocked`` or ``incomplete``, naming the unfinished jobs) and the CLI exits
non-zero for a run that did not finish its jobs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from realtest_helpers import FakeWorkers, Fifo, descendants, tiny_workload

from gpusched.real.backend import RealConfig
from gpusched.real.config import DevicesConf, build_devices
from gpusched.real.launcher import REPO_ROOT
from gpusched.real.replay import replay


def test_one_device_runs_every_queued_job(run_dir: Path) -> None:
    """Two jobs queued at t = 0 on one device run one after the other; neither is dropped as a stall
    (torch-free job processes: the backend's bookkeeping is under test)."""
    wl = tiny_workload([(0.0, "pointnet", 10)] * 2, devices=1)
    devices, _ = build_devices(DevicesConf(kind="cpu", count=1), "auto", None)
    out = replay(wl, Fifo(), devices, FakeWorkers(), run_dir, 0, RealConfig(telemetry_s=0.5))
    assert out.metrics["jobs_finished"] == 2 and out.metrics["deadlocked"] == 0.0
    assert out.status == "complete" and not descendants()
    doc = json.loads((run_dir / "results.json").read_text())
    assert doc["real"]["status"] == "complete" and doc["real"]["unfinished"] == []
    assert [j["restarts"] for j in doc["real"]["jobs"]] == [0, 0]
    first, second = sorted(doc["real"]["jobs"], key=lambda j: j["first_start_s"])
    assert second["first_start_s"] >= first["finish_s"]  # one after the other on the one device


class Never(Fifo):
    name = "never"

    def decide(self, view):  # type: ignore[no-untyped-def]
        return []


def test_policy_that_starts_nothing_is_deadlocked(run_dir: Path) -> None:
    wl = tiny_workload([(0.0, "pointnet", 10), (0.0, "bert", 10)])
    devices, runner = build_devices(DevicesConf(kind="cpu", count=2), "auto", None)
    out = replay(wl, Never(), devices, runner, run_dir, 0, RealConfig())
    assert out.status == "deadlocked" and out.metrics["jobs_finished"] == 0
    doc = json.loads((run_dir / "results.json").read_text())
    assert doc["real"]["status"] == "deadlocked" and doc["real"]["unfinished"] == [0, 1]


SCENARIO = """
name: blocked
cluster:
  nodes: [{count: 1, gpus_per_node: 1, gpu_type: V100, gpu_mem_gb: 4.0}]
  max_jobs_per_gpu: 1
workload:
  kind: inline
  jobs:
    - {job_id: 0, arrival_s: 0.0, num_gpus: 1, work_iters: 20, model: pointnet, perf_class: D, mem_gb: 0.5}
    - {job_id: 1, arrival_s: 0.0, num_gpus: NGPUS, work_iters: WORK, model: pointnet, perf_class: D, mem_gb: 0.5}
"""
TINY = ["models.pointnet.width=32", "models.pointnet.depth=1", "models.pointnet.batch=8", "models.pointnet.input=32"]


def _replay_args(tmp_path: Path, n_gpus: int, work: int, *extra: str) -> list[str]:
    sc = tmp_path / "blocked.yaml"
    sc.write_text(SCENARIO.replace("NGPUS", str(n_gpus)).replace("WORK", str(work)))
    return ["replay", f"scenario={sc}", "policy=fifo", f"out_dir={tmp_path / 'run'}", "devices.kind=cpu", *TINY, *extra]


def _replay(tmp_path: Path, n_gpus: int, work: int, *extra: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "gpusched.real.cli", *_replay_args(tmp_path, n_gpus, work, *extra)]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False)


def test_cli_refuses_a_job_that_can_never_be_placed(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Job 1 needs two devices on a one-device cluster: a one-line error before anything runs (in this
    process; the CLI runs as a process in test_kill.py)."""
    from gpusched.real import cli
    from tests.cli_helpers import run_main

    monkeypatch.chdir(tmp_path)
    code, err = run_main(cli.main, "gpusched-real", _replay_args(tmp_path, 2, 20), capsys, monkeypatch)
    assert code == 2, err
    assert "job 1: needs 2 GPU(s)" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "run" / "results.json").exists()


@pytest.mark.slow  # a 15-s wall limit; the same ending in-process: test_time_limit_ends_the_run_incomplete
def test_cli_exits_nonzero_when_jobs_are_left_unfinished(tmp_path: Path) -> None:
    """Job 1 is far too long for the wall-clock limit: job 0 finishes, the run ends ``incomplete``
    naming job 1, exit code 3."""
    p = _replay(tmp_path, 1, 10**7, "real.max_wall_s=15")
    assert p.returncode == 3, p.stdout + p.stderr
    assert "incomplete: 1 tracked job(s) unfinished (ids 1)" in p.stdout + p.stderr
    doc = json.loads((tmp_path / "run" / "results.json").read_text())
    assert doc["real"]["status"] == "incomplete" and doc["real"]["unfinished"] == [1]
    assert doc["policies"]["fifo"]["metrics"]["jobs_finished"] == 1


def test_time_limit_ends_the_run_incomplete(run_dir: Path) -> None:
    """real.max_wall_s stops the run; it is ``incomplete`` and names the job, not a crash (a torch-free job
    process)."""
    wl = tiny_workload([(0.0, "pointnet", 10**7)], devices=1)
    devices, _ = build_devices(DevicesConf(kind="cpu", count=1), "auto", None)
    out = replay(wl, Fifo(), devices, FakeWorkers(), run_dir, 0, RealConfig(max_wall_s=1.0))
    assert out.status == "incomplete" and out.unfinished == (0,) and not descendants()
    assert out.metrics["timed_out"] == 1.0 and out.metrics["jobs_finished"] == 0
    assert out.describe() == "incomplete: 1 tracked job(s) unfinished (ids 0)"
