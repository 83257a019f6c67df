"""Run one iteration of a fixed per-stage operation order: event-driven, no clock ticks.

Each operation starts at max(its stage is free, its input has arrived). Forward outputs go to
the next stage and backward (input-gradient) outputs to the previous one over the link between
them. A message takes ``transfer_ms`` (latency + bytes / bandwidth) plus the link's injected delay.

GPU-driven (NCCL) sends: the injected delay runs on the sender's stream before the send (as
PipeMorph's injector does, a sleep kernel ahead of ``ncclSend``), then the send waits for the
receiver to post its receive (``rendezvous``) and for the transfer; the sender's stream is held
until delivery and the receiver's operation starts no earlier. A receive is posted when the
receiver has issued the operation before the one that needs it (its end, or the issue of its
send, whichever is later): a send and the next receive go out as one batch, as Megatron's
send-forward-receive-backward does, so two stages sending to each other do not deadlock.

CPU-delegated sends: the sender's stream pays a device-to-host copy and goes on; a host delegate
(micro-batch m on delegate m mod ``cpu_channels``, one message at a time) waits the delay and
transfers; the receiver's stream pays a host-to-device copy before the operation.
"""

from __future__ import annotations

import math
from collections import deque
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

    With ``model.peer_streams`` (GPU-driven, no rendezvous) the per-peer stream executor of
    :mod:`gpusched_env.pipeline.streams` runs instead. Raises ``ValueError`` if an order exceeds
    ``model.activation_limit`` and ``RuntimeError`` if the orders deadlock (an operation waits on one that its stage's order puts later).
    """
    if model.peer_streams and model.comm == "gpu" and not model.rendezvous:
        from gpusched_env.pipeline.streams import execute_streams  # imported here: it imports this module

        return execute_streams(model, orders, scale, record)
    S, M = model.stages, model.microbatches
    st = _State(S, M, model.cpu_channels)
    dur = model.durations()
    const = [_stage_constants(model, dur, s) for s in range(S)]
    # a worklist of stages: a stage that made progress may unblock its neighbours (their inputs,
    # their rendezvous), so they are queued again; each stage advances as far as it can at once
    queue, queued = deque(range(S)), [True] * S
    while queue:
        s = queue.popleft()
        queued[s] = False
        if _advance(model, st, s, orders, const[s], scale, record):
            for nb in (s - 1, s + 1):
                if 0 <= nb < S and not queued[nb]:
                    queue.append(nb)
                    queued[nb] = True
    if any(st.ptr[s] < len(orders[s]) or st.pend[s] is not None for s in range(S)):
        left = sum(len(o) for o in orders) - sum(st.ptr)
        raise RuntimeError(f"orders deadlock with {left} operations left (stage pointers {st.ptr})")
    makespan = max(st.free)
    bubble = tuple(1.0 - b / makespan if makespan > 0 else 0.0 for b in st.busy)
    return IterationResult(
        iteration_ms=makespan + model.overhead_ms, makespan_ms=makespan, busy_ms=tuple(st.busy),
        bubble_fraction=bubble, send_blocked_ms=tuple(st.blocked), peak_activations=tuple(st.peak),
        timeline=tuple(st.timeline),
    )


class _State:
    """Mutable per-iteration arrays of :func:`execute` (arrival and end times, counters)."""

    def __init__(self, S: int, M: int, channels: int) -> None:
        self.f_in = [[0.0] * M] + [[INF] * M for _ in range(S - 1)]  # forward input arrival
        self.b_in = [[INF] * M for _ in range(S)]  # gradient arrival (last stage: its own F end)
        self.b_end = [[INF] * M for _ in range(S)]
        self.free = [0.0] * S
        self.post = [0.0] * S  # when the stage posted the receive of its next operation
        self.pend: list[tuple[int, int, float] | None] = [None] * S  # GPU send: (to, code, issued)
        self.ptr = [0] * S
        self.busy = [0.0] * S
        self.blocked = [0.0] * S
        self.act = [0] * S
        self.peak = [0] * S
        k = channels if channels > 0 else M
        self.fwd_chan = [[0.0] * k for _ in range(S)]  # CPU delegates of stage s -> s+1
        self.bwd_chan = [[0.0] * k for _ in range(S)]  # CPU delegates of stage s -> s-1
        self.timeline: list[tuple[int, int, int, float, float]] = []


def _stage_constants(model: PipelineModel, dur, s: int) -> tuple:
    """What :func:`_advance` needs of stage ``s`` that does not change within an iteration."""
    last = model.stages - 1
    gpu = model.comm == "gpu"
    c_next = model.link_delay_ms[s] if s < last else 0.0
    c_prev = model.link_delay_ms[s - 1] if s > 0 else 0.0
    if gpu and model.injector_group_ranks and s == 2:  # see PipelineModel.injector_group_ranks
        c_prev = c_next
    k = model.cpu_channels if model.cpu_channels > 0 else model.microbatches
    copy = 0.0 if gpu else model.copy_ms
    return (dur[0][s], dur[1][s], dur[2][s], c_next, c_prev, k, copy, s == last)


def _advance(model: PipelineModel, st: _State, s: int, orders: Orders, const: tuple, scale, record) -> int:
    """Run stage ``s``'s next operations while their inputs are known; return how many steps ran
    (operations plus completed GPU sends)."""
    M = model.microbatches
    order = orders[s]
    fd, bd, wd, c_next, c_prev, k, copy, is_last = const
    gpu, rdv, xfer = model.comm == "gpu", model.rendezvous, model.transfer_ms
    f_in, b_in, b_end = st.f_in[s], st.b_in[s], st.b_end[s]
    t, i, act, peak, busy, blocked = st.free[s], st.ptr[s], st.act[s], st.peak[s], 0.0, 0.0
    steps = 0
    limit = model.activation_limit
    n = len(order)
    while True:
        pend = st.pend[s]
        if pend is not None:  # GPU send issued at pend[2]: wait for the receiver's post, then transfer
            to, code, issued = pend
            if rdv:
                posted = _posted(st, orders, to, code)
                if posted is None:
                    break  # the receiver has not posted the receive of this message yet
                done = (issued if issued > posted else posted) + xfer
            else:
                done = issued + xfer
            if code < M:
                st.f_in[to][code] = done
            else:
                st.b_in[to][code - M] = done
            blocked += done - t
            t = done
            st.pend[s] = None
            steps += 1
        if i >= n:
            break
        kind, m = divmod(order[i], M)
        ready = f_in[m] if kind == 0 else b_in[m] if kind == 1 else b_end[m]
        if ready == INF:
            src = s - 1 if kind == 0 else s + 1
            if kind == 2 or not gpu or not 0 <= src < len(orders):
                break
            spend = st.pend[src]
            if spend is None or spend[0] != s or spend[1] != order[i]:
                break
            # the neighbour is blocked sending exactly this message: complete its send from here
            issued = spend[2]
            posted = st.post[s]
            ready = (issued if not rdv or issued > posted else posted) + xfer
            st.blocked[src] += ready - st.free[src]
            st.free[src] = ready
            st.pend[src] = None
            if kind == 0:
                f_in[m] = ready
            else:
                b_in[m] = ready
        start = t if t > ready else ready
        d = fd if kind == 0 else bd if kind == 1 else wd
        if copy and ((kind == 0 and s > 0) or (kind == 1 and not is_last)):
            start += copy  # host-to-device copy of the received message
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
            if act > peak:
                peak = act
            if is_last:
                b_in[m] = t
            elif gpu:  # injected sleep on the sender's stream, then the NCCL send (resolved above)
                t += c_next
                blocked += c_next
                st.pend[s] = (s + 1, m, t)
            else:  # device-to-host copy, then delegate m mod k sends after the delay
                t += copy
                chan = st.fwd_chan[s]
                go = t if t > chan[m % k] else chan[m % k]
                chan[m % k] = st.f_in[s + 1][m] = go + c_next + xfer
        elif kind == 1:
            b_end[m] = t
            if s > 0:
                if gpu:
                    t += c_prev
                    blocked += c_prev
                    st.pend[s] = (s - 1, M + m, t)
                else:
                    t += copy
                    chan = st.bwd_chan[s]
                    go = t if t > chan[m % k] else chan[m % k]
                    chan[m % k] = st.b_in[s - 1][m] = go + c_prev + xfer
        else:
            act -= 1
        i += 1
        steps += 1
        if d > 0:  # the next operation's receive is posted when this one (and its send's issue) ends;
            st.post[s] = t  # a zero-time operation (the W of an unsplit backward) does not move it
    st.free[s], st.ptr[s], st.act[s], st.peak[s] = t, i, act, peak
    st.busy[s] += busy
    st.blocked[s] += blocked
    return steps


def _posted(st: _State, orders: Orders, r: int, code: int) -> float | None:
    """When stage ``r`` posted the receive of message ``code`` from ``sender`` (None: not yet)."""
    if st.ptr[r] < len(orders[r]) and orders[r][st.ptr[r]] == code:
        return st.post[r]
    return None
