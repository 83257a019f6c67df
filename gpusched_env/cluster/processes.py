"""The cluster's stochastic processes: transient stragglers, slow drift of the variability
factors, and node failures with repair. Each draws from its own child stream of the run's seed."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Protocol

import numpy as np
from numba import njit

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
    scheduled in), not events of the host's clock: most toggle GPUs that hold no job, which changes
    nothing but the GPU's factor, so the host merges the timeline into its event loop with
    :meth:`run_before` and handles only the toggles that touch jobs itself. The draws are taken in
    toggle order, so the result is the same as toggles run as events in time order. The timeline
    runs in a compiled loop (:func:`_run_toggles`) that returns only at a toggle of a GPU holding
    jobs; its state is kept in arrays (heap, per-GPU flags, factors noted while idle, draws).
    """

    def __init__(self, host: Host, cfg: StragglerConfig, n_gpus: int, rng: np.random.Generator) -> None:
        frac = min(0.99, STRAGGLER_FRACTION * cfg.fraction_scale)
        self.host, self.rng = host, rng
        self.mean_on = STRAGGLER_EPISODE_SAMPLES * cfg.sample_s
        self.mean_off = self.mean_on * (1 - frac) / frac
        self.n_gpus = n_gpus
        # per GPU: row 0 heap times, row 1 slowed (0/1), row 2 factor noted while idle (NaN: none)
        self._gf = np.zeros((3, n_gpus))
        self._gf[2] = np.nan
        # heap payload: row 0 order scheduled, row 1 GPU, row 2 the toggle turns a slowdown on (0/1)
        self._gi = np.zeros((3, n_gpus), dtype=np.int64)
        self._draws = np.zeros((2, 0))  # row 0 slowdown magnitudes, row 1 standard exponentials
        self._st = np.zeros(3, dtype=np.int64)  # next order to schedule, next draw, GPUs noted
        self._means = np.array([self.mean_on, self.mean_off])
        now = float(host.env.now)
        first: list[tuple[float, int, int, int]] = []
        for g in range(n_gpus):  # a normal period begins on each GPU (not slowed: no factor)
            _, exp = self._draw()
            first.append((now + exp * self.mean_off, g, g, 1))
        first.sort()  # a sorted array is a heap
        for i, (t, seq, g, on) in enumerate(first):
            self._gf[0, i] = t
            self._gi[:, i] = (seq, g, on)
        self._st[0] = n_gpus
        self.next_t = first[0][0] if first else math.inf
        """Time of the next toggle."""

    @property
    def slowed(self) -> list[bool]:
        """Per GPU: in a straggling period with a slowdown other than 1."""
        return [bool(x) for x in self._gf[1]]

    @property
    def stale(self) -> dict[int, float]:
        """GPU -> factor noted while it held no job, not yet told to the host."""
        f = self._gf[2]
        return {int(g): float(f[g]) for g in np.flatnonzero(~np.isnan(f))}

    def run_before(
        self, limit: float, n_resident: np.ndarray, apply: Callable[[float, int, float], float],
    ) -> None:
        """Run the toggles due before ``limit`` in order. A toggle of a GPU that holds no job
        (``n_resident[g]`` 0) changes nothing but the GPU's factor: it is only noted, and the host
        learns it from :meth:`flush` before a job starts there. A toggle of a GPU that holds jobs
        is handed to the host, ``apply(time, GPU, factor)``, which applies it at that time and
        returns the new limit (it may arm events before ``limit``)."""
        if not self.n_gpus:
            return
        gf, gi, means, st = self._gf, self._gi, self._means, self._st
        limit = float(limit)  # (the clock starts at the integer 0: one compiled signature)
        while True:
            status, t, g, factor = _run_toggles(limit, n_resident, gf, gi, self._draws, means, st)
            if status == _DONE:
                self.next_t = t
                return
            if status == _REFILL:
                self._refill()
                continue
            limit = float(apply(t, g, factor))

    def flush(self, gpus: Iterable[int], apply: Callable[[int, float], None]) -> None:
        """Tell the host (``apply(g, factor)``) the factors of ``gpus`` noted while they were idle."""
        st = self._st
        if st[2]:
            noted = self._gf[2]
            for g in gpus:
                factor = noted[g]
                if factor == factor:  # not NaN
                    noted[g] = math.nan
                    st[2] -= 1
                    apply(g, float(factor))

    def flush_all(self, apply: Callable[[int, float], None]) -> None:
        """:meth:`flush` for every GPU (in GPU order)."""
        self.flush(np.flatnonzero(~np.isnan(self._gf[2])).tolist(), apply)

    def _draw(self) -> tuple[float, float]:
        """The next (slowdown magnitude, standard exponential)."""
        st, d = self._st, self._draws
        if st[1] == d.shape[1]:
            self._refill()
            d = self._draws
        i = int(st[1])
        st[1] = i + 1
        return float(d[0, i]), float(d[1, i])

    def _refill(self) -> None:
        """The next batch of draws of the stream, taken in order."""
        mags = np.interp(self.rng.random(4096), QUANTILE_GRID, STRAGGLER_SLOWDOWN)
        self._draws = np.stack([mags, self.rng.standard_exponential(4096)])
        self._st[1] = 0


