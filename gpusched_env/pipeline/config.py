"""The typed pipeline-level scenario (``conf/scenario/NAME.yaml`` with ``level: pipeline``)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from gpusched_env.config_util import ConfigError, from_dict
from gpusched_env.paper import PaperClaim
from gpusched_env.pipeline.dynamics import Workload
from gpusched_env.pipeline.model import PipelineModel
from gpusched_env.pipeline.spec import PipelineSpec


@dataclass(frozen=True)
class JobConfig:
    """``scenario.job``: the pipeline job. Per-stage times: one value for all stages or S values."""

    stages: int = 8
    microbatches: int = 24
    microbatch_size: int = 1  # samples per micro-batch
    f_ms: list[float] = field(default_factory=lambda: [8.9])
    b_ms: list[float] = field(default_factory=lambda: [10.0])
    w_ms: list[float] = field(default_factory=lambda: [5.9])
    activation_limit: int = 24
    overhead_ms: float = 0.0
    p2p_ms: float = 0.0
    hidden_size: int = 0  # message bytes = hidden x seq x micro-batch x dtype bytes (0: latency only)
    seq_length: int = 0
    dtype_bytes: int = 2
    link_gb_s: float = 0.0  # link bandwidth, GB/s (0: no bandwidth term)
    pcie_gb_s: float = 0.0  # device<->host copies of the CPU path, GB/s (0: free copies)
    rendezvous: bool = True  # GPU-driven sends wait for the receiver's posted receive
    cpu_channels: int = 0  # host delegates per link direction (0: no queueing)
    injector_group_ranks: bool = False  # PipeMorph's injector quirk under batched p2p (PipelineModel)

    def __post_init__(self) -> None:
        if self.stages < 2:
            raise ValueError(f"stages must be >= 2 (one stage has no links for the workloads' link delays "
                             f"and NIC failures, and nothing to pipeline), got {self.stages}")
        if self.microbatch_size < 1:
            raise ValueError(f"microbatch_size must be >= 1, got {self.microbatch_size}")
        for name in ("f_ms", "b_ms", "w_ms"):
            bad = [x for x in getattr(self, name) if not 0 <= x < math.inf]
            if bad:
                raise ValueError(f"{name} must be finite times >= 0 (ms), got {getattr(self, name)}")
        for name in ("overhead_ms", "p2p_ms"):
            if not 0 <= getattr(self, name) < math.inf:
                raise ValueError(f"{name} must be a finite time >= 0 (ms), got {getattr(self, name)}")
        for name in ("hidden_size", "seq_length", "cpu_channels"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.dtype_bytes < 1:
            raise ValueError(f"dtype_bytes must be >= 1, got {self.dtype_bytes}")
        for name in ("link_gb_s", "pcie_gb_s"):
            if not 0 <= getattr(self, name) < math.inf:
                raise ValueError(f"{name} must be a finite bandwidth >= 0 (GB/s; 0 = not modelled), "
                                 f"got {getattr(self, name)}")

    @property
    def message_bytes(self) -> float:
        """Bytes of one activation / gradient message: hidden x sequence x micro-batch x dtype."""
        return float(self.hidden_size * self.seq_length * self.microbatch_size * self.dtype_bytes)

    def spec(self) -> PipelineSpec:
        """The :class:`PipelineSpec` (validates S, M and the times)."""
        def per_stage(name: str, v: list[float]) -> tuple[float, ...]:
            if len(v) == 1:
                return (float(v[0]),) * max(self.stages, 1)
            return tuple(float(x) for x in v)
        return PipelineSpec(self.stages, self.microbatches, per_stage("f_ms", self.f_ms),
                            per_stage("b_ms", self.b_ms), per_stage("w_ms", self.w_ms))

    def model(self) -> PipelineModel:
        """The healthy :class:`PipelineModel` of this job."""
        return PipelineModel(self.spec(), activation_limit=self.activation_limit,
                             overhead_ms=self.overhead_ms, p2p_ms=self.p2p_ms,
                             message_bytes=self.message_bytes,
                             link_gb_s=self.link_gb_s or math.inf, pcie_gb_s=self.pcie_gb_s or math.inf,
                             rendezvous=self.rendezvous, cpu_channels=self.cpu_channels,
                             injector_group_ranks=self.injector_group_ranks)


@dataclass(frozen=True)
class DynamicsConfig:
    """``scenario.dynamics``: costs of failures and run-to-run variation."""

    restart_s: float = 20.0  # GPU-driven: a NIC failure costs a job restart
    host_path_delay_ms: float = 10.0  # CPU-delegated: extra per-send delay over the host path
    jitter_cv: float = 0.0  # coefficient of variation of each operation's time (seeded)
    replan_ms: float = 0.0  # an adaptive schedule's cost in an iteration where it re-plans

    def __post_init__(self) -> None:
        for name in ("restart_s", "host_path_delay_ms", "jitter_cv", "replan_ms"):
            if not 0 <= getattr(self, name) < math.inf:
                raise ValueError(f"{name} must be a finite number >= 0, got {getattr(self, name)}")


@dataclass(frozen=True)
class EnvConfig:
    """``scenario.env``: the random dynamic traces of ``gpusched/Pipeline-v0`` episodes."""

    iterations: int = 32
    delays_ms: list[float] = field(default_factory=lambda: [0.0, 10.0, 30.0, 60.0])
    change_prob: float = 0.15

    def __post_init__(self) -> None:
        if self.iterations < 1:
            raise ValueError(f"env.iterations must be >= 1, got {self.iterations}")
        if not 0.0 <= self.change_prob <= 1.0:
            raise ValueError(f"env.change_prob must be in [0, 1], got {self.change_prob}")
        if not self.delays_ms or any(d < 0 for d in self.delays_ms):
            raise ValueError(f"env.delays_ms must be a non-empty list of values >= 0, got {self.delays_ms}")


@dataclass(frozen=True)
class PipelineScenario:
    """A pipeline-level scenario: one job, its workloads (cases), published claims."""

    name: str
    level: str = "pipeline"
    description: str = ""
    job: JobConfig = field(default_factory=JobConfig)
    dynamics: DynamicsConfig = field(default_factory=DynamicsConfig)
    workloads: list[Workload] = field(default_factory=list)
    env: EnvConfig = field(default_factory=EnvConfig)
    default_policies: list[str] = field(default_factory=list)
    paper: list[PaperClaim] = field(default_factory=list)
    sources: dict[str, str] = field(default_factory=dict)

    @property
    def workload_names(self) -> list[str]:
        return [w.name for w in self.workloads]


def load(raw: dict[str, Any], name: str) -> PipelineScenario:
    """The typed scenario from its YAML mapping; a bad key or value raises ConfigError naming it."""
    cfg = dict(raw)
    cfg.setdefault("name", name)
    scn = from_dict(PipelineScenario, cfg, "scenario")
    if scn.level != "pipeline":
        raise ConfigError(f"scenario.level: expected 'pipeline', got {scn.level!r}")
    if not scn.workloads:
        raise ConfigError("scenario.workloads: at least one workload is needed")
    try:
        model = scn.job.model()
    except ValueError as e:
        raise ConfigError(f"scenario.job: {e}") from e
    for i, w in enumerate(scn.workloads):
        try:
            w.validate(model.stages)
        except ValueError as e:
            raise ConfigError(f"scenario.workloads[{i}]: {e}") from e
    for i, c in enumerate(scn.paper):
        bad = [w for w in c.workloads if w not in scn.workload_names]
        if bad:
            raise ConfigError(f"scenario.paper[{i}].workloads: {bad} are not among {scn.workload_names}")
    from gpusched_env.pipeline.schedules import SCHEDULES

    unknown = [p for p in scn.default_policies if p not in SCHEDULES]
    if unknown:
        raise ConfigError(f"scenario.default_policies: unknown {unknown}; expected some of {list(SCHEDULES)}")
    return scn
