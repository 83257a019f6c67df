"""The device level's :class:`~gpusched_env.levels.LevelBench`: HP × BE pairs, or DARIS tasksets, on one GPU.

A pair scenario (``level: device``) names a GPU type, HP inference models, BE training models, the HP
arrivals and the mechanisms' parameters; its workloads are every ``HP+BE`` pair. Policy ``mps_be50``
is MPS with the BE client capped at ``be_sm_pct`` % of the threads (the colocation-h100 cell).
A scenario with a ``tasksets`` key (``daris_rt``) is a :class:`~gpusched_env.device.daris.scenario.DarisScenario`:
its workloads are tasksets of periodic DNN jobs, its policies ``daris``, ``batching``, ``gslice``, ``mps``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gpusched_env.config_util import ConfigError, from_dict
from gpusched_env.device.daris.scenario import STAGE_POLICIES, DarisScenario, run_taskset
from gpusched_env.device.gpus import device_gpu
from gpusched_env.device.measured import comparison
from gpusched_env.device.mechanisms import MECHANISMS, make_mechanism
from gpusched_env.device.pairs import Grouping, PairSetup, run_pair
from gpusched_env.device.profiles import PROFILES
from gpusched_env.device.service import ServiceSpec
from gpusched_env.levels import LevelRun
from gpusched_env.paper import PaperClaim
from gpusched_env.vocabulary import MPS, current_name, current_names

MECHANISM_POLICIES: tuple[str, ...] = tuple(MECHANISMS)
"""Pair policies that are one mechanism as it is (the choices of ``gpusched/GPUShare-v0``'s ``mechanism``)."""
BE_CAPPED_POLICIES: tuple[str, ...] = ("mps_be50",)
"""Pair policies that are ``mps`` with the BE client capped at the scenario's ``be_sm_pct``."""
PAIR_POLICIES: tuple[str, ...] = (*MECHANISM_POLICIES, *BE_CAPPED_POLICIES)
POLICIES: tuple[str, ...] = (*PAIR_POLICIES, *(p for p in STAGE_POLICIES if p not in PAIR_POLICIES))


def pair_policies() -> tuple[str, ...]:
    """The pair policies now: every registered mechanism (shipped or added later) and the BE-capped ones."""
    return (*MECHANISMS, *BE_CAPPED_POLICIES)


def policies() -> tuple[str, ...]:
    """Every device-level policy now: the pair policies, then the stage model's others."""
    pairs = pair_policies()
    return (*pairs, *(p for p in STAGE_POLICIES if p not in pairs))


@dataclass(frozen=True)
class DeviceScenario:
    """``conf/scenario/NAME.yaml`` with ``level: device``."""

    name: str  # scenario name
    level: str = "device"  # must be "device"
    description: str = ""  # one line for tables
    gpu_type: str = "A100"  # gpus.DEVICE_GPUS key
    hp_models: list[str] = field(default_factory=lambda: ["bert_inf"])  # inference services (profiles.PROFILES)
    be_models: list[str] = field(default_factory=lambda: ["resnet50_train"])  # training jobs (profiles.PROFILES)
    service: ServiceSpec = field(default_factory=ServiceSpec)  # HP arrivals
    duration_s: float = 30.0  # simulated seconds per run
    grouping: Grouping = field(default_factory=Grouping)  # kernel grouping
    hp_slo_factor: float | None = None  # SLO = factor × standalone request time
    be_sm_pct: float = 50.0  # mps_be50: BE thread percentage
    mechanisms: dict[str, dict[str, Any]] = field(default_factory=dict)  # per-mechanism parameters
    default_policies: list[str] = field(default_factory=list)  # policies run when none are given
    paper: list[PaperClaim] = field(default_factory=list)  # published claims
    compare_measured: bool = False  # add colocation-h100 measured-vs-sim metrics per pair
    sources: dict[str, str] = field(default_factory=dict)  # parameter -> source

    def __post_init__(self) -> None:
        if self.level != "device":
            raise ValueError(f"level must be 'device', got {self.level!r}")
        device_gpu(self.gpu_type)
        if not 0 < self.duration_s < math.inf:
            raise ValueError(f"duration_s must be in (0, inf), got {self.duration_s}")
        for key, models, kind in (("hp_models", self.hp_models, "inference"), ("be_models", self.be_models, "training")):
            allowed = sorted(k for k, p in PROFILES.items() if p.kind == kind)
            bad = [m for m in models if m not in allowed]
            if bad or not models:
                raise ValueError(f"{key} must be a non-empty list of {allowed}, got {models}")
        bad = [p for p in [*self.default_policies, *self.mechanisms] if p not in pair_policies()]
        if bad:
            raise ValueError(f"policies must be among {list(pair_policies())}, got {bad}")
        if not 0 < self.be_sm_pct <= 100:
            raise ValueError(f"be_sm_pct must be in (0, 100], got {self.be_sm_pct}")
        for mech, params in self.mechanisms.items():
            if mech in MECHANISMS:
                make_mechanism(mech, params)  # raises naming a bad parameter

    @property
    def pairs(self) -> list[tuple[str, str]]:
        return [(h, b) for h in self.hp_models for b in self.be_models]

    @property
    def workload_names(self) -> list[str]:
        return [f"{h}+{b}" for h, b in self.pairs]

    def setup(self, workload: int) -> PairSetup:
        if not 0 <= workload < len(self.pairs):
            raise ValueError(f"workload must be in [0, {len(self.pairs) - 1}], got {workload}")
        h, b = self.pairs[workload]
        return PairSetup(self.gpu_type, h, b, self.service, self.duration_s, self.grouping, self.hp_slo_factor)


def load(raw: dict[str, Any], name: str) -> DeviceScenario | DarisScenario:
    """The typed scenario from its YAML mapping (ConfigError names a bad or unknown key)."""
    data = dict(raw)
    data.setdefault("name", name)
    for key in ("default_policies", "mechanisms"):  # old mechanism names: a one-line note, then the new name
        if isinstance(data.get(key), list):
            data[key] = current_names([str(p) for p in data[key]], f"scenario {name}: {key}")
        elif isinstance(data.get(key), dict):
            data[key] = {current_name(str(k), f"scenario {name}: {key}"): v for k, v in data[key].items()}
    if "tasksets" in data:
        return from_dict(DarisScenario, data, f"scenario {name}")
    return from_dict(DeviceScenario, data, f"scenario {name}")


def run(scn: DeviceScenario | DarisScenario, policy: str, seed: int, workload: int) -> LevelRun:
    """One pair (or taskset) under one policy; all randomness from ``SeedSequence(seed)``."""
    if isinstance(scn, DarisScenario):
        if policy not in STAGE_POLICIES:
            raise ConfigError(f"policy must be one of {list(STAGE_POLICIES)} for {scn.name}, got {policy!r}")
        return LevelRun(run_taskset(scn, policy, seed, workload))
    if policy not in pair_policies():
        raise ConfigError(f"policy must be one of {list(pair_policies())}, got {policy!r}")
    setup = scn.setup(workload)
    mech, cap = (MPS, scn.be_sm_pct / 100.0) if policy in BE_CAPPED_POLICIES else (policy, 1.0)
    metrics, series = run_pair(setup, mech, seed, scn.mechanisms.get(policy), be_cap=cap)
    if scn.compare_measured:
        metrics.update(comparison(policy, setup.hp_model, setup.be_model, metrics))
    return LevelRun(metrics, series)


def plot(scn: DeviceScenario | DarisScenario, runs: list[tuple[str, int, int, LevelRun]], out_dir: Path) -> list[Path]:
    """HP latency CDF per mechanism and mean BE normalised throughput per mechanism (pairs), or
    throughput and miss rates per policy and taskset (DARIS tasksets)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    if isinstance(scn, DarisScenario):
        return [_plot_tasksets(scn, runs, out_dir, plt)]
    policies = list(dict.fromkeys(p for p, *_ in runs))
    fig, ax = plt.subplots(figsize=(6, 4))
    for p in policies:
        lat = np.sort(np.concatenate([r.series.get("hp_latency_ms", []) for q, _, _, r in runs if q == p] or [[]]))
        if len(lat):
            ax.plot(lat, np.arange(1, len(lat) + 1) / len(lat), label=p)
    ax.set(xscale="log", xlabel="HP request latency (ms)", ylabel="CDF", title=f"{scn.name}: HP latency")
    ax.legend()
    cdf = out_dir / f"{scn.name}_latency_cdf.png"
    fig.tight_layout()
    fig.savefig(cdf)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(6, 4))
    vals = [float(np.mean([r.metrics["be_norm_throughput"] for q, _, _, r in runs if q == p])) for p in policies]
    ax.bar(policies, vals)
    ax.set(ylabel="BE throughput / standalone", title=f"{scn.name}: BE throughput")
    ax.tick_params(axis="x", rotation=30)
    bars = out_dir / f"{scn.name}_be_throughput.png"
    fig.tight_layout()
    fig.savefig(bars)
    plt.close(fig)
    return [cdf, bars]


def _plot_tasksets(scn: DarisScenario, runs: list[tuple[str, int, int, LevelRun]], out_dir: Path, plt: Any) -> Path:
    policies = list(dict.fromkeys(p for p, *_ in runs))
    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    width = 0.8 / max(1, len(policies))
    for k, p in enumerate(policies):
        for ax, metric in zip(axes, ("throughput_jobs_s", "hp_deadline_miss_rate", "lp_deadline_miss_rate"), strict=True):
            vals = [float(np.mean([r.metrics[metric] for q, _, w, r in runs if q == p and w == i] or [np.nan]))
                    for i in range(len(scn.tasksets))]
            ax.bar(np.arange(len(vals)) + k * width, vals, width, label=p)
            ax.set(title=metric, xticks=np.arange(len(vals)) + 0.4 - width / 2, xticklabels=scn.tasksets)
    axes[0].legend()
    path = out_dir / f"{scn.name}_tasksets.png"
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
