"""What a pipeline-parallel job is: the spec a :class:`gpusched_env.types.Job` carries.

A leaf module (imports nothing from gpusched_env), so the contracts can name it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PipelineSpec:
    """S stages and M micro-batches per iteration; per-stage forward / backward-input /
    backward-weight times of one micro-batch (ms) on the reference GPU (a V100 in the cluster
    catalogue); the schedule (a pipeline-level policy name); ``activation_mb``: the activation (and
    gradient) message of one micro-batch between stages, which a link's bandwidth turns into delay
    (0 = latency only)."""

    stages: int
    microbatches: int
    f_ms: tuple[float, ...]
    b_ms: tuple[float, ...]
    w_ms: tuple[float, ...]
    schedule: str = "1f1b"
    activation_mb: float = 0.0

    def __post_init__(self) -> None:
        if self.stages < 1:
            raise ValueError(f"pipeline.stages must be >= 1, got {self.stages}")
        if self.microbatches < self.stages:
            raise ValueError(f"pipeline.microbatches must be >= stages ({self.stages}), got {self.microbatches}")
        for name in ("f_ms", "b_ms", "w_ms"):
            times = getattr(self, name)
            if len(times) != self.stages:
                raise ValueError(f"pipeline.{name} needs {self.stages} values (one per stage), got {len(times)}")
            if any(t < 0 for t in times):
                raise ValueError(f"pipeline.{name} must be >= 0, got {list(times)}")
        if self.activation_mb < 0:
            raise ValueError(f"pipeline.activation_mb must be >= 0, got {self.activation_mb}")
