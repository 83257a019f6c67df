"""The seam between the backend and the machines its jobs run on.

:class:`NodeAgent` is what the backend asks of one node: start a job process with an environment,
signal it, poll it, hand over its new progress records, stop everything. :class:`LocalNodeAgent`
runs jobs on this machine as child processes; it is the only agent of the trace replay
(``gpusched-real replay|compare|profile``), which drives one node. Several nodes are the lab-cluster
service's: one :class:`~gpusched.real.service.ray_engine.RayNodeAgent` actor per node runs that node's jobs
(gpusched/real/MULTINODE.md, docs/DEPLOY.md).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Protocol

import psutil

from gpusched.real.commands import CommandRunner
from gpusched.real.worker import WorkerSpec

REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class JobHandle:
    """One launch of one job (a job resumed elsewhere gets a new handle)."""

    job_id: int
    launch: int
    pid: int
    spawn_t: float  # wall clock when spawned
    progress_path: Path
    proc: subprocess.Popen[bytes] | None = None
    log: IO[bytes] | None = None
    offset: int = 0
    buf: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


class NodeAgent(Protocol):
    """Runs job processes on one node."""

    node: int

    def launch(self, spec: WorkerSpec, env: dict[str, str], launch: int) -> JobHandle: ...

    def signal(self, h: JobHandle, sig: int) -> None: ...

    def poll(self, h: JobHandle) -> int | None:
        """Exit code, or None while running."""
        ...

    def wait(self, h: JobHandle, timeout_s: float) -> int | None: ...

    def progress(self, h: JobHandle) -> list[dict[str, Any]]:
        """Progress records written since the last call."""
        ...

    def stop_all(self, grace_s: float) -> None:
        """SIGTERM every live job, SIGKILL what is left after ``grace_s``; reap all."""
        ...


class LocalNodeAgent:
    """Job processes on this machine, each in its own session, files in ``run_dir/jobs/<id>/``."""

    def __init__(self, runner: CommandRunner, run_dir: Path, node: int = 0) -> None:
        self.runner = runner
        self.run_dir = run_dir
        self.node = node
        self.live: dict[int, JobHandle] = {}  # pid -> handle

    def job_dir(self, job_id: int) -> Path:
        d = self.run_dir / "jobs" / str(job_id)
        d.mkdir(parents=True, exist_ok=True)
        return d

    def launch(self, spec: WorkerSpec, env: dict[str, str], launch: int) -> JobHandle:
        d = self.job_dir(spec.job_id)
        spec_path = d / f"spec-{launch}.json"
        spec.write(spec_path)
        pythonpath = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)
        env = {**env, "PYTHONPATH": pythonpath, "PYTHONUNBUFFERED": "1"}
        log = open(d / "worker.log", "ab")
        argv = [sys.executable, "-m", "gpusched.real.worker", str(spec_path)]
        proc = self.runner.spawn(argv, env, cwd=d, log=log)
        h = JobHandle(spec.job_id, launch, proc.pid, time.time(), Path(spec.progress), proc, log)
        if h.progress_path.exists():
            h.offset = h.progress_path.stat().st_size  # only this launch's records
        self.live[proc.pid] = h
        return h

    def signal(self, h: JobHandle, sig: int) -> None:
        if h.proc is not None and h.proc.poll() is None:
            try:
                os.kill(h.pid, sig)
            except ProcessLookupError:
                pass

    def poll(self, h: JobHandle) -> int | None:
        assert h.proc is not None
        rc = h.proc.poll()
        if rc is not None:
            self._reaped(h)
        return rc

    def wait(self, h: JobHandle, timeout_s: float) -> int | None:
        assert h.proc is not None
        try:
            rc = h.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None
        self._reaped(h)
        return rc

    def _reaped(self, h: JobHandle) -> None:
        self.live.pop(h.pid, None)
        if h.log is not None and not h.log.closed:
            h.log.close()

    def progress(self, h: JobHandle) -> list[dict[str, Any]]:
        try:
            with open(h.progress_path) as f:
                f.seek(h.offset)
                chunk = f.read()
                h.offset = f.tell()
        except FileNotFoundError:
            return []
        h.buf += chunk
        lines = h.buf.split("\n")
        h.buf = lines.pop()  # a partial last line waits for the next call
        return [json.loads(x) for x in lines if x.strip()]

    def stop_all(self, grace_s: float = 5.0) -> None:
        handles = list(self.live.values())
        for h in handles:
            self.signal(h, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for h in handles:
            if self.wait(h, max(0.0, deadline - time.monotonic())) is None:
                _kill_tree(h.pid)
                self.wait(h, 5.0)


def _kill_tree(pid: int) -> None:
    try:
        p = psutil.Process(pid)
        procs = [*p.children(recursive=True), p]
    except psutil.NoSuchProcess:
        return
    for q in procs:
        try:
            q.kill()
        except psutil.NoSuchProcess:
            pass
