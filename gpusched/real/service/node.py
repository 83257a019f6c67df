"""One node's job processes: :class:`NodeRunner` launches, inspects and signals them.

The local engine holds one per (stand-in) node; a Ray actor (:mod:`gpusched.real.service.ray_engine`) holds one
on each cluster node. Files live under ``run_dir/jobs/<id>/``: ``log`` (every launch appended) and
``launch-<n>/`` (the claim and exit files of :mod:`gpusched.real.service.runner`). On a node of NVIDIA GPUs the
runner also holds the node's MPS daemon and NVML telemetry (:class:`gpusched.real.service.gpus.NodeGpus`).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections import deque
from pathlib import Path

from gpusched.real.commands import CommandRunner
from gpusched.real.service.checkpoints import pack_dir, unpack_dir
from gpusched.real.service.gpus import MpsShare, NodeGpus
from gpusched.real.service.runner import _start_ticks, claim

RUNNER = str(Path(__file__).resolve().parent / "runner.py")
RUNNING, EXITED, LOST = "running", "exited", "lost"
_PLACEMENT_ENV = ("CUDA_VISIBLE_DEVICES", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "NODE_RANK", "LOCAL_RANK")


class NodeRunner:
    """Job processes on this machine, each launch in its own session (process group)."""

    def __init__(self, run_dir: str | Path, name: str, n_devices: int, kind: str = "cpu",
                 die_with_agent: bool = False, telemetry_s: float = 1.0,
                 gpu_runner: CommandRunner | None = None) -> None:
        """``kind="nvidia"``: the node's GPUs get an MPS daemon and NVML telemetry every
        ``telemetry_s`` seconds, their commands through ``gpu_runner`` (None: gpusched.real.commands auto)."""
        self.run_dir = Path(run_dir)
        self.die_with_agent = die_with_agent  # launches die with this process (Ray node agents)
        self.run_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.name, self.n_devices, self.kind = name, n_devices, kind
        self.procs: dict[tuple[int, int], subprocess.Popen[bytes]] = {}
        self.gpus = NodeGpus(self.run_dir, name, n_devices, telemetry_s, gpu_runner) if kind == "nvidia" else None

    def info(self) -> dict[str, object]:
        return {"name": self.name, "n_devices": self.n_devices, "kind": self.kind, "address": self.address()}

    def address(self) -> str:
        try:
            return socket.gethostbyname(socket.gethostname())
        except OSError:
            return "127.0.0.1"

    def free_port(self) -> int:
        with socket.socket() as s:
            s.bind(("", 0))
            return int(s.getsockname()[1])

    def job_dir(self, job_id: int) -> Path:
        return self.run_dir / "jobs" / str(job_id)

    def launch_dir(self, job_id: int, launch: int) -> Path:
        return self.job_dir(job_id) / f"launch-{launch}"

    def device_env(self, local: list[int]) -> dict[str, str]:
        """Which devices the job may use: CUDA_VISIBLE_DEVICES on NVIDIA; on CPU stand-ins the
        indices in GPUSCHED_DEVICES and no CUDA device."""
        ids = ",".join(str(i) for i in local)
        if self.kind == "nvidia":
            return {"CUDA_VISIBLE_DEVICES": ids, "GPUSCHED_DEVICES": ids}
        return {"CUDA_VISIBLE_DEVICES": "", "GPUSCHED_DEVICES": ids}

    def launch(self, job_id: int, launch: int, argv: list[str], env: dict[str, str], cwd: str | None,
               local: list[int], checkpoint_dir: str, mps: MpsShare | None = None) -> int:
        """Start one launch; returns the runner's pid. The job runs as this user, without a shell
        unless ``argv`` is one. ``mps``: an MPS client of the node's daemon (NVIDIA nodes; on CPU
        stand-ins the share reaches the job only as GPUSCHED_SM_PCT, set by the service)."""
        d = self.launch_dir(job_id, launch)
        d.mkdir(parents=True, exist_ok=True, mode=0o700)
        Path(checkpoint_dir).mkdir(parents=True, exist_ok=True, mode=0o700)
        wd = cwd or str(self.job_dir(job_id))
        base = {k: v for k, v in os.environ.items()
                if not k.startswith(("GPUSCHED_", "CUDA_MPS_")) and k not in _PLACEMENT_ENV}
        mps_env = self.gpus.mps_env(mps, len(local)) if mps is not None and self.gpus is not None else {}
        full = {**base, **env, **mps_env, **self.device_env(local)}
        if self.die_with_agent:
            full["GPUSCHED_DIE_WITH_PARENT"] = str(os.getpid())
        with open(self.job_dir(job_id) / "log", "ab") as log:
            os.chmod(log.name, 0o600)
            proc = subprocess.Popen([sys.executable, RUNNER, str(d), "--pass-stop", "--", *argv], cwd=wd, env=full,
                                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        self.procs[(job_id, launch)] = proc
        return proc.pid

    def status(self, job_id: int, launch: int) -> tuple[str, int | None, bool]:
        """(running | exited | lost, exit code, stopped on request)."""
        d = self.launch_dir(job_id, launch)
        proc = self.procs.get((job_id, launch))
        if proc is not None:
            if proc.poll() is None:
                return RUNNING, None, False
            self.procs.pop((job_id, launch), None)
            return self._exited(d)
        d.mkdir(parents=True, exist_ok=True, mode=0o700)
        if claim(str(d), "dead\n"):  # never started (or never will): this launch is lost
            return LOST, None, False
        pid = self._claimed_pid(d)
        if pid is not None and _alive(pid[0], pid[1]):
            return RUNNING, None, False
        return self._exited(d)

    def _exited(self, d: Path) -> tuple[str, int | None, bool]:
        try:
            rc, stopped = (d / "exit").read_text().split()
            return EXITED, int(rc), stopped == "1"
        except (OSError, ValueError):
            return LOST, None, False

    @staticmethod
    def _claimed_pid(d: Path) -> tuple[int, str] | None:
        try:
            text = (d / "claim").read_text().split()
        except OSError:
            return None
        if len(text) != 2:
            return None
        return int(text[0]), text[1]

    def signal(self, job_id: int, launch: int, sig: int) -> None:
        """SIGKILL to the launch's process group (the runner and the job); any other signal to the
        runner alone, which passes it on to the group only while the job runs (runner.StopGate): a
        job that ended by itself just before is recorded as finished, not as stopped."""
        proc = self.procs.get((job_id, launch))
        if proc is not None:
            if proc.poll() is not None:
                return
            pgid = proc.pid
        else:
            p = self._claimed_pid(self.launch_dir(job_id, launch))
            if p is None or not _alive(*p):
                return
            pgid = p[0]
        try:
            if sig == signal.SIGKILL:
                os.killpg(pgid, sig)
            else:
                os.kill(pgid, sig)  # the runner's pid is its group's id
        except (ProcessLookupError, PermissionError):
            pass

    def tail(self, job_id: int, n: int = 20) -> list[str]:
        try:
            with open(self.job_dir(job_id) / "log", errors="replace") as f:
                return [x.rstrip("\n") for x in deque(f, maxlen=n)]
        except OSError:
            return []

    def pack_checkpoint(self, checkpoint_dir: str, max_bytes: int) -> tuple[int, bytes | None]:
        """This node's checkpoint folder as a tar, or only its size when above ``max_bytes``."""
        return pack_dir(checkpoint_dir, max_bytes)

    def unpack_checkpoint(self, checkpoint_dir: str, data: bytes) -> None:
        """Replace this node's checkpoint folder by a packed one (before the job's launch here)."""
        unpack_dir(checkpoint_dir, data)

    def running_launches(self) -> list[tuple[int, int]]:
        """(job, launch) of every launch on this node whose process still runs, including those a
        previous process of the service started (found by their claim files)."""
        out = {key for key, proc in self.procs.items() if proc.poll() is None}  # claim maybe not written yet
        for claim_file in self.run_dir.glob("jobs/*/launch-*/claim"):
            d = claim_file.parent
            p = self._claimed_pid(d)
            if p is not None and _alive(*p):
                out.add((int(d.parent.name), int(d.name.split("-", 1)[1])))
        return sorted(out)

    def close(self) -> None:
        """Stop the telemetry; stop the MPS daemon unless a launch still runs (the next service
        re-attaches to it). Leaves the launches running."""
        if self.gpus is not None:
            self.gpus.close(stop_mps=not self.running_launches())

    def stop_all(self) -> None:
        """SIGKILL every launch this runner started, then close (tests and node shutdown)."""
        for (job, launch) in list(self.procs):
            self.signal(job, launch, signal.SIGKILL)
            self.procs[(job, launch)].wait()
        self.procs.clear()
        self.close()


def _alive(pid: int, ticks: str) -> bool:
    """The process ``pid`` runs, is the one that wrote the claim (same start time) and is no zombie."""
    if _start_ticks(pid) != ticks:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
