"""Request arrival times of an inference service: Poisson at a load, periodic with a phase, or a trace."""

from __future__ import annotations

import functools

import numpy as np

from gpusched_env.data import data_path
from gpusched_env.device.service import ServiceSpec


def arrival_times(spec: ServiceSpec, service_s: float, horizon_s: float, rng: np.random.Generator) -> np.ndarray:
    """Arrival times in [0, horizon_s) for a service whose request takes ``service_s`` alone.

    poisson: rate = load / service_s. periodic: phase_ms + k · period_ms. trace: the trace's
    inter-arrival times, rescaled so the mean rate is load / service_s (the trace keeps its burstiness),
    starting at a random point of the trace.
    """
    if not service_s > 0:
        raise ValueError(f"service_s must be in (0, inf), got {service_s}")
    if spec.arrival == "periodic":
        assert spec.period_ms is not None
        return np.arange(spec.phase_ms * 1e-3, horizon_s, spec.period_ms * 1e-3)
    load = spec.load if spec.load is not None else 0.5
    mean_gap = service_s / load
    n = int(horizon_s / mean_gap * 1.5) + 16
    if spec.arrival == "poisson":
        gaps = rng.exponential(mean_gap, size=n)
    else:
        assert spec.trace is not None
        base = trace_gaps(spec.trace)
        start = int(rng.integers(len(base)))
        gaps = np.resize(np.roll(base, -start), n) * (mean_gap / base.mean())
    times = np.cumsum(gaps)
    while times[-1] < horizon_s:  # rare: extend
        times = np.concatenate([times, times[-1] + np.cumsum(gaps)])
    return times[times < horizon_s]


@functools.lru_cache(maxsize=8)
def trace_gaps(rel: str) -> np.ndarray:
    """Positive inter-arrival gaps (s) of a trace CSV whose first column is a timestamp (azure-llm-2023)."""
    import pandas as pd

    ts = pd.to_datetime(pd.read_csv(data_path(rel), usecols=[0]).iloc[:, 0], format="mixed")
    gaps = np.diff(ts.astype("int64").to_numpy()) * 1e-9
    gaps = gaps[gaps > 0]
    if len(gaps) == 0:
        raise ValueError(f"trace {rel!r} has no positive inter-arrival gaps")
    return gaps
