"""The NVIDIA MPS control daemon this backend starts, and the per-client MPS environment.

The daemon's pipe and log directories live in the run folder, so it is this run's own daemon: it
is stopped with ``echo quit | nvidia-cuda-mps-control`` and the same ``CUDA_MPS_PIPE_DIRECTORY``,
which reaches no other daemon on the machine. Every command goes through the command layer.
"""

from __future__ import annotations

import math
import subprocess
from pathlib import Path

from gpusched.real.commands import CommandRunner

MPS_CONTROL = "nvidia-cuda-mps-control"
# Device memory an MPS client needs beyond its job's own, added to its CUDA_MPS_PINNED_DEVICE_MEM_LIMIT. Measured
# on one H200 (driver 580.159.04, PyTorch 2.11.0+cu130; docs/measurements/h200-mps-ray-compare/mps_mem.log): a
# client running a small conv net, 90 MB reserved by PyTorch, failed under limits of 64-768 MB (out of memory, or
# cublasCreate's CUBLAS_STATUS_ALLOC_FAILED) and ran under 1,024 MB, with 179 MB of it left free.
MPS_CONTEXT_MB = 1024.0


def client_priority_supported(driver_version: str | None) -> bool:
    """CUDA_MPS_CLIENT_PRIORITY needs an R550+ driver (CUDA 12.4 MPS docs); unknown -> False."""
    if not driver_version:
        return False
    try:
        return int(driver_version.split(".")[0]) >= 550
    except ValueError:
        return False


class MpsDaemon:
    """Start/stop one MPS control daemon and build its clients' environment."""

    def __init__(self, runner: CommandRunner, run_dir: Path, driver_version: str | None = None,
                 context_mb: float = MPS_CONTEXT_MB) -> None:
        """``context_mb``: device memory a client needs beyond its job's own (CUDA context, library
        workspaces), added to a job's memory in its pinned-memory limit (``real.mps_context_mb``)."""
        self.runner = runner
        self.context_mb = context_mb
        self.pipe_dir = run_dir / "mps" / "pipe"
        self.log_dir = run_dir / "mps" / "log"
        self.priority_ok = client_priority_supported(driver_version)
        self.started = False

    @property
    def base_env(self) -> dict[str, str]:
        return {"CUDA_MPS_PIPE_DIRECTORY": str(self.pipe_dir), "CUDA_MPS_LOG_DIRECTORY": str(self.log_dir)}

    def start(self, env: dict[str, str] | None = None) -> None:
        """``env``: more variables of the daemon's own environment (e.g. CUDA_VISIBLE_DEVICES, the
        GPUs its servers may use, where the calling process has them hidden)."""
        self.pipe_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.runner.run([MPS_CONTROL, "-d"], {**self.base_env, **(env or {})})
        self.started = True

    def attach(self) -> bool:
        """Adopt a daemon already listening on this pipe directory (left by an earlier process of the
        same run, e.g. a restarted service): True, and :meth:`stop` will stop it, when its control
        socket exists and answers ``get_server_list``. Never true in a dry run (no socket)."""
        if not (self.pipe_dir / "control").exists():
            return False
        try:
            self.runner.run([MPS_CONTROL], self.base_env, stdin="get_server_list\n")
        except (RuntimeError, OSError, subprocess.TimeoutExpired):
            return False
        self.started = True
        return True

    def stop(self) -> None:
        """Stop the daemon this object started (and only it); idempotent."""
        if self.started:
            self.started = False
            self.runner.run([MPS_CONTROL], self.base_env, stdin="quit\n")

    def client_env(self, n_gpus: int, sm_share: float, mem_gb: float, priority: int) -> dict[str, str]:
        """MPS variables of one client: SM share (percent), pinned memory limit per visible device
        (``mem_gb`` plus ``context_mb``; none when ``mem_gb`` is 0), and priority (0 = normal for jobs
        with priority > 0, else 1 = below normal) where supported."""
        env = dict(self.base_env)
        env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(max(1, min(100, round(sm_share * 100))))
        if mem_gb > 0:
            mb = int(math.ceil(mem_gb * 1024 + self.context_mb))
            env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = ",".join(f"{i}={mb}M" for i in range(n_gpus))
        if self.priority_ok:
            env["CUDA_MPS_CLIENT_PRIORITY"] = "0" if priority > 0 else "1"
        return env
