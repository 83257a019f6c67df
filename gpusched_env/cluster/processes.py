"""The cluster's stochastic processes: transient stragglers, slow drift of the variability
factors, and node failures with repair. Each draws from its own child stream of the run's seed."""

from __future__ import annotations

from collections.abc import Generator
from typing import Protocol

import numpy as np
import simpy

from gpusched_env.cluster.model import FailureConfig, StragglerConfig
from gpusched_env.cluster.variability import VariabilityConfig, drift
from gpusched_env.fitted import (
    QUANTILE_GRID,
    STRAGGLER_EPISODE_SAMPLES,
    STRAGGLER_FRACTION,
    STRAGGLER_SLOWDOWN,
)


class Host(Protocol):
    """What the processes change in the simulator that runs them."""

    env: simpy.Environment

    def set_straggle(self, g: int, factor: float) -> None: ...

    def set_factors(self, factors: np.ndarray) -> None: ...

    def fail_node(self, node: int, checkpoint_interval_s: float) -> None: ...

    def repair_node(self, node: int) -> None: ...


class Stragglers:
    """Each GPU alternates normal and straggling periods of exponential length (see
    :class:`~gpusched_env.cluster.model.StragglerConfig`); toggles are a callback chain rather than
    SimPy processes (cheaper per event)."""

    def __init__(self, host: Host, cfg: StragglerConfig, n_gpus: int, rng: np.random.Generator) -> None:
        frac = min(0.99, STRAGGLER_FRACTION * cfg.fraction_scale)
        self.host, self.rng = host, rng
        self.mean_on = STRAGGLER_EPISODE_SAMPLES * cfg.sample_s
        self.mean_off = self.mean_on * (1 - frac) / frac
        self.slowed = [False] * n_gpus
        self._buf: list[tuple[float, float]] = []
        for g in range(n_gpus):
            self.toggle(g, on=False)

    def toggle(self, g: int, on: bool) -> None:
        mag, exp = self._draw()
        if on:
            self.slowed[g] = mag != 1.0
            self.host.set_straggle(g, mag)
            delay = exp * self.mean_on
        else:
            if self.slowed[g]:
                self.slowed[g] = False
                self.host.set_straggle(g, 1.0)
            delay = exp * self.mean_off
        self.host.env.timeout(delay).callbacks.append(lambda _e: self.toggle(g, not on))

    def _draw(self) -> tuple[float, float]:
        """(slowdown magnitude, standard exponential) from pre-drawn batches of the stream."""
        if not self._buf:
            mags = np.interp(self.rng.random(4096), QUANTILE_GRID, STRAGGLER_SLOWDOWN)
            self._buf = list(zip(mags.tolist(), self.rng.standard_exponential(4096).tolist(), strict=True))
            self._buf.reverse()
        return self._buf.pop()


def drift_process(
    host: Host, cfg: VariabilityConfig, factors: np.ndarray, rng: np.random.Generator
) -> Generator[simpy.Event, None, None]:
    """Every ``drift_interval_s`` the factors take a multiplicative random-walk step."""
    while True:
        yield host.env.timeout(cfg.drift_interval_s)
        factors = drift(factors, cfg.drift_sigma, rng)
        host.set_factors(factors)


def failure_process(
    host: Host, cfg: FailureConfig, node: int, rng: np.random.Generator
) -> Generator[simpy.Event, None, None]:
    """Node ``node`` fails after an exponential time (mean ``mtbf_h``) and is repaired ``repair_s``
    later, again and again."""
    assert cfg.mtbf_h is not None
    env = host.env
    while True:
        yield env.timeout(rng.exponential(cfg.mtbf_h * 3600.0))
        host.fail_node(node, cfg.checkpoint_interval_s)
        yield env.timeout(cfg.repair_s)
        host.repair_node(node)
