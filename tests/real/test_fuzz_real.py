"""Fuzzing gpusched-real on the CPU stand-in: small random workloads, killed at a random moment
(SIGTERM or Ctrl-C). Whatever the moment, no job process is left behind, and every job that
finished before the kill is in results.json as finished. CI runs a handful of cases; ``make fuzz``
(GPUSCHED_FUZZ=long) runs more."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from realtest_helpers import processes_mentioning

from gpusched.real.launcher import REPO_ROOT

settings.register_profile("gpusched-real-fuzz-ci", max_examples=3, deadline=None, derandomize=True,
                          suppress_health_check=list(HealthCheck))
settings.register_profile("gpusched-real-fuzz-long", max_examples=30, deadline=None,
                          suppress_health_check=list(HealthCheck))
PROFILE = settings.get_profile(f"gpusched-real-fuzz-{os.environ.get('GPUSCHED_FUZZ', 'ci')}")
TINY = ["models.pointnet.width=32", "models.pointnet.depth=1", "models.pointnet.batch=8", "models.pointnet.input=32"]

JOBS = st.lists(st.fixed_dictionaries({
    "arrival_s": st.sampled_from([0.0, 0.0, 0.5, 2.0]),
    "work_iters": st.sampled_from([20, 200, 100_000_000]),  # done in a moment ... never done
}), min_size=1, max_size=4)


def _progress(run: Path, job: int) -> list[dict[str, Any]]:
    p = run / "jobs" / str(job) / "progress.jsonl"
    if not p.exists():
        return []
    out = []
    for line in p.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:  # a line being written as we read
            pass
    return out


def run_case(tmp: Path, jobs: list[dict[str, Any]], kill_after_s: float, sig: int) -> None:
    spec = {"name": "fuzz_real",
            "cluster": {"nodes": [{"count": 1, "gpus_per_node": 2, "gpu_type": "V100", "gpu_mem_gb": 4.0}],
                        "max_jobs_per_gpu": 2},
            "workload": {"kind": "inline", "jobs": [
                {"job_id": i, "arrival_s": j["arrival_s"], "num_gpus": 1, "work_iters": j["work_iters"],
                 "model": "pointnet", "perf_class": "D", "mem_gb": 0.5} for i, j in enumerate(jobs)]},
            "round_s": 10.0}
    sc = tmp / "fuzz_real.yaml"
    sc.write_text(yaml.safe_dump(spec))
    run = tmp / "run"
    argv = [sys.executable, "-m", "gpusched.real.cli", "replay", f"scenario={sc}", "policy=fifo", f"out_dir={run}",
            "devices.kind=cpu", "real.telemetry_s=0.2", "real.max_wall_s=60", *TINY]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    cli = subprocess.Popen(argv, cwd=tmp, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        t0 = time.monotonic()
        while cli.poll() is None and time.monotonic() - t0 < kill_after_s:
            time.sleep(0.05)
        killed = cli.poll() is None
        if killed:
            cli.send_signal(sig)
        out = cli.communicate(timeout=90)[0].decode()
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()
    deadline = time.monotonic() + 10
    while processes_mentioning(str(run)) and time.monotonic() < deadline:  # exiting children get a moment
        time.sleep(0.1)
    assert not processes_mentioning(str(run)), f"job processes left behind (kill at {kill_after_s:.2f} s)\n{out}"
    if not killed:
        assert cli.returncode == 0, out
    done = sorted(i for i in range(len(jobs)) if any(r.get("ev") == "done" for r in _progress(run, i)))
    if not (run / "results.json").exists():
        assert not done, f"jobs {done} finished but no results.json (kill at {kill_after_s:.2f} s)\n{out}"
        return
    doc = json.loads((run / "results.json").read_text())
    finished = sorted(j["job_id"] for j in doc["real"]["jobs"] if j["finish_s"] is not None)
    assert set(done) <= set(finished) or doc["real"]["status"] == "interrupted", (done, finished, out)
    # a job recorded finished by the backend really finished (its process said so)
    assert set(finished) <= set(done), (done, finished, out)
    assert doc["policies"]["fifo"]["metrics"]["jobs_finished"] == len(finished)
    if killed:
        assert doc["real"]["status"] in ("interrupted", "complete"), doc["real"]["status"]


@PROFILE
@given(jobs=JOBS, kill_after_s=st.floats(0.2, 8.0), sig=st.sampled_from([signal.SIGTERM, signal.SIGINT]))
def test_fuzz_real_kill(tmp_path_factory: Any, jobs: list[dict[str, Any]], kill_after_s: float, sig: int) -> None:
    run_case(tmp_path_factory.mktemp("fuzz_real"), jobs, kill_after_s, sig)
