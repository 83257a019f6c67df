"""The launch claims behind "no job run twice", and the preemption protocol's SIGKILL escalation."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from gpusched.real.service.node import EXITED, LOST, RUNNER, NodeRunner, _alive
from gpusched.real.service.queue import JobQueue
from gpusched.real.service.spec import parse_spec
from tests.real.service.helpers import service, submit


def test_a_launch_declared_dead_never_runs_later(tmp_path: Path) -> None:
    fresh = NodeRunner(tmp_path / "n", "n0", 1)  # a restarted service: it holds no process of launch 0
    assert fresh.status(5, 0) == (LOST, None, False)  # recorded, never started: declared dead
    marker = tmp_path / "ran"
    d = fresh.launch_dir(5, 0)
    rc = subprocess.run([sys.executable, RUNNER, str(d), "--", "touch", str(marker)], timeout=30).returncode
    assert rc == 0 and not marker.exists()  # the late runner found the claim and did not run the job
    assert (d / "claim").read_text() == "dead\n"


def test_status_after_a_restart_reads_the_exit_file_and_the_stop_flag(tmp_path: Path) -> None:
    r = NodeRunner(tmp_path / "n", "n0", 1)
    r.launch(1, 0, ["sh", "-c", "exit 4"], {}, None, [0], str(tmp_path / "ck"))
    r.procs[(1, 0)].wait(30)
    time.sleep(0.1)
    again = NodeRunner(tmp_path / "n", "n0", 1)  # knows the launch only from its files
    assert again.status(1, 0) == (EXITED, 4, False)
    pid = int((r.launch_dir(1, 0) / "claim").read_text().split()[0])
    assert not _alive(pid, (r.launch_dir(1, 0) / "claim").read_text().split()[1])


def test_a_job_ignoring_the_stop_signal_is_killed_after_the_grace_period(tmp_path: Path) -> None:
    (j,) = submit(tmp_path, [parse_spec({"command": "trap '' TERM; while true; do sleep 0.1; done", "shell": True,
                                         "gpus": 1}, "t")])
    service(tmp_path, exit_when_idle=False, max_wall_s=0.5).run()
    q = JobQueue(tmp_path)
    assert q.cancel(j) == "cancelling"
    t = time.monotonic()
    service(tmp_path, grace_s=0.5).run()
    assert time.monotonic() - t < 10
    row = q.get(j)
    assert row is not None and row.state == "cancelled"
    assert "no exit within 0.5 s of SIGTERM: SIGKILL" in (tmp_path / "service.log").read_text()
    claim = (tmp_path / "nodes" / "local0" / "jobs" / str(j) / "launch-0" / "claim").read_text().split()
    assert not _alive(int(claim[0]), claim[1])
