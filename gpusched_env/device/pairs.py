"""One HP inference service beside one BE training job on one GPU: build, run, measure.

The standalone runs (each client alone, the same arrivals) are the reference of every ratio; each is
cached under what it depends on (the HP run is the same beside every BE model, the BE run beside
every HP service), so the policies and pairs of a scenario simulate each one once per process.
Randomness: ``SeedSequence(seed)`` spawns one child for kernel shapes and one for arrivals.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from gpusched_env.device.arrivals import arrival_times
from gpusched_env.device.engine import simulate
from gpusched_env.device.gpus import DeviceGpu, device_gpu
from gpusched_env.device.kernels import KernelSeq, group
from gpusched_env.device.mechanism import ClientSpec
from gpusched_env.device.mechanisms import make_mechanism
from gpusched_env.device.profiles import kernel_sequence, profile
from gpusched_env.device.service import ServiceSpec
from gpusched_env.device.stats import RunStats


@dataclass(frozen=True)
class Grouping:
    """How kernels are merged into groups (DEVICE.md: simulating every kernel is slow)."""

    hp_groups: float = 8.0  # choice: a request is cut into groups of >= 1/8 of its standalone time
    be_groups: float = 10.0  # choice: an iteration into groups of >= 1/10 of its standalone time
    bound_ms: float = 1.0  # choice: a kernel longer than this is never merged with others

    def __post_init__(self) -> None:
        if not (self.hp_groups >= 1 and self.be_groups >= 1):
            raise ValueError(f"grouping hp_groups and be_groups must be in [1, inf), got {self.hp_groups}, {self.be_groups}")
        if not self.bound_ms > 0:
            raise ValueError(f"grouping bound_ms must be in (0, inf), got {self.bound_ms}")


@dataclass(frozen=True)
class PairSetup:
    """Everything but the mechanism: GPU, the two models, arrivals, horizon, grouping."""

    gpu_type: str
    hp_model: str
    be_model: str
    service: ServiceSpec
    duration_s: float
    grouping: Grouping = Grouping()
    hp_slo_factor: float | None = None  # SLO = factor × standalone request time (None = none)

    def __post_init__(self) -> None:
        device_gpu(self.gpu_type)
        if profile(self.hp_model).kind != "inference":
            raise ValueError(f"hp_model must be an inference model, got {self.hp_model!r}")
        if profile(self.be_model).kind != "training":
            raise ValueError(f"be_model must be a training model, got {self.be_model!r}")
        if not self.duration_s > 0:
            raise ValueError(f"duration_s must be in (0, inf), got {self.duration_s}")


@functools.lru_cache(maxsize=256)
def sequence(model: str, gpu_type: str, seed: int, groups: float, bound_ms: float) -> KernelSeq:
    """The grouped kernel sequence of ``model`` for run ``seed`` (cached, read-only: every policy of a
    pair runs the same sequences)."""
    shapes = np.random.SeedSequence(seed).spawn(2)[0]
    raw = kernel_sequence(model, gpu_type, int(shapes.generate_state(1)[0]))
    seq = group(raw, raw.standalone_s() / groups, bound_ms * 1e-3)
    for a in (seq.dur_s, seq.sm, seq.mem, seq.block_s, seq.issue_s, seq.count, seq.busy):
        a.flags.writeable = False
    return seq


def clients(setup: PairSetup, seed: int, hp_cap: float = 1.0, be_cap: float = 1.0) -> tuple[ClientSpec, ClientSpec]:
    """The HP service (priority 1) and the BE job (priority 0) of ``setup`` for run ``seed``."""
    return _hp_client(*_hp_args(setup), seed, hp_cap), _be_client(*_be_args(setup), seed, be_cap)


# What each client depends on: the HP service not on the BE model, the BE job not on the HP model,
# the arrivals or the SLO. The standalone runs are cached under exactly these arguments.
def _hp_args(s: PairSetup) -> tuple[str, str, ServiceSpec, float, float, float, float | None]:
    return s.gpu_type, s.hp_model, s.service, s.duration_s, s.grouping.hp_groups, s.grouping.bound_ms, s.hp_slo_factor


def _be_args(s: PairSetup) -> tuple[str, str, float, float, float]:
    return s.gpu_type, s.be_model, s.duration_s, s.grouping.be_groups, s.grouping.bound_ms


def _hp_client(gpu_type: str, model: str, service: ServiceSpec, duration_s: float, groups: float, bound_ms: float,
               slo_factor: float | None, seed: int, cap: float = 1.0) -> ClientSpec:
    seq = sequence(model, gpu_type, seed, groups, bound_ms)
    rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(2)[1])
    solo = seq.standalone_s()
    arr = arrival_times(service, solo, duration_s, rng)
    slo = None if slo_factor is None else slo_factor * solo
    return ClientSpec(model, "hp", seq, arr, priority=1, sm_cap=cap, slo_s=slo)


def _be_client(gpu_type: str, model: str, duration_s: float, groups: float, bound_ms: float, seed: int,
               cap: float = 1.0) -> ClientSpec:
    return ClientSpec(model, "be", sequence(model, gpu_type, seed, groups, bound_ms), None, priority=0, sm_cap=cap)


def standalone(setup: PairSetup, seed: int) -> tuple[RunStats, RunStats]:
    """HP alone and BE alone (the exclusive runs; cached, shared by every pair with the same HP or
    the same BE client: treat them as read-only)."""
    return hp_alone(*_hp_args(setup), seed), be_alone(*_be_args(setup), seed)


@functools.lru_cache(maxsize=512)
def hp_alone(gpu_type: str, model: str, service: ServiceSpec, duration_s: float, groups: float, bound_ms: float,
             slo_factor: float | None, seed: int) -> RunStats:
    """The HP service alone on the GPU (arguments: :func:`_hp_args`, then the seed)."""
    hp = _hp_client(gpu_type, model, service, duration_s, groups, bound_ms, slo_factor, seed)
    return simulate(device_gpu(gpu_type), [hp], make_mechanism("exclusive"), duration_s)


@functools.lru_cache(maxsize=512)
def be_alone(gpu_type: str, model: str, duration_s: float, groups: float, bound_ms: float, seed: int) -> RunStats:
    """The BE job alone on the GPU (arguments: :func:`_be_args`, then the seed)."""
    be = _be_client(gpu_type, model, duration_s, groups, bound_ms, seed)
    return simulate(device_gpu(gpu_type), [be], make_mechanism("exclusive"), duration_s)


def run_pair(setup: PairSetup, mechanism: str, seed: int, params: dict | None = None,
             be_cap: float = 1.0) -> tuple[dict[str, float], dict[str, list[float]]]:
    """Metrics and plot series of the pair under ``mechanism`` (``exclusive``: the standalone runs)."""
    hp_solo, be_solo = standalone(setup, seed)
    gpu = device_gpu(setup.gpu_type)
    if mechanism == "exclusive":
        stats = [hp_solo, be_solo]
    else:
        hp, be = clients(setup, seed, be_cap=be_cap)
        stats = [simulate(gpu, [hp, be], make_mechanism(mechanism, params), setup.duration_s)]
    return pair_metrics(stats, hp_solo, be_solo, gpu, mechanism == "exclusive", setup.hp_slo_factor is not None)


def pair_metrics(stats: list[RunStats], hp_solo: RunStats, be_solo: RunStats, gpu: DeviceGpu,
                 exclusive: bool, slo: bool = False) -> tuple[dict[str, float], dict[str, list[float]]]:
    """Device metrics (docs/NAMES.md names) of a shared run against the standalone runs."""
    hp = next(c for s in stats for c in s.clients if c.role == "hp")
    be = next(c for s in stats for c in s.clients if c.role == "be")
    hps, bes = hp_solo.client("hp"), be_solo.client("be")
    lat = np.array(hp.latencies_s) * 1e3
    solo_lat = np.array(hps.latencies_s) * 1e3
    svc, solo_svc = np.array(hp.service_s) * 1e3, np.array(hps.service_s) * 1e3
    elapsed = stats[0].elapsed_s
    hp_norm = len(lat) / max(1, len(solo_lat))
    be_norm = be.iterations / max(1, bes.iterations)
    busy = sum(s.busy_s for s in stats) / len(stats)
    m = {
        "hp_mean_ms": _q(lat, None), "hp_p50_ms": _q(lat, 50), "hp_p99_ms": _q(lat, 99),
        "hp_p99_ratio": _q(lat, 99) / _q(solo_lat, 99), "hp_mean_ratio": _q(lat, None) / _q(solo_lat, None),
        "hp_service_p99_ms": _q(svc, 99), "hp_service_p99_ratio": _q(svc, 99) / _q(solo_svc, 99),
        "hp_norm_throughput": hp_norm, "be_norm_throughput": be_norm,
        "be_iter_per_s": be.iterations / elapsed,
        "system_throughput": 1.0 if exclusive else hp_norm + be_norm,
        "hp_max_wait_ms": hp.max_wait_s * 1e3,
        "sm_utilization": sum(s.sm_s for s in stats) / len(stats) / elapsed,
        "gpu_utilization": busy / elapsed,
        "energy_kwh": sum(gpu.idle_w * s.elapsed_s + (gpu.busy_w - gpu.idle_w) * s.busy_s for s in stats) / 3.6e6,
    }
    if slo and len(lat):
        m["hp_slo_attainment"] = hp.slo_met / len(lat)
        m["hp_deadline_miss_rate"] = 1.0 - hp.slo_met / len(lat)
    return m, {"hp_latency_ms": lat.tolist()}


def _q(x: np.ndarray, q: float | None) -> float:
    if len(x) == 0:
        return float("nan")
    return float(np.mean(x)) if q is None else float(np.percentile(x, q))


