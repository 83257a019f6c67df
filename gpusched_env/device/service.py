"""What an inference service is: the spec a :class:`gpusched_env.types.Job` carries when it serves
requests instead of training. A leaf module (imports nothing from gpusched_env)."""

from __future__ import annotations

from dataclasses import dataclass

ARRIVALS = ("poisson", "periodic", "trace")


@dataclass(frozen=True, slots=True)
class ServiceSpec:
    """Request arrivals and the latency objective of an inference service (batch 1).

    arrival: ``poisson`` at ``load`` (fraction of the service's standalone capacity, in (0, 1)),
    ``periodic`` every ``period_ms`` starting at ``phase_ms``, or ``trace`` (arrival times from
    ``trace``, a data-relative path). ``slo_ms``: latency objective (None = none).
    """

    arrival: str = "poisson"
    load: float | None = 0.5
    period_ms: float | None = None
    phase_ms: float = 0.0
    trace: str | None = None
    slo_ms: float | None = None

    def __post_init__(self) -> None:
        if self.arrival not in ARRIVALS:
            raise ValueError(f"service.arrival must be one of {', '.join(ARRIVALS)}, got {self.arrival!r}")
        if self.arrival == "poisson" and not (self.load is not None and 0.0 < self.load < 1.0):
            raise ValueError(f"service.load must be in (0, 1) for poisson arrivals, got {self.load}")
        if self.arrival == "periodic" and not (self.period_ms is not None and self.period_ms > 0):
            raise ValueError(f"service.period_ms must be > 0 for periodic arrivals, got {self.period_ms}")
        if self.arrival == "trace" and not self.trace:
            raise ValueError("service.trace (a data-relative path) is required for trace arrivals")
        if self.slo_ms is not None and self.slo_ms <= 0:
            raise ValueError(f"service.slo_ms must be > 0, got {self.slo_ms}")
