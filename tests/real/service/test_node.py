"""The launch claims behind "no job run twice", the stop flag of a launch, and the preemption protocol's SIGKILL
escalation."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from gpusched.real.service.node import EXITED, LOST, RUNNER, NodeRunner, _alive
from gpusched.real.service.queue import JobQueue
from gpusched.real.service.spec import parse_spec
from tests.real.service.helpers import proc_state, service, submit, wait_until


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
    # on a loaded machine the launch's runner may not have claimed it yet: wait, or the next service
    # rightly declares it dead and there is nothing to stop
    claim_file = tmp_path / "nodes" / "local0" / "jobs" / str(j) / "launch-0" / "claim"
    wait_until(lambda: claim_file.exists() and claim_file.read_text().strip(), "the launch claimed")
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


def test_a_stop_that_comes_after_the_job_ended_by_itself_is_no_stop(tmp_path: Path) -> None:
    """The interleaving behind a job completed twice: the job exits 0 by itself, and the stop signal of
    a preemption decided on the poll before reaches its launch while the runner has yet to record the
    exit. The runner is frozen (SIGSTOP) across that moment, so the order is forced, not timed. The
    launch must read as finished (exit 0, not stopped); read as stopped, the service would queue the
    completed job again and its next launch would complete it a second time."""
    pid_file, go = tmp_path / "pid", tmp_path / "go"
    r = NodeRunner(tmp_path / "n", "n0", 1)
    r.launch(1, 0, ["sh", "-c", f'echo $$ > {pid_file}; while [ ! -e {go} ]; do sleep 0.02; done'], {}, None, [0],
             str(tmp_path / "ck"))
    runner = r.procs[(1, 0)]
    wait_until(lambda: pid_file.exists() and pid_file.read_text().strip(), "the job started")
    job = int(pid_file.read_text())
    os.kill(runner.pid, signal.SIGSTOP)
    wait_until(lambda: proc_state(runner.pid) == "T", "the runner frozen")
    go.touch()  # the job ends by itself; its frozen runner cannot reap it
    wait_until(lambda: proc_state(job) == "Z", "the job exited")
    r.signal(1, 0, signal.SIGTERM)  # the preemption's stop signal
    os.kill(runner.pid, signal.SIGCONT)
    runner.wait(30)
    assert r.status(1, 0) == (EXITED, 0, False)


def test_a_stop_that_comes_while_the_job_runs_reaches_it_and_is_recorded(tmp_path: Path) -> None:
    """The service signals the runner alone; the runner passes the stop on to the job, which saves and
    exits 0: a stop (queued again), not a completion."""
    ready, got = tmp_path / "ready", tmp_path / "got"
    r = NodeRunner(tmp_path / "n", "n0", 1)
    r.launch(1, 0, ["sh", "-c", f'trap "echo TERM > {got}; exit 0" TERM; touch {ready}; '
                    'while true; do sleep 0.02; done'], {}, None, [0], str(tmp_path / "ck"))
    wait_until(ready.exists, "the job started")
    r.signal(1, 0, signal.SIGTERM)
    r.procs[(1, 0)].wait(30)
    assert r.status(1, 0) == (EXITED, 0, True)
    assert got.read_text() == "TERM\n"
