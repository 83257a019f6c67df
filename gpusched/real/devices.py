"""What a "device" is on this machine: NVIDIA GPUs, or sets of CPU cores standing in for them.

Both kinds give the backend the same three things: how many devices, the environment that places
a job process on a set of devices with an SM share, and one telemetry sample per device. All device
kind differences live here; the backend has no branch on the kind.

CPU stand-in power is an *estimate* (no RAPL counters here): per device,
``P = n_cores * (idle_w_per_core + (busy_w_per_core - idle_w_per_core) * util)`` with ``util`` the
mean psutil load of its cores (whatever runs there). Defaults (1.0 W idle, 3.5 W busy per core) are a choice: a 64-core
225 W server CPU at full load is ~3.5 W per core.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol

import psutil

from gpusched.real.commands import CommandRunner

TELEMETRY_FIELDS = (
    "t_s", "device", "power_w", "energy_j", "util", "mem_used_mb", "mem_total_mb", "sm_clock_mhz", "temp_c",
)


@dataclass(frozen=True)
class Sample:
    """One telemetry row. ``energy_j``: device energy since the run started."""

    t_s: float
    device: int
    power_w: float
    energy_j: float
    util: float
    mem_used_mb: float
    mem_total_mb: float
    sm_clock_mhz: float
    temp_c: float

    def row(self) -> list[str]:
        return [f"{getattr(self, k):.6g}" if isinstance(getattr(self, k), float) else str(getattr(self, k))
                for k in TELEMETRY_FIELDS]


class Devices(Protocol):
    """A node's devices, as the backend sees them."""

    kind: str  # "cpu" or "nvidia"
    n: int
    idle_w: float  # per-device idle power, for the idle floor

    def names(self) -> list[str]: ...

    def placement_env(self, gpus: tuple[int, ...], sm_share: float) -> dict[str, str]:
        """Environment that places a job process on ``gpus`` with an SM share in (0, 1]."""
        ...

    def sample(self, t_s: float, pids: dict[int, list[int]]) -> list[Sample]:
        """One reading per device; ``pids``: device -> pids of the job processes on it."""
        ...

    def close(self) -> None: ...


