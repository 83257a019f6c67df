"""``scenario.model``: every physical option of the cluster model, as typed configs."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpusched_env.cluster.variability import VariabilityConfig
from gpusched_env.device.analytic import SharingConfig
from gpusched_env.power import PowerConfig


@dataclass(frozen=True)
class LocalityConfig:
    """``scenario.model.locality``: ``constant`` = PAL's penalty ``lf`` when a job spans nodes;
    ``bandwidth`` = ring all-reduce of 4 B × parameters per iteration over the slowest link spanned."""

    mode: str = "constant"  # constant (PAL's lf) or bandwidth (all-reduce over the slowest link)
    lf: float = 1.7  # PAL default (CALIBRATION.md)

    def __post_init__(self) -> None:
        if self.mode not in ("constant", "bandwidth"):
            raise ValueError(f"locality.mode must be constant or bandwidth, got {self.mode!r}")


@dataclass(frozen=True)
class StragglerConfig:
    """``scenario.model.stragglers``: transient per-GPU slowdowns (off by default).

    Each GPU alternates normal and straggling periods (exponential lengths). The straggling share
    (``fraction``), mean episode length and slowdown distribution come from the Alibaba PAI
    mini-batch data (fitted.STRAGGLERS); ``sample_s`` (the data's sampling step in seconds) is a
    choice, as the data gives sample indices, not seconds. ``fraction_scale`` scales the share: the
    PAI workers shared GPUs, so dedicated-GPU clusters straggle less (choice).
    """

    enabled: bool = False  # transient stragglers on/off
    fraction_scale: float = 0.1  # choice: x the PAI straggling share (36.7 %); PAI workers shared GPUs
    sample_s: float = 10.0  # choice: seconds per sample of the PAI mini-batch series


@dataclass(frozen=True)
class FailureConfig:
    """``scenario.model.failures``: node failures (off when ``mtbf_h`` is null)."""

    mtbf_h: float | None = None  # mean time between failures of one node (hours); null = no failures
    repair_s: float = 3600.0  # choice
    checkpoint_interval_s: float = 1800.0  # choice: work since the last checkpoint is lost


@dataclass(frozen=True)
class SimModel:
    """``scenario.model``: every physical option of the simulator."""

    variability: VariabilityConfig = field(default_factory=VariabilityConfig)
    locality: LocalityConfig = field(default_factory=LocalityConfig)
    power: PowerConfig = field(default_factory=PowerConfig)
    sharing: SharingConfig = field(default_factory=SharingConfig)
    stragglers: StragglerConfig = field(default_factory=StragglerConfig)
    failures: FailureConfig = field(default_factory=FailureConfig)
    restart_cost_s: float = 0.0  # checkpoint restore time (s) after a preemption or migration
    start_cost_s: float = 0.0  # set-up time (s) before a job's first iteration (process start, imports)
    timeline: bool = True  # keep the (time, busy GPUs, power) series for plots
    completion_at_round: bool = False  # PAL artifact: a job ends (frees GPUs) at the round boundary
