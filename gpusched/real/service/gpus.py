"""A node's NVIDIA GPUs in the service: its MPS control daemon and its NVML telemetry.

One :class:`NodeGpus` per node (held by the node's :class:`~gpusched.real.service.node.NodeRunner`, so by the
local engine or by the node's Ray agent). It reuses the replay backend's pieces: the MPS daemon of
:mod:`gpusched.real.mps` (one control daemon per node; it serves every GPU of the node) and the NVML readings
of :class:`gpusched.real.devices.NvidiaDevices`, both through a :mod:`gpusched.real.commands` runner (``auto``: execute
where ``nvidia-smi`` lists a GPU, else record the commands in ``commands.jsonl``).

MPS: the daemon is started on the node's first launch that asks for MPS sharing, with its pipe and
log directories in the node folder (``mps/pipe``, ``mps/log``). A restarted service (or a new agent
on the node) re-attaches to the daemon still listening there (``get_server_list`` answers) and
starts a new one otherwise (it serves every GPU of the node: CUDA_VISIBLE_DEVICES lists them all).
The daemon is stopped when the node runner closes with no launch of the node still running
(adopting first a daemon an earlier runner left); else it is left for the next runner to re-attach to.

Telemetry: every ``telemetry_s`` seconds one row per GPU (wall time, node, device, power in W, SM
utilisation in [0, 1], memory used in MB) is appended to ``telemetry.csv`` in the node folder, one
``os.write`` per sample on an ``O_APPEND`` file: a crash loses at most the sample under way (a torn
last line, which :func:`read_telemetry` skips). Nothing is sampled where NVML does not answer (a dry
run; CPU stand-in nodes have no :class:`NodeGpus` at all).
"""

from __future__ import annotations

import math
import os
import subprocess
import threading
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from gpusched.real.commands import CommandRunner, make_runner
from gpusched.real.devices import NvidiaDevices
from gpusched.real.mps import MpsDaemon

TELEMETRY_FILE = "telemetry.csv"
TELEMETRY_HEADER = "t,node,device,power_w,util,mem_used_mb"
# a unix socket path holds at most 107 bytes (Linux sun_path); the daemon's sockets have names of up
# to ~20 characters inside the pipe folder (choice: margin)
MAX_PIPE_DIR = 80


@dataclass(frozen=True)
class MpsShare:
    """What a launch asks of MPS: the SM percentage (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE) and the
    priority that picks the client priority where the driver supports it (> 0: normal, else below
    normal, as :meth:`gpusched.real.mps.MpsDaemon.client_env`)."""

    sm_pct: float
    priority: int = 0