def parse_cores(spec: list[list[int]] | None, n: int | None, cores_per_device: int) -> list[list[int]]:
    """Core sets of the CPU devices: explicit ``spec`` or ``n`` consecutive blocks of cores."""
    if cores_per_device < 1:
        raise ValueError(f"devices.cores_per_device must be >= 1; got {cores_per_device}")
    if n is not None and n < 1:
        raise ValueError(f"devices.count must be >= 1; got {n}")
    avail = sorted(psutil.Process().cpu_affinity() or range(psutil.cpu_count() or 1))
    if spec:
        sets = [sorted(int(c) for c in s) for s in spec]
        for i, s in enumerate(sets):
            if not s or any(c not in avail for c in s):
                raise ValueError(f"devices.cores[{i}]: {s} is not a non-empty subset of usable cores {avail}")
        return sets
    if n is None:
        n = max(1, len(avail) // cores_per_device)
    if n * cores_per_device > len(avail):
        raise ValueError(
            f"devices.count={n} x cores_per_device={cores_per_device} needs more than the {len(avail)} usable cores"
        )
    return [avail[i * cores_per_device:(i + 1) * cores_per_device] for i in range(n)]


class CpuDevices:
    """Devices that are sets of CPU cores: affinity for placement, threads for the SM share, and
    optionally a negative ``nice`` so that other processes on the machine barely slow a "device"
    down (a GPU is not shared with unrelated work; needs CAP_SYS_NICE)."""

    kind = "cpu"

    def __init__(self, cores: list[list[int]], idle_w_per_core: float = 1.0, busy_w_per_core: float = 3.5,
                 nice: int = 0) -> None:
        if busy_w_per_core < idle_w_per_core or idle_w_per_core < 0:
            raise ValueError("devices.busy_w_per_core must be >= idle_w_per_core >= 0")
        if not -20 <= nice <= 19:
            raise ValueError(f"devices.nice must be in [-20, 19], got {nice}")
        self.nice = nice
        self.cores = cores
        self.n = len(cores)
        self.idle_w_core = idle_w_per_core
        self.busy_w_core = busy_w_per_core
        self.idle_w = idle_w_per_core * (sum(len(c) for c in cores) / max(self.n, 1))
        self._energy = [0.0] * self.n
        self._last_t: float | None = None
        self._last_p = [0.0] * self.n
        psutil.cpu_percent(percpu=True)  # prime the per-core counters
        self._mem_total_mb = psutil.virtual_memory().total / 2**20 / max(self.n, 1)

    def names(self) -> list[str]:
        return [f"cpu{'+'.join(map(str, c))}" for c in self.cores]

    def placement_env(self, gpus: tuple[int, ...], sm_share: float) -> dict[str, str]:
        cores = sorted({c for g in gpus for c in self.cores[g]})
        threads = max(1, round(sm_share * len(cores)))
        t = str(threads)
        return {
            "GPUSCHED_CPU_CORES": ",".join(map(str, cores)), "GPUSCHED_NUM_THREADS": t,
            "OMP_NUM_THREADS": t, "MKL_NUM_THREADS": t, "GPUSCHED_TORCH_DEVICE": "cpu", "CUDA_VISIBLE_DEVICES": "",
            **({"GPUSCHED_NICE": str(self.nice)} if self.nice else {}),
        }

    def sample(self, t_s: float, pids: dict[int, list[int]]) -> list[Sample]:
        per_core = psutil.cpu_percent(percpu=True)
        freq = psutil.cpu_freq()
        mhz = float(freq.current) if freq else math.nan
        temp = _cpu_temp()
        dt = 0.0 if self._last_t is None else max(0.0, t_s - self._last_t)
        out = []
        for d, cores in enumerate(self.cores):
            util = sum(per_core[c] for c in cores if c < len(per_core)) / (100.0 * len(cores))
            util = min(max(util, 0.0), 1.0)
            p = len(cores) * (self.idle_w_core + (self.busy_w_core - self.idle_w_core) * util)
            self._energy[d] += 0.5 * (p + self._last_p[d]) * dt if self._last_t is not None else 0.0
            self._last_p[d] = p
            rss = sum(_rss_mb(pid) for pid in pids.get(d, []))
            out.append(Sample(t_s, d, p, self._energy[d], util, rss, self._mem_total_mb, mhz, temp))
        self._last_t = t_s
        return out

    def close(self) -> None:
        pass


def _rss_mb(pid: int) -> float:
    try:
        return psutil.Process(pid).memory_info().rss / 2**20
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return 0.0


def _cpu_temp() -> float:
    fn = getattr(psutil, "sensors_temperatures", None)
    try:
        temps = fn() if fn else {}
    except OSError:
        temps = {}
    for entries in temps.values():
        if entries:
            return float(entries[0].current)
    return math.nan


class NvidiaDevices:
    """NVIDIA GPUs: CUDA_VISIBLE_DEVICES (UUIDs where known) for placement, NVML for telemetry.

    The SM share itself is applied by MPS (:mod:`gpusched.real.mps`); ``count`` is needed only in dry run
    (no NVML to ask). Every NVML call goes through the command layer.
    """

    kind = "nvidia"

    def __init__(self, runner: CommandRunner, count: int | None = None, idle_w: float = 50.0) -> None:
        import pynvml

        self._nv: Any = pynvml
        self.runner = runner
        runner.nvml("nvmlInit")
        n = runner.nvml("nvmlDeviceGetCount")
        if n is None:
            if count is None:
                raise ValueError("devices.count is required for nvidia devices in dry-run mode")
            n = count
        self.n = int(n)
        self.idle_w = idle_w
        self.handles = [runner.nvml("nvmlDeviceGetHandleByIndex", i) for i in range(self.n)]
        self.uuids = [_s(runner.nvml("nvmlDeviceGetUUID", h)) for h in self.handles]
        self._names = [_s(runner.nvml("nvmlDeviceGetName", h)) or f"gpu{i}" for i, h in enumerate(self.handles)]
        self.driver_version = _s(runner.nvml("nvmlSystemGetDriverVersion")) or None
        self._e0 = [self._energy_mj(h) for h in self.handles]

    def names(self) -> list[str]:
        return self._names

    def placement_env(self, gpus: tuple[int, ...], sm_share: float) -> dict[str, str]:
        ids = [self.uuids[g] or str(g) for g in gpus]
        return {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": ",".join(ids), "GPUSCHED_TORCH_DEVICE": "cuda"}

    def _energy_mj(self, h: Any) -> float:
        v = self.runner.nvml("nvmlDeviceGetTotalEnergyConsumption", h)
        return float(v) if v is not None else 0.0

    def sample(self, t_s: float, pids: dict[int, list[int]]) -> list[Sample]:
        r, nv = self.runner, self._nv
        out = []
        for d, h in enumerate(self.handles):
            power = r.nvml("nvmlDeviceGetPowerUsage", h)
            util = r.nvml("nvmlDeviceGetUtilizationRates", h)
            mem = r.nvml("nvmlDeviceGetMemoryInfo", h)
            clock = r.nvml("nvmlDeviceGetClockInfo", h, nv.NVML_CLOCK_SM)
            temp = r.nvml("nvmlDeviceGetTemperature", h, nv.NVML_TEMPERATURE_GPU)
            out.append(Sample(
                t_s, d,
                power / 1000.0 if power is not None else math.nan,
                (self._energy_mj(h) - self._e0[d]) / 1000.0,
                util.gpu / 100.0 if util is not None else math.nan,
                mem.used / 2**20 if mem is not None else math.nan,
                mem.total / 2**20 if mem is not None else math.nan,
                float(clock) if clock is not None else math.nan,
                float(temp) if temp is not None else math.nan,
            ))
        return out

    def close(self) -> None:
        self.runner.nvml("nvmlShutdown")


def _s(v: Any) -> str:
    if v is None:
        return ""
    return v.decode() if isinstance(v, bytes) else str(v)
