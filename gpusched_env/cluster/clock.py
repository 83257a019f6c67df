"""The simulator's event queue: a plain heap of (time, priority, order, callback, argument).

It keeps the order of the SimPy environment it replaced, so that runs stay the same float for float:
events fire by time, then by priority (:data:`URGENT` before :data:`NORMAL`: SimPy starts a
process with an urgent event and times everything else as normal), then in the order they were
scheduled. An event's time is ``now + delay`` computed when it is scheduled, as SimPy computes it.
Each event is one tuple and one call, without SimPy's Event, Timeout and callback-list objects.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from typing import Any

URGENT = 0
"""Priority of a process's first step (SimPy's ``Initialize``)."""
NORMAL = 1
"""Priority of every other event (SimPy's ``Timeout``)."""


class EventClock:
    """Simulated time ``now`` and the events still to fire.

    ``now`` starts at the integer 0, as SimPy's clock does; it is a public attribute: the owner may
    move it forward to a time before :meth:`peek` (the simulator runs straggler toggles, a timeline
    of their own, at their times)."""

    __slots__ = ("now", "heap", "order")

    def __init__(self) -> None:
        self.now: float = 0
        self.heap: list[tuple[Any, ...]] = []  # (time, priority, order, callback, argument)
        self.order = 0  # scheduling order of the next event

    def peek(self) -> float:
        """Time of the next event (infinity when none is left)."""
        return self.heap[0][0] if self.heap else math.inf

    def schedule(self, delay: float, callback: Callable[[Any], object], arg: Any = None, priority: int = NORMAL) -> None:
        """Call ``callback(arg)`` at ``now + delay`` (``delay`` >= 0)."""
        if delay < 0:
            raise ValueError(f"event clock: negative delay {delay}")
        heapq.heappush(self.heap, (self.now + delay, priority, self.order, callback, arg))
        self.order += 1

    def step(self) -> None:
        """Fire the next event: move ``now`` to its time and call its callback."""
        t, _, _, callback, arg = heapq.heappop(self.heap)
        self.now = t
        callback(arg)
