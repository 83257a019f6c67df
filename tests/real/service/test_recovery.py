"""``kill -9`` of the service and a restart: no job lost, none run twice; drain; the resumable example."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpusched.real.service.queue import JobQueue
from gpusched.real.service.spec import load_spec
from tests.real.service.helpers import done_lines, service, submit, ticks_spec

REPO = Path(__file__).resolve().parents[3]


def _serve(out: Path, *args: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-c", "from gpusched.real.cli import main; main()", "serve", f"out_dir={out}",
                             "poll_s=0.05", "grace_s=5", "backoff_s=0.1", *args], env=env)


def _wait_for(pred: object, timeout_s: float) -> None:
    t = time.monotonic()
    while not pred():  # type: ignore[operator]
        assert time.monotonic() - t < timeout_s, "timed out"
        time.sleep(0.1)


def _claim_pid(out: Path, job: int, launch: int) -> int:
    return int((out / "nodes" / "local0" / "jobs" / str(job) / f"launch-{launch}" / "claim").read_text().split()[0])


def test_kill_9_of_the_service_then_restart_runs_every_job_exactly_once(tmp_path: Path) -> None:
    done = tmp_path / "done.txt"
    ids = submit(tmp_path, [ticks_spec(done, 20, 1) for _ in range(6)])
    proc = _serve(tmp_path, "devices_per_node=4")
    q = JobQueue(tmp_path)
    try:
        _wait_for(lambda: len(q.jobs(("running",))) == 4 and all(
            (tmp_path / "checkpoints" / str(r.id) / "n").exists() for r in q.jobs(("running",))), 60)
    finally:
        proc.kill()
        proc.wait()
    running = [r.id for r in q.jobs(("running",))]
    victim = running[0]
    os.killpg(_claim_pid(tmp_path, victim, 0), signal.SIGKILL)  # its process dies too (a node reboot)
    time.sleep(0.2)
    service(tmp_path, devices_per_node=4).run()
    lines = done_lines(done)
    assert sorted(int(x[0]) for x in lines) == ids  # every job finished exactly once
    rows = {r.id: r for r in q.jobs()}
    assert all(r.state == "finished" for r in rows.values())
    assert rows[victim].restarts == 1 and rows[victim].launches == 2
    (v,) = [x for x in lines if int(x[0]) == victim]
    assert v[1] == "1" and int(v[2]) > 0  # relaunched with GPUSCHED_RESTART_COUNT=1, from its step counter
    for j in running[1:]:  # re-attached: one launch each, never started again
        assert rows[j].launches == 1 and rows[j].restarts == 0
        assert [s for _, _, s, _ in q.history(j)] == ["pending", "running", "finished"]


@pytest.mark.slow
def test_drain_checkpoints_the_resumable_example_which_resumes_after_restart(tmp_path: Path) -> None:
    spec_file = tmp_path / "train.yaml"
    spec_file.write_text(load_spec(REPO / "examples" / "train_resumable.yaml").to_json().replace(
        '"300"', '"400"').replace('"0.01"', '"0.02"').replace('["python"', json.dumps([sys.executable])[:-1]))  # JSON is YAML
    (j,) = submit(tmp_path, [load_spec(spec_file)])
    ckpt = tmp_path / "checkpoints" / str(j) / "checkpoint.pt"
    proc = _serve(tmp_path, "devices_per_node=1", "drain=true")
    try:
        _wait_for(ckpt.exists, 120)
    finally:
        proc.send_signal(signal.SIGTERM)  # drain: the job saves its step counter and exits
        assert proc.wait(60) == 0
    q = JobQueue(tmp_path)
    row = q.get(j)
    assert row is not None and row.state == "pending" and row.preemptions == 1
    service(tmp_path, devices_per_node=1, max_wall_s=300).run()
    log = (tmp_path / "checkpoints" / str(j) / "launches.txt").read_text().split("\n")
    first, second = log[0].split(), log[1].split()
    assert first[0] == "restart=0" and first[-1] == "stopped" and first[2] != "last=400"
    assert second[0] == "restart=1" and second[1] == first[2].replace("last", "first") and second[2:] == ["last=400", "done"]
    assert q.get(j).state == "finished"  # type: ignore[union-attr]
