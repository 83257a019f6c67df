"""The policy-facing seam of the device engine: which ready clients may hold SMs, and how.

At every event the engine asks the sharing mechanism for a :class:`Grant` per client. A mechanism is
any object with the :class:`Mechanism` methods; a new one is one new module in ``mechanisms/``. A
device-level scheduler (DARIS) or a Gymnasium env drives the same seam: its ``plan`` decides which
ready client launches next.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from gpusched_env.device.gpus import DeviceGpu
from gpusched_env.device.kernels import KernelSeq

ROLES = ("hp", "be")


@dataclass(frozen=True)
class ClientSpec:
    """One client of the GPU: an inference service (``arrivals`` set) or a training job (closed loop).

    ``priority``: higher is served first where a mechanism uses priorities. ``sm_cap``: MPS active
    thread percentage / 100, in (0, 1]. ``slo_s``: latency objective of an inference service.
    """

    name: str
    role: str  # hp (latency-critical) or be (best effort)
    seq: KernelSeq  # one request / one iteration
    arrivals: np.ndarray | None = None  # request arrival times, seconds (None = training)
    priority: int = 0
    sm_cap: float = 1.0
    slo_s: float | None = None

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"client role must be one of {ROLES}, got {self.role!r}")
        if not 0.0 < self.sm_cap <= 1.0:
            raise ValueError(f"client sm_cap must be in (0, 1], got {self.sm_cap}")
        if self.slo_s is not None and self.slo_s <= 0:
            raise ValueError(f"client slo_s must be in (0, inf), got {self.slo_s}")
        if self.arrivals is not None and np.any(np.diff(self.arrivals) < 0):
            raise ValueError("client arrivals must be non-decreasing")

    @property
    def is_service(self) -> bool:
        return self.arrivals is not None


@dataclass(frozen=True, slots=True)
class Grant:
    """What a mechanism allows one client now: hold SMs (``run``), at most ``cap`` of them, served in
    ``level`` order (lower first; equal levels share max-min fairly), progressing at ``slow`` × its
    rate (e.g. Tally's transform overhead)."""

    run: bool
    cap: float = 1.0
    level: int = 0
    slow: float = 1.0


IDLE, HOST, READY, RUN = 0, 1, 2, 3  # client phases: no work / host launching / on the GPU queue / holding SMs
# (ordered: ``phase >= READY`` is a kernel queued or running)


class ClientView(Protocol):
    """What a mechanism may read of a client (see :class:`engine.ClientState`)."""

    spec: ClientSpec
    phase: int
    idx: int  # current kernel in its sequence
    dur: list[float]  # spec.seq's arrays as lists (cheaper to index one entry): durations,
    sm: list[float]  # SM demands,
    block: list[float]  # block durations
    busy: list[float]  # busy shares (a group's kernel time over its span alone)
    remaining: float  # alone-time left of the current kernel, seconds
    alloc: float  # SM share held now
    idle_since: float  # when it last had no kernel queued or running (-1 while it has one)
    started: bool  # its current kernel has held SMs already (a queued one was preempted)
    seq_start: float  # when its current request / iteration began


class Mechanism(Protocol):
    """A sharing mechanism (fresh object per run: it may keep state)."""

    name: str

    def reset(self, clients: Sequence[ClientSpec], gpu: DeviceGpu) -> None:
        """Start of a run."""

    def plan(self, t: float, clients: Sequence[ClientView]) -> tuple[list[Grant], float]:
        """A grant per client and the time to be asked again even if nothing happens (inf = never)."""

    def launch_delay(self, t: float, i: int, displaced: Sequence[int], clients: Sequence[ClientView]) -> float:
        """Seconds client ``i``'s kernel waits for SMs held by ``displaced`` (preempted or shrunk) clients."""

    def on_launch(self, t: float, i: int, clients: Sequence[ClientView]) -> None:
        """Client ``i``'s kernel was queued (issued by its host)."""


class BaseMechanism:
    """Defaults: everyone runs at one level; a newcomer waits for the running blocks of the clients it
    displaces to end (the remaining time of their current block: blocks are never preempted). The grants of a
    mechanism that never changes them are built once per run (:meth:`grant`)."""

    name = "base"
    co_run = True  # kernels of different clients share the GPU at once (False: they take turns)

    def reset(self, clients: Sequence[ClientSpec], gpu: DeviceGpu) -> None:
        self.clients = tuple(clients)
        self.gpu = gpu
        self.grants = [self.grant(c) for c in clients]

    def grant(self, client: ClientSpec) -> Grant:
        """The fixed grant of ``client``."""
        return Grant(True, client.sm_cap)

    def plan(self, t: float, clients: Sequence[ClientView]) -> tuple[list[Grant], float]:
        return list(self.grants), float("inf")

    def launch_delay(self, t: float, i: int, displaced: Sequence[int], clients: Sequence[ClientView]) -> float:
        if not displaced:
            return 0.0
        if len(displaced) == 1:  # the max of one
            return remaining_block(clients[displaced[0]])
        return max(remaining_block(clients[j]) for j in displaced)

    def on_launch(self, t: float, i: int, clients: Sequence[ClientView]) -> None:
        return None


def remaining_block(c: ClientView, unit: float | None = None) -> float:
    """Time left in a client's running block (or in a ``unit`` of work, e.g. a slice): its kernel's
    blocks run back to back in waves, so the block under way is the progress so far modulo the block
    duration (progress in alone-time)."""
    b = c.block[c.idx] if unit is None else unit
    done = c.dur[c.idx] - c.remaining
    return b - done % b if done > 0 else b
