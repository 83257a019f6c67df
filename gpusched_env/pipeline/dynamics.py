"""What changes between iterations: slow links, slow GPUs and an RDMA NIC failure.

Iterations are counted from 0; an event covers iterations ``start <= i < end`` (``end`` < 0: to the
run's end). :func:`conditions` turns a workload's events into each iteration's link delays and
stage slowdowns; :func:`random_trace` draws a dynamic slow-link trace (the env's episodes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class LinkDelay:
    """Extra delay ``delay_ms`` (>= 0) per send on link ``link`` (stages link, link+1) over iterations."""

    link: int
    delay_ms: float
    start: int = 0
    end: int = -1


@dataclass(frozen=True)
class SlowGpu:
    """Stage ``stage`` runs ``factor`` (>= 1) times slower over iterations (a GPU straggler)."""

    stage: int
    factor: float
    start: int = 0
    end: int = -1


@dataclass(frozen=True)
class NicFailure:
    """The RDMA NIC behind link ``link`` fails at iteration ``at`` and stays down for the run."""

    link: int
    at: int


@dataclass(frozen=True)
class Workload:
    """One case of a pipeline scenario: ``iterations`` iterations under the listed events."""

    name: str
    iterations: int = 20
    link_delays: list[LinkDelay] = field(default_factory=list)
    slow_gpus: list[SlowGpu] = field(default_factory=list)
    nic_failure: NicFailure | None = None

    def __post_init__(self) -> None:
        if self.iterations < 1:
            raise ValueError(f"workload {self.name}: iterations must be >= 1, got {self.iterations}")

    def validate(self, stages: int) -> None:
        """Raise ``ValueError`` naming the field if an event points outside the pipeline."""
        links = [e.link for e in self.link_delays] + ([self.nic_failure.link] if self.nic_failure else [])
        for link in links:
            if not 0 <= link <= stages - 2:
                raise ValueError(f"workload {self.name}: link must be in 0..{stages - 2}, got {link}")
        for e in self.link_delays:
            if not 0 <= e.delay_ms < math.inf:
                raise ValueError(f"workload {self.name}: delay_ms must be finite and >= 0, got {e.delay_ms}")
        for g in self.slow_gpus:
            if not 0 <= g.stage <= stages - 1 or not 1.0 <= g.factor < math.inf:
                raise ValueError(f"workload {self.name}: slow_gpus needs stage in 0..{stages - 1} and "
                                 f"a finite factor >= 1, got stage {g.stage} factor {g.factor}")
        for k, e in enumerate(self.link_delays):
            self._check_window(f"link_delays[{k}]", e.start, e.end)
        for k, g in enumerate(self.slow_gpus):
            self._check_window(f"slow_gpus[{k}]", g.start, g.end)
        if self.nic_failure is not None and not 0 <= self.nic_failure.at < self.iterations:
            raise ValueError(f"workload {self.name}: nic_failure.at must be an iteration in 0..{self.iterations - 1} "
                             f"(the run has {self.iterations}), got {self.nic_failure.at}")

    def _check_window(self, where: str, start: int, end: int) -> None:
        """An event's iterations ``start <= i < end`` (``end`` < 0: to the run's end) must meet the run."""
        if not 0 <= start < self.iterations:
            raise ValueError(f"workload {self.name}: {where}.start must be an iteration in 0..{self.iterations - 1} "
                             f"(the run has {self.iterations}), got {start}")
        if end >= 0 and end <= start:
            raise ValueError(f"workload {self.name}: {where}.end must be > start ({start}) or -1 (to the run's "
                             f"end), got {end}")


def _covers(start: int, end: int, i: int) -> bool:
    return start <= i and (end < 0 or i < end)


def conditions(wl: Workload, i: int, stages: int, host_path_ms: float | None) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Link delays and stage slowdowns at iteration ``i``. ``host_path_ms``: the extra delay of a
    link whose NIC has failed when sends fall back to the host path (CPU-delegated); None when a
    failure is handled by a restart instead (GPU-driven), after which the link is healthy."""
    delay = [0.0] * (stages - 1)
    for e in wl.link_delays:
        if _covers(e.start, e.end, i):
            delay[e.link] += e.delay_ms
    nic = wl.nic_failure
    if nic is not None and host_path_ms is not None and i >= nic.at:
        delay[nic.link] += host_path_ms
    slow = [1.0] * stages
    for g in wl.slow_gpus:
        if _covers(g.start, g.end, i):
            slow[g.stage] *= g.factor
    return tuple(delay), tuple(slow)


def random_trace(rng: np.random.Generator, stages: int, iterations: int, delays_ms: list[float],
                 change_prob: float) -> Workload:
    """A dynamic slow-link trace: each iteration, with probability ``change_prob``, one link (uniform)
    gets a delay drawn from ``delays_ms`` (0 heals it); delays hold until changed."""
    current = [0.0] * (stages - 1)
    since = [0] * (stages - 1)
    events: list[LinkDelay] = []
    for i in range(1, iterations):
        if rng.random() < change_prob:
            link = int(rng.integers(stages - 1))
            new = float(delays_ms[int(rng.integers(len(delays_ms)))])
            if new != current[link]:
                if current[link] > 0:
                    events.append(LinkDelay(link, current[link], since[link], i))
                current[link], since[link] = new, i
    events += [LinkDelay(k, d, since[k], -1) for k, d in enumerate(current) if d > 0]
    return Workload(name="random", iterations=iterations, link_delays=events)
