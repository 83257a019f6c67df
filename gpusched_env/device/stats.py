"""What a device run records: per-client latencies, waits and iterations; GPU busy and SM time."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ClientStats:
    """One client's record (mutable while the run goes)."""

    name: str
    role: str
    latencies_s: list[float] = field(default_factory=list)  # per completed request: arrival -> completion (response)
    service_s: list[float] = field(default_factory=list)  # per completed request: first kernel issued -> completion
    slo_met: int = 0  # requests within their SLO
    iterations: int = 0  # completed training iterations
    kernels: int = 0  # completed kernels (groups)
    gpu_s: float = 0.0  # time with at least one of its kernels progressing
    max_wait_s: float = 0.0  # longest wait of a kernel from queued to first progress
    waits: int = 0

    def add_latency(self, lat: float, slo_s: float | None, service: float | None = None) -> None:
        self.latencies_s.append(lat)
        self.service_s.append(lat if service is None else service)
        if slo_s is not None and lat <= slo_s:
            self.slo_met += 1


@dataclass
class RunStats:
    """The whole GPU's record."""

    gpu: str
    mechanism: str
    elapsed_s: float = 0.0
    busy_s: float = 0.0  # time at least one kernel progresses (GPU utilisation numerator)
    sm_s: float = 0.0  # SM-share-seconds held by progressing kernels
    clients: list[ClientStats] = field(default_factory=list)

    def client(self, role: str) -> ClientStats:
        """The first client of ``role``."""
        for c in self.clients:
            if c.role == role:
                return c
        raise KeyError(f"no client with role {role!r}")
