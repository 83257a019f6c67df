"""Helpers for the real-backend tests: tiny workloads, a FIFO policy, process checks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import IO

import psutil

from gpusched.real.commands import Call, DryRunRunner
from gpusched.real.config import RealWorkload
from gpusched.real.models import ModelSize
from gpusched_env.topology import NodeGroup, Topology
from gpusched_env.types import Decision, Job, Sharing, Start
from gpusched_env.view import ClusterView

FAKE_WORKER = Path(__file__).with_name("fake_worker.py")

TINY = {
    "resnet50": ModelSize("cnn", width=8, depth=1, batch=4, input=16),
    "bert": ModelSize("encoder", width=16, depth=1, batch=4, input=16),
    "pointnet": ModelSize("mlp", width=32, depth=1, batch=8, input=32),
}
CLASS = {"resnet50": "A", "bert": "B", "pointnet": "D"}


class Fifo:
    """FIFO: the oldest pending job gets devices with room for it (``pack`` jobs each; packs when > 1)."""

    name = "fifo_test"
    round_s = None
    events = True

    def __init__(self, sm_share: float = 1.0, pack: int = 1) -> None:
        self.sm_share = sm_share
        self.pack = pack

    def decide(self, view: ClusterView) -> list[Decision]:
        out: list[Decision] = []
        load = list(view.n_resident)
        for job in view.pending:
            gpus = [g for g in range(view.n_gpus) if load[g] < self.pack]
            if len(gpus) < job.num_gpus:
                break
            key = (lambda g: (-load[g], g)) if self.pack > 1 else (lambda g: (load[g], g))
            pick = tuple(sorted(gpus, key=key)[: job.num_gpus])
            for g in pick:
                load[g] += 1
            out.append(Start(job.job_id, pick, Sharing.mps(self.sm_share * 100) if self.sm_share < 1 else Sharing()))
        return out


def tiny_workload(jobs: list[tuple[float, str, int]], devices: int = 2) -> RealWorkload:
    """``jobs``: (arrival_s, model, iterations) each."""
    topo = Topology.build([NodeGroup(1, devices, "V100", 4.0)])
    js = [Job(i, a, 1, float(n), m, CLASS[m], mem_gb=0.5) for i, (a, m, n) in enumerate(jobs)]
    return RealWorkload("tiny", topo, js, dict(TINY), max_jobs_per_gpu=2)


class FakeWorkers(DryRunRunner):
    """The CPU devices' runner, except that a job process is fake_worker.py (no torch: milliseconds to
    start, not seconds) instead of ``python -m gpusched.real.worker``; the spawn is recorded as issued."""

    def spawn(self, argv: list[str], env: dict[str, str], cwd: Path, log: IO[bytes]) -> subprocess.Popen[bytes]:
        from gpusched.real.worker import EXIT_DONE, EXIT_STOPPED

        self._record(Call("spawn", tuple(argv), dict(env)))
        assert list(argv[1:3]) == ["-m", "gpusched.real.worker"], argv
        return subprocess.Popen([sys.executable, str(FAKE_WORKER), *argv[3:]],
                                env={**os.environ, **env, "FAKE_WORKER_EXITS": f"{EXIT_DONE},{EXIT_STOPPED}"}, cwd=cwd,
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)


def descendants() -> list[psutil.Process]:
    """Live (non-zombie) descendants of this test process."""
    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            if p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


def processes_mentioning(text: str) -> list[psutil.Process]:
    """Live processes whose command line mentions ``text`` (e.g. a run folder)."""
    out = []
    for p in psutil.process_iter(["cmdline", "status"]):
        try:
            if p.info["status"] != psutil.STATUS_ZOMBIE and any(text in a for a in (p.info["cmdline"] or [])):
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out
