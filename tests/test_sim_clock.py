"""The simulator's event queue fires events in SimPy's order (time, then priority, then scheduling
order), with SimPy's event times (``now + delay``), on a hand-built toy with ties."""

from __future__ import annotations

from collections.abc import Generator

import pytest
import simpy

from gpusched_env.cluster.clock import URGENT, EventClock


def _simpy_log() -> list[tuple[float, str]]:
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

    def proc(name: str, delay: float) -> Generator[simpy.Event, None, None]:
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


def test_event_clock_keeps_simpy_order_and_times() -> None:
    expected = [
        (0, "p-init"), (0, "q-init"), (0, "z"), (0, "q"), (0, "q-again"),
        (1, "a"), (1, "b"), (1, "p"), (1, "a0"), (1, "p-again"),
        (1.1, "c"), (1.2, "d"), (1.2, "a2"), (1.2000000000000002, "c1"),
    ]
    assert _simpy_log() == expected
    got = _clock_log()
    assert got == expected
    assert [type(t) for t, _ in got] == [type(t) for t, _ in _simpy_log()]  # int 0 stays int, as SimPy's


def test_event_clock_peek_and_negative_delay() -> None:
    clock = EventClock()
    assert clock.peek() == float("inf")
    clock.schedule(2.5, lambda _a: None)
    assert clock.peek() == 2.5
    with pytest.raises(ValueError, match="negative delay"):
        clock.schedule(-1.0, lambda _a: None)
