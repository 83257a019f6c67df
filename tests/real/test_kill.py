"""Killing gpusched-real mid-run leaves no mess: no job process left, partial results readable,
telemetry intact, its own MPS daemon stopped, every file inside the run folder."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from realtest_helpers import processes_mentioning

from gpusched.real.devices import TELEMETRY_FIELDS
from gpusched.real.launcher import REPO_ROOT

SCENARIO = """
name: kill_me
cluster:
  nodes: [{count: 1, gpus_per_node: 2, gpu_type: V100, gpu_mem_gb: 4.0}]
  max_jobs_per_gpu: 2
workload:
  kind: inline
  jobs:
    - {job_id: 0, arrival_s: 0.0, num_gpus: 1, work_iters: 200, model: pointnet, perf_class: D, mem_gb: 0.5}
    - {job_id: 1, arrival_s: 0.0, num_gpus: 1, work_iters: 100000000, model: pointnet, perf_class: D, mem_gb: 0.5}
round_s: 10.0
"""
TINY = ["models.pointnet.width=32", "models.pointnet.depth=1", "models.pointnet.batch=8", "models.pointnet.input=32"]


def _progress(run: Path, job: int) -> list[dict]:
    p = run / "jobs" / str(job) / "progress.jsonl"
    return [json.loads(x) for x in p.read_text().splitlines() if x.strip()] if p.exists() else []


def _kill_mid_run(tmp_path: Path, sig: int) -> None:
    sc = tmp_path / "kill_me.yaml"
    sc.write_text(SCENARIO)
    run = tmp_path / "run"
    argv = [sys.executable, "-m", "gpusched.real.cli", "replay", f"scenario={sc}", "policy=fifo", f"out_dir={run}",
            "devices.kind=cpu", "real.telemetry_s=0.2", *TINY]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    cli = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 90
        while not (any(r["ev"] == "done" for r in _progress(run, 0))
                   and any(r["ev"] == "iter" for r in _progress(run, 1))):
            assert cli.poll() is None, cli.stdout.read().decode() if cli.stdout else ""
            assert time.monotonic() < deadline, "jobs never got going"
            time.sleep(0.05)
        while processes_mentioning(str(run / "jobs" / "0")):  # job 0's process exits ...
            time.sleep(0.05)
        time.sleep(1.0)  # ... and the backend (polling every 50 ms) records it
        cli.send_signal(sig)
        out = cli.communicate(timeout=60)[0].decode()
    finally:
        if cli.poll() is None:
            cli.kill()
    assert cli.returncode == 130, out
    assert (f"gpusched-real replay: interrupted; every job process stopped; 1 of 2 jobs finished; results of the "
            f"run so far in {run / 'results.json'}") in out
    assert "replay kill_me: 1/2 jobs finished, " in out  # progress while it ran
    assert not processes_mentioning(str(run)), "job processes left behind"
    doc = json.loads((run / "results.json").read_text())
    assert doc["real"]["status"] == "interrupted"
    assert doc["policies"]["fifo"]["metrics"]["jobs_finished"] == 1
    finished = [j for j in doc["real"]["jobs"] if j["finish_s"] is not None]
    assert [j["job_id"] for j in finished] == [0] and finished[0]["jct_s"] > 0
    with open(run / "telemetry.csv") as f:
        rows = list(csv.reader(f))
    assert tuple(rows[0]) == TELEMETRY_FIELDS and len(rows) > 3
    assert all(len(r) == len(TELEMETRY_FIELDS) for r in rows[1:])
    float(rows[-1][3])  # energy column readable to the last row
    runs = [c for c in map(json.loads, (run / "commands.jsonl").read_text().splitlines()) if c["kind"] == "run"]
    assert [c["stdin"] for c in runs] == [None, "quit\n"]
    assert runs[1]["env"]["CUDA_MPS_PIPE_DIRECTORY"] == str(run / "mps" / "pipe")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kill_me.yaml", "run"]  # nothing outside the run folder


def test_sigterm_mid_run(tmp_path: Path) -> None:
    _kill_mid_run(tmp_path, signal.SIGTERM)


@pytest.mark.slow
def test_sigint_mid_run(tmp_path: Path) -> None:
    _kill_mid_run(tmp_path, signal.SIGINT)