_DONE, _REFILL, _HIT = 0, 1, 2


@njit(cache=True, nogil=True)
def _run_toggles(limit, n_resident, gf, gi, draws, means, st):  # pragma: no cover (compiled)
    """The toggles due before ``limit``, in (time, order scheduled) order, each replaced on the
    heap by its GPU's next one: a GPU's straggling period (mean ``means[0]``) or normal period
    (``means[1]``) of a standard exponential draw; a straggling period takes the slowdown
    magnitude drawn with it. Returns ``(_HIT, time, GPU, factor)`` at the first toggle that changes
    the factor of a GPU holding jobs (``n_resident``), ``(_REFILL, ...)`` when the draws run out
    (nothing taken), else ``(_DONE, time of the next toggle, -1, 0.0)``; factors of idle GPUs are
    noted in ``gf[2]`` (``st[2]`` counts them)."""
    ht, slowed, noted = gf[0], gf[1], gf[2]
    hseq, hg, hon = gi[0], gi[1], gi[2]
    n = ht.shape[0]
    nd = draws.shape[1]
    while True:
        t = ht[0]
        if t >= limit:
            return _DONE, t, -1, 0.0
        k = st[1]
        if k == nd:
            return _REFILL, t, -1, 0.0
        mag, exp = draws[0, k], draws[1, k]
        st[1] = k + 1
        g = hg[0]
        on = hon[0]
        changes = True  # False: a normal period begins on a GPU that was not slowed
        factor = 1.0
        if on:
            slowed[g] = 1.0 if mag != 1.0 else 0.0
            factor = mag
            delay = exp * means[0]
        else:
            changes = slowed[g] != 0.0
            slowed[g] = 0.0
            delay = exp * means[1]
        # replace the top by (t + delay, order, g, not on) and sift it down
        nt, ns = t + delay, st[0]
        st[0] = ns + 1
        non = 1 - on
        i = 0
        while True:
            c = 2 * i + 1
            if c >= n:
                break
            r = c + 1
            if r < n and (ht[r] < ht[c] or (ht[r] == ht[c] and hseq[r] < hseq[c])):
                c = r
            if ht[c] < nt or (ht[c] == nt and hseq[c] < ns):
                ht[i], hseq[i], hg[i], hon[i] = ht[c], hseq[c], hg[c], hon[c]
                i = c
            else:
                break
        ht[i], hseq[i], hg[i], hon[i] = nt, ns, g, non
        if not changes:
            continue
        if n_resident[g] > 0:
            return _HIT, t, g, factor
        if noted[g] != noted[g]:
            st[2] += 1
        noted[g] = factor


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
