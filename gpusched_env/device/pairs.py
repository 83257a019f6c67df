"""One HP inference service beside one BE training job on one GPU: build, run, measure.

The standalone runs (each client alone, the same arrivals) are the reference of every ratio and are
cached per (setup, seed). Randomness: ``SeedSequence(seed)`` spawns one child for kernel shapes and
one for arrivals.
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


def sequence(model: str, gpu_type: str, seed: int, groups: float, bound_ms: float) -> KernelSeq:
    """The grouped kernel sequence of ``model`` for run ``seed``."""
    shapes = np.random.SeedSequence(seed).spawn(2)[0]
    raw = kernel_sequence(model, gpu_type, int(shapes.generate_state(1)[0]))
    return group(raw, raw.standalone_s() / groups, bound_ms * 1e-3)


def clients(setup: PairSetup, seed: int, hp_cap: float = 1.0, be_cap: float = 1.0) -> tuple[ClientSpec, ClientSpec]:
    """The HP service (priority 1) and the BE job (priority 0) of ``setup`` for run ``seed``."""
    g = setup.grouping
    hp_seq = sequence(setup.hp_model, setup.gpu_type, seed, g.hp_groups, g.bound_ms)
    be_seq = sequence(setup.be_model, setup.gpu_type, seed, g.be_groups, g.bound_ms)
    rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(2)[1])
    solo = hp_seq.standalone_s()
    arr = arrival_times(setup.service, solo, setup.duration_s, rng)
    slo = None if setup.hp_slo_factor is None else setup.hp_slo_factor * solo
    hp = ClientSpec(setup.hp_model, "hp", hp_seq, arr, priority=1, sm_cap=hp_cap, slo_s=slo)
    return hp, ClientSpec(setup.be_model, "be", be_seq, None, priority=0, sm_cap=be_cap)


@functools.lru_cache(maxsize=512)
def standalone(setup: PairSetup, seed: int) -> tuple[RunStats, RunStats]:
    """HP alone and BE alone (the exclusive runs)."""
    hp, be = clients(setup, seed)
    gpu = device_gpu(setup.gpu_type)
    return (simulate(gpu, [hp], make_mechanism("exclusive"), setup.duration_s),
            simulate(gpu, [be], make_mechanism("exclusive"), setup.duration_s))


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
    """Device metrics (CONTRACT.md names) of a shared run against the standalone runs."""
    hp = next(c for s in stats for c in s.clients if c.role == "hp")
    be = next(c for s in stats for c in s.clients if c.role == "be")
    hps, bes = hp_solo.client("hp"), be_solo.client("be")
    lat = np.array(hp.latencies_s) * 1e3
    solo_lat = np.array(hps.latencies_s) * 1e3
    elapsed = stats[0].elapsed_s
    hp_norm = len(lat) / max(1, len(solo_lat))
    be_norm = be.iterations / max(1, bes.iterations)
    busy = sum(s.busy_s for s in stats) / len(stats)
    m = {
        "hp_mean_ms": _q(lat, None), "hp_p50_ms": _q(lat, 50), "hp_p99_ms": _q(lat, 99),
        "hp_p99_ratio": _q(lat, 99) / _q(solo_lat, 99), "hp_mean_ratio": _q(lat, None) / _q(solo_lat, None),
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


