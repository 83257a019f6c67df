"""Run a real scenario under a policy: the library entry point behind ``gpusched-real replay``.

Whatever ends the run (completion, an exception, SIGINT or SIGTERM), job processes and the MPS
daemon this run started are stopped and ``results.json`` is written for what finished.
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gpusched.real.backend import RealBackend, RealConfig
from gpusched.real.commands import CommandRunner
from gpusched.real.config import RealWorkload
from gpusched.real.devices import Devices
from gpusched.real.launcher import LocalNodeAgent
from gpusched.real.mps import MpsDaemon
from gpusched_env.atomic import write_json_atomic
from gpusched_env.metrics import RunResult, compute_metrics, results_document
from gpusched_env.policy import Policy, run_policy
from gpusched_env.run_rules import describe


class Terminated(BaseException):
    """Raised in the main thread by SIGTERM so that cleanup runs as for Ctrl-C."""


def _raise_terminated(signum: int, frame: object) -> None:
    raise Terminated(f"signal {signum}")


@contextlib.contextmanager
def terminate_as_exception() -> Iterator[None]:
    old = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


@contextlib.contextmanager
def shielded() -> Iterator[None]:
    """Ignore SIGINT/SIGTERM while cleaning up, so a second signal cannot cut cleanup short."""
    old = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


@dataclass
class ReplayOutcome:
    """status: ``complete``, ``deadlocked`` or ``incomplete`` (:mod:`gpusched_env.run_rules`), or
    ``interrupted`` (SIGINT/SIGTERM) or ``error`` (an exception); unfinished: tracked job ids that
    did not finish."""

    result: RunResult
    metrics: dict[str, float]
    status: str
    run_dir: Path
    unfinished: tuple[int, ...] = ()

    @property
    def complete(self) -> bool:
        return self.status == "complete"

    def describe(self) -> str:
        """One line: the status and, unless complete, which jobs did not finish."""
        return describe(self.status, self.unfinished)


def replay(
    wl: RealWorkload, policy: Policy, devices: Devices, runner: CommandRunner, run_dir: Path, seed: int,
    cfg: RealConfig, slowdown: np.ndarray | None = None, extra: dict[str, Any] | None = None,
    progress: Callable[[int, float], None] | None = None,
) -> ReplayOutcome:
    """Run ``wl`` for real under ``policy``; write results.json (also when interrupted).
    ``progress(tracked jobs finished, wall seconds since the start)`` is called after every step."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    mps = MpsDaemon(runner, run_dir, getattr(devices, "driver_version", None), cfg.mps_context_mb)
    backend = RealBackend(
        wl.topology, wl.jobs, wl.sizes, devices, LocalNodeAgent(runner, run_dir), run_dir, seed, cfg,
        mps=mps, slowdown=slowdown, max_jobs_per_gpu=wl.max_jobs_per_gpu,
    )
    status = "interrupted"
    try:
        with terminate_as_exception():
            run_policy(backend if progress is None else _Reporting(backend, progress), policy)
        status = backend.outcome().status
    except Exception:
        status = "error"
        raise
    finally:
        with shielded():
            backend.close()
            outcome = _write(backend, wl, policy, devices, seed, run_dir, status, extra or {})
    return outcome


class _Reporting:
    """``backend`` for :func:`run_policy`, calling ``progress`` after each ``advance``."""

    def __init__(self, backend: RealBackend, progress: Callable[[int, float], None]) -> None:
        self._b, self._progress, self._t0 = backend, progress, time.monotonic()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._b, name)

    def advance(self) -> bool:
        more = self._b.advance()
        self._progress(finished_tracked(self._b), time.monotonic() - self._t0)
        return more


def finished_tracked(backend: RealBackend) -> int:
    """How many tracked jobs of ``backend`` have finished."""
    return sum(1 for j in backend.jobs if j.tracked) - len(backend.outcome().unfinished)


def _write(backend: RealBackend, wl: RealWorkload, policy: Policy, devices: Devices, seed: int, run_dir: Path,
           status: str, extra: dict[str, Any]) -> ReplayOutcome:
    res = backend.result()
    metrics = compute_metrics(res)
    unfinished = backend.outcome().unfinished
    jobs = [
        {"job_id": r.job.job_id, "model": r.job.model, "arrival_s": r.job.arrival_s, "first_start_s": r.first_start_s,
         "finish_s": r.finish_s, "jct_s": r.jct_s if r.finish_s is not None else None, "gpu_seconds": r.gpu_seconds,
         "energy_j": r.energy_j, "preemptions": r.preemptions, "migrations": r.migrations, "restarts": r.restarts}
        for r in res.records
    ]
    doc = results_document(wl.name, [seed], {policy.name: {
        "metrics": metrics, "per_seed": [{"seed": seed, "metrics": metrics}]}})
    doc["real"] = {"status": status, "unfinished": list(unfinished), "device_kind": devices.kind, "devices": devices.names(), "jobs": jobs,
                   "telemetry": "telemetry.csv", "commands": "commands.jsonl", **extra}
    write_json_atomic(run_dir / "results.json", doc)
    return ReplayOutcome(res, metrics, status, run_dir, unfinished)