class NodeGpus:
    """The MPS daemon and NVML telemetry of one node's NVIDIA GPUs (see the module docstring)."""

    def __init__(self, run_dir: Path, name: str, n_devices: int, telemetry_s: float,
                 runner: CommandRunner | None = None) -> None:
        if telemetry_s <= 0:
            raise ValueError(f"telemetry_s: must be > 0, got {telemetry_s}")
        self.run_dir, self.name, self.telemetry_s = Path(run_dir), name, telemetry_s
        self.run_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.runner: CommandRunner = runner if runner is not None else make_runner(
            "auto", self.run_dir / "commands.jsonl")
        self.n_devices = n_devices
        self.devices: NvidiaDevices | None = None
        try:
            self.devices = NvidiaDevices(self.runner, count=n_devices)
        except Exception as e:  # no usable NVML here (driver, library): MPS still works, no telemetry
            with open(self.run_dir / "nvml_error.txt", "a") as f:
                f.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} NVML unavailable, no telemetry: "
                        f"{type(e).__name__}: {e}\n")
        self.mps = MpsDaemon(self.runner, self.run_dir, self.devices.driver_version if self.devices else None)
        self.mps_attached = False  # True: the daemon was left by an earlier process and adopted
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.sample_errors = 0
        if self.sample():  # NVML answers: sample every telemetry_s from now on
            self._thread = threading.Thread(target=self._loop, name=f"telemetry-{name}", daemon=True)
            self._thread.start()

    # -- MPS -----------------------------------------------------------------------------------
    def ensure_mps(self) -> None:
        """Start the node's MPS daemon, or adopt the one a previous process left running."""
        with self._lock:
            if self.mps.started:
                return
            if not self.runner.dry_run and len(str(self.mps.pipe_dir)) > MAX_PIPE_DIR:
                raise OSError(f"out_dir: the MPS pipe folder {self.mps.pipe_dir} is longer than {MAX_PIPE_DIR} "
                              "characters, too long for the daemon's unix sockets; use a shorter out_dir")
            if self.mps.attach():
                self.mps_attached = True
                return
            # every GPU of the node: a Ray agent (num_gpus=0) may have CUDA_VISIBLE_DEVICES="" itself
            n = self.devices.n if self.devices is not None else self.n_devices
            try:
                self.mps.start({"CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in range(n))})
            except (RuntimeError, subprocess.TimeoutExpired) as e:  # an OSError: the launch fails, logged
                raise OSError(f"node {self.name}: the MPS control daemon did not start: {e}") from e

    def mps_env(self, share: MpsShare, n_gpus: int) -> dict[str, str]:
        """The MPS variables of one client (starting the daemon first where needed)."""
        self.ensure_mps()
        return self.mps.client_env(n_gpus, share.sm_pct / 100.0, 0.0, share.priority)

    # -- telemetry -----------------------------------------------------------------------------
    def sample(self, t: float | None = None) -> bool:
        """Append one row per GPU to the telemetry file; False when NVML gave no reading."""
        t = time.time() if t is None else t
        if self.devices is None:
            return False
        try:
            samples = self.devices.sample(t, {})
        except Exception:  # an NVML error (a GPU fell off the bus, ...): skip this sample
            self.sample_errors += 1
            return False
        finally:  # the command layer keeps every call in memory: drop the NVML readings (days of them)
            self.runner.calls[:] = [c for c in self.runner.calls if c.kind != "nvml"]
        if not samples or all(math.isnan(s.power_w) for s in samples):
            return False
        path = self.run_dir / TELEMETRY_FILE
        lines = "".join(f"{s.t_s:.3f},{self.name},{s.device},{s.power_w:.3f},{s.util:.6g},{s.mem_used_mb:.6g}\n"
                        for s in samples)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            if os.fstat(fd).st_size == 0:
                lines = TELEMETRY_HEADER + "\n" + lines
            os.write(fd, lines.encode())
        finally:
            os.close(fd)
        return True

    def _loop(self) -> None:
        while not self._stop.wait(self.telemetry_s):
            self.sample()

    def close(self, stop_mps: bool) -> None:
        """Stop sampling; stop the MPS daemon too when ``stop_mps`` (no launch of the node runs)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        if stop_mps:
            with self._lock:
                try:
                    if not self.mps.started:  # a daemon an earlier runner left: adopt it to stop it
                        self.mps_attached = self.mps.attach()
                    self.mps.stop()
                except (RuntimeError, OSError, subprocess.TimeoutExpired):
                    pass  # already gone


@dataclass(frozen=True)
class GpuTelemetry:
    """What the NVML samples of a service folder add up to."""

    energy_j: float  # GPU energy: trapezoid of each GPU's power over its samples, summed over GPUs
    util: float  # time-weighted mean SM utilisation, averaged over the GPUs sampled
    n_gpus: int
    n_samples: int


def read_telemetry(out_dir: str | Path) -> GpuTelemetry | None:
    """Sum up ``out_dir/nodes/*/telemetry.csv``; None when there is no sample. Per GPU, consecutive
    samples are joined by a straight line (trapezoid rule), also across a gap in the samples (the
    GPU drew power while the service was down, too). Malformed lines (a torn last line) are skipped."""
    series: dict[tuple[str, int], list[tuple[float, float, float]]] = defaultdict(list)
    for path in sorted(Path(out_dir).glob(f"nodes/*/{TELEMETRY_FILE}")):
        with open(path, errors="replace") as f:
            for line in f:
                parts = line.rstrip("\n").split(",")
                if len(parts) != 6 or parts[0] == "t":
                    continue
                try:
                    t, dev, p, u = float(parts[0]), int(parts[2]), float(parts[3]), float(parts[4])
                except ValueError:
                    continue
                if math.isfinite(t) and math.isfinite(p):
                    series[(parts[1], dev)].append((t, p, u if math.isfinite(u) else 0.0))
    if not series:
        return None
    energy, utils, n = 0.0, [], 0
    for rows in series.values():
        rows.sort()
        n += len(rows)
        busy = 0.0
        for (t0, p0, u0), (t1, p1, u1) in zip(rows, rows[1:], strict=False):
            dt = t1 - t0
            energy += 0.5 * (p0 + p1) * dt
            busy += 0.5 * (u0 + u1) * dt
        span = rows[-1][0] - rows[0][0]
        utils.append(busy / span if span > 0 else rows[0][2])
    return GpuTelemetry(energy, sum(utils) / len(utils), len(series), n)
