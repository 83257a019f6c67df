"""The simulator's event queue fires events in SimPy's order (time, then priority, then scheduling
order), with SimPy's event times (``now + delay``), on a hand-built toy with ties."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

from gpusched_env.cluster.clock import URGENT, EventClock

EXPECTED = [
    (0, "p-init"), (0, "q-init"), (0, "z"), (0, "q"), (0, "q-again"),
    (1, "a"), (1, "b"), (1, "p"), (1, "a0"), (1, "p-again"),
    (1.1, "c"), (1.2, "d"), (1.2, "a2"), (1.2000000000000002, "c1"),
]
"""By hand: urgent process starts first; ties by scheduling order, events scheduled at their own
time after those already there; times are ``now + delay`` (1.1 + 0.1 is not 1.2)."""


def _simpy_log() -> list[tuple[float, str]]:
    simpy: Any = pytest.importorskip("simpy")  # the reference the clock replaced (a test-only import)
    env = simpy.Environment()
    log: list[tuple[float, str]] = []

    def note(name: str) -> None:
        log.append((env.now, name))

    def timeout(delay: float, name: str) -> None:
        env.timeout(delay).callbacks.append(lambda _e: fire(name))

    def fire(name: str) -> None:
        note(name)
        if name == "a":  # schedules at its own time: after everything already at t = 1
            timeout(0, "a0")
            timeout(0.2, "a2")  # 1 + 0.2
        if name == "c":
            timeout(0.1, "c1")  # 1.1 + 0.1 = 1.2000000000000002, not 1.2

    def proc(name: str, delay: float) -> Generator[Any, None, None]:
        note(f"{name}-init")
        yield env.timeout(delay)
        note(name)
        yield env.timeout(0)
        note(f"{name}-again")

    timeout(1, "a")
    timeout(1, "b")
    timeout(0, "z")
    env.process(proc("p", 1))  # urgent first step at 0: before "z", scheduled earlier
    timeout(1.1, "c")
    timeout(1.2, "d")
    env.process(proc("q", 0))
    env.run()
    return log


def _clock_log() -> list[tuple[float, str]]:
    clock = EventClock()
    log: list[tuple[float, str]] = []

    def note(name: str) -> None:
        log.append((clock.now, name))

    def fire(name: str) -> None:
        note(name)
        if name == "a":
            clock.schedule(0, fire, "a0")
            clock.schedule(0.2, fire, "a2")
        if name == "c":
            clock.schedule(0.1, fire, "c1")

    def proc_init(arg: tuple[str, float]) -> None:
        name, delay = arg
        note(f"{name}-init")
        clock.schedule(delay, proc_step, name)

    def proc_step(name: str) -> None:
        note(name)
        clock.schedule(0, note, f"{name}-again")

    clock.schedule(1, fire, "a")
    clock.schedule(1, fire, "b")
    clock.schedule(0, fire, "z")
    clock.schedule(0, proc_init, ("p", 1), URGENT)
    clock.schedule(1.1, fire, "c")
    clock.schedule(1.2, fire, "d")
    clock.schedule(0, proc_init, ("q", 0), URGENT)
    while clock.heap:
        clock.step()
    return log


def test_event_clock_order_and_times_by_hand() -> None:
    got = _clock_log()
    assert got == EXPECTED
    assert [type(t) for t, _ in got] == [type(t) for t, _ in EXPECTED]  # the clock starts at int 0, as SimPy's


def test_simpy_gives_the_same_order() -> None:
    """The hand-computed order is SimPy's (skipped where SimPy is not installed)."""
    log = _simpy_log()
    assert log == EXPECTED
    assert [type(t) for t, _ in log] == [type(t) for t, _ in EXPECTED]


def test_event_clock_peek_and_negative_delay() -> None:
    clock = EventClock()
    assert clock.peek() == float("inf")
    clock.schedule(2.5, lambda _a: None)
    assert clock.peek() == 2.5
    with pytest.raises(ValueError, match="negative delay"):
        clock.schedule(-1.0, lambda _a: None)
