"""The cluster's stochastic processes: transient stragglers, slow drift of the variability
factors, and node failures with repair. Each draws from its own child stream of the run's seed."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any, Protocol

import numpy as np
from numba import njit

from gpusched_env.cluster.clock import URGENT, EventClock
from gpusched_env.cluster.model import FailureConfig, StragglerConfig
from gpusched_env.cluster.variability import VariabilityConfig, drift
from gpusched_env.compiled import entry_point
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


_BATCH = 4096
"""Draws taken from the stream at a time."""
_HITS = 64
"""Toggles of GPUs holding jobs handed to the host per compiled call, at most."""


class Stragglers:
    """Each GPU alternates normal and straggling periods of exponential length (see
    :class:`~gpusched_env.cluster.model.StragglerConfig`).

    The toggles are a timeline of their own (a heap ordered by time, then by the order they were
    scheduled in), not events of the host's clock: most toggle GPUs that hold no job, which changes
    nothing but the GPU's factor, so the host merges the timeline into its event loop with
    :meth:`run_before` and handles only the toggles that touch jobs itself. The draws are taken in
    toggle order, so the result is the same as toggles run as events in time order. The timeline
    runs in a compiled loop (:func:`_run_toggles`) that hands the host the toggles of GPUs holding
    jobs in batches. Its state is one float array (one argument: a compiled call's cost grows with
    its arguments), in blocks of ``n`` GPUs: heap times, heap orders, heap GPUs, heap "turns on"
    (0/1), per GPU slowed (0/1) and the factor noted while idle (NaN: none); then the two period
    means, the next order, the next draw, the count of noted factors; then the draws (magnitudes,
    then standard exponentials); then a copy of the state as the batch began; then the batch's
    toggles for the host (time, GPU, factor). Integers stored as floats are exact (below 2**53).
    """

    def __init__(self, host: Host, cfg: StragglerConfig, n_gpus: int, rng: np.random.Generator) -> None:
        frac = min(0.99, STRAGGLER_FRACTION * cfg.fraction_scale)
        self.host, self.rng = host, rng
        self.mean_on = STRAGGLER_EPISODE_SAMPLES * cfg.sample_s
        self.mean_off = self.mean_on * (1 - frac) / frac
        n = self.n_gpus = n_gpus
        m = 6 * n + 5  # the state (before the draws)
        s = self._s = np.zeros(2 * m + 2 * _BATCH + 3 * _HITS)
        self._hits_at = 2 * m + 2 * _BATCH
        self._heap_t, self._heap_seq, self._heap_g, self._heap_on = s[:n], s[n : 2 * n], s[2 * n : 3 * n], s[3 * n : 4 * n]
        self._slowed, self._noted = s[4 * n : 5 * n], s[5 * n : 6 * n]
        self._noted[:] = np.nan
        # memoryviews of the same floats: indexing them gives and takes Python floats (no numpy scalars)
        self._noted_v: Any = self._noted.data
        self._count_v: Any = s[6 * n + 4 : 6 * n + 5].data
        self._scalars = s[6 * n : 6 * n + 5]  # mean_on, mean_off, next order, next draw, noted count
        self._scalars[:2] = self.mean_on, self.mean_off
        self._scalars[3] = _BATCH  # no draws yet
        self._draws = s[m : m + 2 * _BATCH]
        now = float(host.env.now)
        first: list[tuple[float, int]] = []
        for g in range(n):  # a normal period begins on each GPU (not slowed: no factor)
            _, exp = self._draw()
            first.append((now + exp * self.mean_off, g))  # (time, order scheduled = g)
        first.sort()  # a sorted array is a heap
        for i, (t, g) in enumerate(first):
            self._heap_t[i], self._heap_seq[i], self._heap_g[i], self._heap_on[i] = t, g, g, 1.0
        self._scalars[2] = n
        self.next_t = first[0][0] if first else math.inf
        """Time of the next toggle."""
        # _run_toggles' compiled function for the n_resident array it was last given (and this
        # state), called without the dispatcher's type look-up (:func:`gpusched_env.compiled.entry_point`)
        self._run: Callable[..., tuple[int, int, float, float]] | None = None
        self._run_for: np.ndarray | None = None

    @property
    def slowed(self) -> list[bool]:
        """Per GPU: in a straggling period with a slowdown other than 1."""
        return [bool(x) for x in self._slowed]

    @property
    def stale(self) -> dict[int, float]:
        """GPU -> factor noted while it held no job, not yet told to the host."""
        f = self._noted
        return {int(g): float(f[g]) for g in np.flatnonzero(~np.isnan(f))}

    def run_before(
        self, limit: float, n_resident: np.ndarray, apply: Callable[[float, int, float], float],
    ) -> None:
        """Run the toggles due before ``limit`` in order. A toggle of a GPU that holds no job
        (``n_resident[g]`` 0) changes nothing but the GPU's factor: it is only noted, and the host
        learns it from :meth:`flush` before a job starts there. A toggle of a GPU that holds jobs
        is handed to the host, ``apply(time, GPU, factor)``, which applies it at that time and
        returns the new limit (it may arm events before ``limit``). :meth:`run_batches` with the
        toggles handed over one at a time."""

        def batch(hits: list[float], limit: float, last_t: float) -> tuple[int, float]:
            for i in range(0, len(hits), 3):
                new = float(apply(hits[i], int(hits[i + 1]), hits[i + 2]))
                if new < limit:
                    limit = new
                    if last_t >= limit:
                        return i // 3 + 1, limit
            return -1, limit

        self.run_batches(limit, n_resident, batch)

    def run_batches(
        self, limit: float, n_resident: np.ndarray, apply_batch: Callable[[list[float], float, float], tuple[int, float]],
    ) -> None:
        """:meth:`run_before` with the toggles of GPUs holding jobs handed to the host a batch at a
        time: ``apply_batch(hits, limit, last_t)`` applies ``hits`` (time, GPU, factor, ... as
        floats) in order and returns ``(-1, limit)``, the limit as the toggles moved it (each may
        arm events before it), or ``(k, limit)`` when the ``k``-th toggle moved the limit to or
        before ``last_t`` (the time of the last toggle the loop ran), the rest not applied.

        The compiled loop runs ahead to ``limit`` and hands over a batch of such toggles; when one
        of them moves the limit below a toggle the loop already ran, the loop starts the batch
        again from its copy, passes over the toggles already handed over (the same toggles: the
        residents do not change meanwhile) and goes on to the new limit."""
        if not self.n_gpus:
            return
        s, at = self._s, self._hits_at
        limit = float(limit)  # (the clock starts at the integer 0: one compiled signature)
        skip = 0  # toggles of the batch already handed over (when it is run again)
        run: Any = self._run
        fresh = run is None or self._run_for is not n_resident
        if fresh:  # first through the dispatcher
            run = _run_toggles
        while True:
            status, n, next_t, last_t = run(limit, n_resident, s, skip)
            if fresh:  # compiled for these argument types now: called directly from here on
                run = self._run = entry_point(_run_toggles, (limit, n_resident, s, skip))
                self._run_for, fresh = n_resident, False
            if n:
                k, limit = apply_batch(s[at : at + 3 * n].tolist(), limit, last_t)
                if k >= 0:  # the loop ran toggles due after the new limit: again
                    skip += k
                    continue
            if status == _DONE:
                self.next_t = next_t
                return
            if status == _REFILL:
                self._refill()
            skip = 0  # (a full batch, or new draws: the next batch starts here)

    def flush(self, gpus: Iterable[int], apply: Callable[[int, float], None]) -> None:
        """Tell the host (``apply(g, factor)``) the factors of ``gpus`` noted while they were idle."""
        count = self._count_v
        if count[0]:
            noted = self._noted_v
            for g in gpus:
                factor = noted[g]
                if factor == factor:  # not NaN
                    noted[g] = math.nan
                    count[0] -= 1
                    apply(g, factor)

    def flush_all(self, apply: Callable[[int, float], None]) -> None:
        """:meth:`flush` for every GPU (in GPU order)."""
        self.flush(np.flatnonzero(~np.isnan(self._noted)).tolist(), apply)

    def _draw(self) -> tuple[float, float]:
        """The next (slowdown magnitude, standard exponential)."""
        sc = self._scalars
        if sc[3] == _BATCH:
            self._refill()
        i = int(sc[3])
        sc[3] = i + 1
        return float(self._draws[i]), float(self._draws[_BATCH + i])

    def _refill(self) -> None:
        """The next batch of draws of the stream, taken in order."""
        d = self._draws
        d[:_BATCH] = np.interp(self.rng.random(_BATCH), QUANTILE_GRID, STRAGGLER_SLOWDOWN)
        d[_BATCH:] = self.rng.standard_exponential(_BATCH)
        self._scalars[3] = 0


_DONE, _REFILL, _FULL = 0, 1, 2


@njit(cache=True, nogil=True)
def _run_toggles(limit, n_resident, s, skip):  # pragma: no cover (compiled)
    """The toggles due before ``limit``, in (time, order scheduled) order, each replaced on the
    heap by its GPU's next one: a straggling period (mean ``mean_on``) or a normal period
    (``mean_off``) of a standard exponential draw; a straggling period takes the slowdown magnitude
    drawn with it. ``s`` is :class:`Stragglers`' state. The factors of idle GPUs are noted; the
    toggles that change the factor of a GPU holding jobs (``n_resident``) are written for the host
    as (time, GPU, factor). With ``skip`` 0 a batch begins (the state is copied first); else the
    state is set back to the copy and the first ``skip`` such toggles are run again without being
    written (and without the limit). Returns (status, toggles written, time of the next toggle,
    time of the last toggle run); status ``_DONE`` (the next toggle is not before ``limit``),
    ``_REFILL`` (the draws ran out) or ``_FULL`` (:data:`_HITS` written)."""
    n = n_resident.shape[0]
    m = 6 * n + 5
    ht, hseq, hg, hon = s[:n], s[n : 2 * n], s[2 * n : 3 * n], s[3 * n : 4 * n]
    slowed, noted, sc = s[4 * n : 5 * n], s[5 * n : 6 * n], s[6 * n : m]
    mags, exps = s[m : m + _BATCH], s[m + _BATCH : m + 2 * _BATCH]
    copy = s[m + 2 * _BATCH : 2 * m + 2 * _BATCH]
    hits = s[2 * m + 2 * _BATCH :]
    if skip == 0:
        copy[:] = s[:m]
    else:
        s[:m] = copy
    mean_on, mean_off = sc[0], sc[1]
    seen = 0  # toggles of GPUs holding jobs since the batch began
    nh = 0
    last = -np.inf
    while True:
        t = ht[0]
        if seen >= skip:
            if t >= limit:
                return _DONE, nh, t, last
            if nh == _HITS:
                return _FULL, nh, t, last
        k = int(sc[3])
        if k == _BATCH:
            return _REFILL, nh, t, last
        mag, exp = mags[k], exps[k]
        sc[3] = k + 1
        g = int(hg[0])
        on = hon[0] != 0.0
        changes = True  # False: a normal period begins on a GPU that was not slowed
        factor = 1.0
        if on:
            slowed[g] = 1.0 if mag != 1.0 else 0.0
            factor = mag
            delay = exp * mean_on
        else:
            changes = slowed[g] != 0.0
            slowed[g] = 0.0
            delay = exp * mean_off
        # replace the top by (t + delay, order, g, not on) and sift it down
        nt, ns = t + delay, sc[2]
        sc[2] = ns + 1.0
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
        ht[i], hseq[i], hg[i], hon[i] = nt, ns, g, 0.0 if on else 1.0
        last = t
        if not changes:
            continue
        if n_resident[g] > 0:
            seen += 1
            if seen > skip:
                hits[3 * nh], hits[3 * nh + 1], hits[3 * nh + 2] = t, g, factor
                nh += 1
            continue
        if noted[g] != noted[g]:
            sc[4] += 1.0
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
