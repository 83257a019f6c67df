"""Limits and progress of one simulator run: a run that would go on for ever stops with a one-line
error naming the limit's config key, and a caller can watch simulated time and finished jobs.

The simulator calls :meth:`Watch.instant` once per event instant (all events at one simulated time);
the cheap path is one counter increment, the rest runs every :data:`CHECK_EVERY` instants.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from gpusched_env.config_util import ConfigError

CHECK_EVERY = 256
"""Event instants between two checks of the wall clock (and the event budget)."""

REPORT_EVERY_S = 0.5
"""Wall seconds between two progress reports of a run."""


@dataclass(frozen=True)
class RunLimits:
    """``max_events_per_job`` and ``max_wall_s`` of conf/bench.yaml; None = no limit."""

    max_events_per_job: int | None = 20_000  # event instants per job of the run (tracked or background)
    max_wall_s: float | None = 1800.0  # wall-clock seconds per run

    def __post_init__(self) -> None:
        m, w = self.max_events_per_job, self.max_wall_s
        if m is not None and (isinstance(m, bool) or not isinstance(m, int) or m < 1):
            raise ConfigError(f"max_events_per_job: must be an integer >= 1 or null (no limit), got {m!r}")
        if w is not None and (isinstance(w, bool) or not isinstance(w, (int, float)) or not w > 0
                              or w == float("inf")):
            raise ConfigError(f"max_wall_s: must be a finite number of seconds > 0 or null (no limit), got {w!r}")


class RunLimitExceeded(ConfigError):
    """A run passed one of its :class:`RunLimits`; the message names the key, the run and why."""


@dataclass(frozen=True)
class RunProgress:
    """Where a running simulation is: simulated seconds, tracked jobs finished and in all, wall seconds."""

    sim_s: float
    finished: int
    jobs: int
    wall_s: float


class Watch:
    """Counts a run's event instants, enforces ``limits`` and reports progress every ``every_s``
    wall seconds to ``report``. ``jobs``: the tracked jobs (progress counts them); ``all_jobs``:
    every job, background included (the event budget; default ``jobs``). ``label`` names the run in
    errors (e.g. ``las seed 0 on synthetic_small``)."""

    def __init__(
        self, limits: RunLimits, jobs: int, label: str,
        report: Callable[[RunProgress], None] | None = None, every_s: float | None = None,
        all_jobs: int | None = None,
    ) -> None:
        self.limits, self.jobs, self.label = limits, jobs, label
        per_job = limits.max_events_per_job
        self.max_events = None if per_job is None else per_job * max(1, jobs if all_jobs is None else all_jobs)
        self.report = report
        self.every_s = REPORT_EVERY_S if every_s is None else every_s
        self.events = 0
        self._next_check = CHECK_EVERY
        self._t0 = time.perf_counter()
        self._next_report = self._t0 + self.every_s

    def instant(self, now: float, left: int) -> None:
        """One event instant at simulated time ``now`` with ``left`` tracked jobs unfinished."""
        self.events += 1
        if self.events >= self._next_check:
            self._next_check += CHECK_EVERY
            self._check(now, left)

    def _check(self, now: float, left: int) -> None:
        wall = time.perf_counter() - self._t0
        where = (f"at simulated time {now:.4g} s with {left} of {self.jobs} jobs unfinished "
                 f"({self.events:,} event instants, {wall:.0f} s wall)")
        if self.max_events is not None and self.events >= self.max_events:
            raise RunLimitExceeded(
                f"max_events_per_job: {self.label} stopped {where}: more than "
                f"{self.limits.max_events_per_job:,} event instants per job (a run that may never end, e.g. "
                "round ticks or failures far from any progress); raise max_events_per_job or set it to null")
        if self.limits.max_wall_s is not None and wall >= self.limits.max_wall_s:
            raise RunLimitExceeded(
                f"max_wall_s: {self.label} stopped {where}: it ran longer than {self.limits.max_wall_s:g} s "
                "of wall time; raise max_wall_s or set it to null")
        if self.report is not None and wall + self._t0 >= self._next_report:
            self._next_report = wall + self._t0 + self.every_s
            self.report(RunProgress(float(now), self.jobs - left, self.jobs, wall))
