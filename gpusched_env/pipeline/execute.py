"""Run one iteration of a fixed per-stage operation order: event-driven, no clock ticks.

Each operation starts at max(its stage is free, its input has arrived). Forward outputs go to
the next stage and backward (input-gradient) outputs to the previous one over the link between
them; a send arrives ``p2p_ms + link delay`` after the operation ends. GPU-driven sends keep the
sender's stream busy until delivered; CPU-delegated sends leave it free at once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpusched_env.pipeline.model import PipelineModel
from gpusched_env.pipeline.ops import Orders

INF = math.inf

Timeline = tuple[tuple[int, int, int, float, float], ...]
"""(stage, kind, micro-batch, start ms, end ms) of every operation."""


@dataclass(frozen=True, slots=True)
class IterationResult:
    """What one iteration took.

    Attributes:
        iteration_ms: pipeline makespan + per-iteration overhead.
        makespan_ms: from the first forward to the last operation.
        busy_ms: per-stage compute time.
        bubble_fraction: per-stage 1 - busy / makespan (blocked sends count as bubble).
        send_blocked_ms: per-stage time the stream spent waiting for its own sends (GPU-driven).
        peak_activations: per-stage most micro-batches held at once (F started, W not done).
        timeline: every operation's (stage, kind, mb, start, end) when recorded, else empty.
    """

    iteration_ms: float
    makespan_ms: float
    busy_ms: tuple[float, ...]
    bubble_fraction: tuple[float, ...]
    send_blocked_ms: tuple[float, ...]
    peak_activations: tuple[int, ...]
    timeline: Timeline = ()


def execute(model: PipelineModel, orders: Orders, scale: list[list[list[float]]] | None = None,
            record: bool = False) -> IterationResult:
    """Run ``orders`` under ``model``; ``scale[kind][stage][mb]`` multiplies an op's time (jitter).

    Raises ``ValueError`` if an order exceeds ``model.activation_limit`` and ``RuntimeError`` if the
    orders deadlock (an operation waits on one that its stage's order puts later).
    """
    S, M = model.stages, model.microbatches
    st = _State(S, M)
    dur = model.durations()
    remaining = sum(len(o) for o in orders)
    while remaining:
        progressed = 0
        for s in range(S):
            n = _advance(model, st, s, orders[s], dur, scale, record)
            progressed += n
        if not progressed:
            raise RuntimeError(f"orders deadlock with {remaining} operations left (stage pointers {st.ptr})")
        remaining -= progressed
    makespan = max(st.free)
    bubble = tuple(1.0 - b / makespan if makespan > 0 else 0.0 for b in st.busy)
    return IterationResult(
        iteration_ms=makespan + model.overhead_ms, makespan_ms=makespan, busy_ms=tuple(st.busy),
        bubble_fraction=bubble, send_blocked_ms=tuple(st.blocked), peak_activations=tuple(st.peak),
        timeline=tuple(st.timeline),
    )


class _State:
    """Mutable per-iteration arrays of :func:`execute` (arrival and end times, counters)."""

    def __init__(self, S: int, M: int) -> None:
        self.f_in = [[0.0] * M] + [[INF] * M for _ in range(S - 1)]  # forward input arrival
        self.b_in = [[INF] * M for _ in range(S)]  # gradient arrival (last stage: its own F end)
        self.b_end = [[INF] * M for _ in range(S)]
        self.free = [0.0] * S
        self.ptr = [0] * S
        self.busy = [0.0] * S
        self.blocked = [0.0] * S
        self.act = [0] * S
        self.peak = [0] * S
        self.timeline: list[tuple[int, int, int, float, float]] = []


def _advance(model: PipelineModel, st: _State, s: int, order: tuple[int, ...], dur, scale, record) -> int:
    """Run stage ``s``'s next operations while their inputs are known; return how many ran."""
    M, last = model.microbatches, model.stages - 1
    fd, bd, wd = dur[0][s], dur[1][s], dur[2][s]
    gpu = model.comm == "gpu"
    p2p = model.p2p_ms
    d_next = model.link_delay_ms[s] + p2p if s < last else 0.0
    d_prev = model.link_delay_ms[s - 1] + p2p if s > 0 else 0.0
    f_in, b_in, b_end = st.f_in[s], st.b_in[s], st.b_end[s]
    t, i, n0, act, peak, busy, blocked = st.free[s], st.ptr[s], st.ptr[s], st.act[s], st.peak[s], 0.0, 0.0
    limit = model.activation_limit
    n = len(order)
    while i < n:
        kind, m = divmod(order[i], M)
        ready = f_in[m] if kind == 0 else b_in[m] if kind == 1 else b_end[m]
        if ready == INF:
            break
        start = t if t > ready else ready
        d = fd if kind == 0 else bd if kind == 1 else wd
        if scale is not None:
            d *= scale[kind][s][m]
        t = start + d
        busy += d
        if record:
            st.timeline.append((s, kind, m, start, t))
        if kind == 0:
            act += 1
            if act > limit:
                raise ValueError(f"order of stage {s} holds {act} micro-batches, over activation_limit {limit}")
            peak = act if act > peak else peak
            if s < last:
                st.f_in[s + 1][m] = t + d_next
                if gpu:
                    blocked += d_next
                    t += d_next
            else:
                b_in[m] = t
        elif kind == 1:
            b_end[m] = t
            if s > 0:
                st.b_in[s - 1][m] = t + d_prev
                if gpu:
                    blocked += d_prev
                    t += d_prev
        else:
            act -= 1
        i += 1
    st.free[s], st.ptr[s], st.act[s], st.peak[s] = t, i, act, peak
    st.busy[s] += busy
    st.blocked[s] += blocked
    return i - n0
