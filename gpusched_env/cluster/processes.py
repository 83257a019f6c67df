"""The cluster's stochastic processes: transient stragglers, slow drift of the variability
factors, and node failures with repair. Each draws from its own child stream of the run's seed."""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Sequence, Sized
from typing import Protocol

import numpy as np

from gpusched_env.cluster.clock import URGENT, EventClock
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

    env: EventClock

    def set_straggle(self, g: int, factor: float) -> None: ...

    def set_factors(self, factors: np.ndarray) -> None: ...

    def fail_node(self, node: int, checkpoint_interval_s: float) -> None: ...

    def repair_node(self, node: int) -> None: ...


class Stragglers:
    """Each GPU alternates normal and straggling periods of exponential length (see
    :class:`~gpusched_env.cluster.model.StragglerConfig`).

    The toggles are a timeline of their own (a heap ordered by time, then by the order they were
    scheduled in), not events of the host's clock: most toggle GPUs that hold no job, which changes nothing but
    the GPU's factor, so the host merges the timeline into its event loop with :meth:`run_before`
    and handles only the toggles that touch jobs itself. The draws are taken in toggle order, so
    the result is the same as toggles run as events in time order.
    """

    def __init__(self, host: Host, cfg: StragglerConfig, n_gpus: int, rng: np.random.Generator) -> None:
        frac = min(0.99, STRAGGLER_FRACTION * cfg.fraction_scale)
        self.host, self.rng = host, rng
        self.mean_on = STRAGGLER_EPISODE_SAMPLES * cfg.sample_s
        self.mean_off = self.mean_on * (1 - frac) / frac
        self.slowed = [False] * n_gpus
        self._buf: list[tuple[float, float]] = []
        self._heap: list[tuple[float, int, int, bool]] = []  # (time, order scheduled, GPU, turns on)
        self._seq = 0
        self._stale: dict[int, float] = {}  # GPU -> factor not yet applied (it held no job)
        now = float(host.env.now)
        for g in range(n_gpus):
            self._toggle(now, g, on=False)

    @property
    def next_t(self) -> float:
        """Time of the next toggle."""
        return self._heap[0][0] if self._heap else math.inf

    def _toggle(self, t: float, g: int, on: bool) -> float | None:
        """Toggle GPU ``g`` at time ``t`` and schedule its next toggle; returns the GPU's new factor,
        or None when it does not change (a normal period begins on a GPU that was not slowed)."""
        mag, exp = self._draw()
        factor: float | None
        if on:
            self.slowed[g] = mag != 1.0
            factor = mag
            delay = exp * self.mean_on
        else:
            factor = 1.0 if self.slowed[g] else None
            self.slowed[g] = False
            delay = exp * self.mean_off
        heapq.heappush(self._heap, (t + delay, self._seq, g, not on))
        self._seq += 1
        return factor

    def run_before(
        self, limit: float, resident: Sequence[Sized], apply: Callable[[float, int, float], float],
    ) -> None:
        """Run the toggles due before ``limit`` in order. A toggle of a GPU that holds no job
        (``resident[g]`` empty) changes nothing but the GPU's factor: it is only noted here, and
        the host learns it from :meth:`flush` before a job starts there. A toggle of a GPU that
        holds jobs is handed to the host, ``apply(time, GPU, factor)``, which applies it at that
        time and returns the new limit (it may arm events before ``limit``).

        The steps of :meth:`_toggle` written out (most events of a long run are toggles); the
        popped toggle is replaced by the GPU's next one in one heap operation (the order is the
        same: (time, order scheduled) keys are unique)."""
        heap, stale, slowed = self._heap, self._stale, self.slowed
        mean_on, mean_off = self.mean_on, self.mean_off
        buf, seq = self._buf, self._seq
        while heap:
            t, _, g, on = heap[0]
            if t >= limit:
                break
            if not buf:
                self._refill()
                buf = self._buf
            mag, exp = buf.pop()
            factor: float | None
            if on:
                slowed[g] = mag != 1.0
                factor = mag
                delay = exp * mean_on
            else:
                factor = 1.0 if slowed[g] else None
                slowed[g] = False
                delay = exp * mean_off
            heapq.heapreplace(heap, (t + delay, seq, g, not on))
            seq += 1
            if factor is None:
                continue
            if resident[g]:
                self._seq = seq  # (the host sees the timeline as it is)
                limit = apply(t, g, factor)
            else:
                stale[g] = factor
        self._seq = seq

    def flush(self, gpus: Iterable[int], apply: Callable[[int, float], None]) -> None:
        """Tell the host (``apply(g, factor)``) the factors of ``gpus`` noted while they were idle."""
        stale = self._stale
        if stale:
            for g in gpus:
                factor = stale.pop(g, None)
                if factor is not None:
                    apply(g, factor)

    def flush_all(self, apply: Callable[[int, float], None]) -> None:
        """:meth:`flush` for every GPU (in GPU order)."""
        self.flush(sorted(self._stale), apply)

    def _draw(self) -> tuple[float, float]:
        """(slowdown magnitude, standard exponential) from pre-drawn batches of the stream."""
        if not self._buf:
            self._refill()
        return self._buf.pop()

    def _refill(self) -> None:
        """The next batch of draws (popped from the end, so kept reversed)."""
        mags = np.interp(self.rng.random(4096), QUANTILE_GRID, STRAGGLER_SLOWDOWN)
        self._buf = list(zip(mags.tolist(), self.rng.standard_exponential(4096).tolist(), strict=True))
        self._buf.reverse()


class DriftProcess:
    """Every ``drift_interval_s`` the factors take a multiplicative random-walk step.

    Scheduled on the host's clock as a process: a first, urgent step now that arms the first
    interval (events keep the order of the SimPy process this replaced)."""

    def __init__(self, host: Host, cfg: VariabilityConfig, factors: np.ndarray, rng: np.random.Generator) -> None:
        self.host, self.cfg, self.factors, self.rng = host, cfg, factors, rng
        host.env.schedule(0, self._wait, priority=URGENT)

    def _wait(self, _: object = None) -> None:
        self.host.env.schedule(self.cfg.drift_interval_s, self._step)

    def _step(self, _: object) -> None:
        self.factors = drift(self.factors, self.cfg.drift_sigma, self.rng)
        self.host.set_factors(self.factors)
        self._wait()


class FailureProcess:
    """Node ``node`` fails after an exponential time (mean ``mtbf_h``) and is repaired ``repair_s``
    later, again and again (a process on the host's clock, as :class:`DriftProcess`)."""

    def __init__(self, host: Host, cfg: FailureConfig, node: int, rng: np.random.Generator) -> None:
        assert cfg.mtbf_h is not None
        self.host, self.cfg, self.node, self.rng, self.mtbf_s = host, cfg, node, rng, cfg.mtbf_h * 3600.0
        host.env.schedule(0, self._up, priority=URGENT)

    def _up(self, _: object = None) -> None:
        self.host.env.schedule(self.rng.exponential(self.mtbf_s), self._fail)

    def _fail(self, _: object) -> None:
        self.host.fail_node(self.node, self.cfg.checkpoint_interval_s)
        self.host.env.schedule(self.cfg.repair_s, self._repair)

    def _repair(self, _: object) -> None:
        self.host.repair_node(self.node)
        self._up()
