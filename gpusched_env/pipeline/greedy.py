"""The warm-up + priority list scheduler of the ZeroBubble family (ZB and Adaptra).

Each stage first runs its ``warmup[s]`` forwards; afterwards, whenever it is free, it runs a ready
operation preferring B > F > W, lowest micro-batch first (CALIBRATION.md, Adaptra). A forward is
ready only while the stage holds fewer than ``activation_limit`` micro-batches. The scheduler is
event-driven: stages decide in time order, an idle stage is woken by the arrival it waits for.
The operations it runs, in order, are the schedule's per-stage orders.
"""

from __future__ import annotations

import heapq
import math

from gpusched_env.pipeline.model import PipelineModel
from gpusched_env.pipeline.ops import Orders

INF = math.inf


def plan(model: PipelineModel, warmup: tuple[int, ...]) -> tuple[Orders, float]:
    """Per-stage orders of the greedy scheduler under ``model``, and the makespan it predicts (ms).

    The planner's state (next micro-batch per kind, arrivals, free times, held activations) is kept
    in local lists and the choice of an operation and its run are written out in the event loop."""
    S, M = model.stages, model.microbatches
    if len(warmup) != S or any(w < 1 for w in warmup):
        raise ValueError(f"warmup needs {S} values >= 1 (one per stage), got {list(warmup)}")
    limit = model.activation_limit
    warm = [min(w, M, limit) for w in warmup]
    dur = model.durations()
    gpu = model.comm == "gpu"
    link, p2p = model.link_delay_ms, model.transfer_ms
    last = S - 1
    f_in = [[0.0] * M] + [[INF] * M for _ in range(S - 1)]  # when each forward's input arrives
    b_in = [[INF] * M for _ in range(S)]  # when each backward's input arrives
    nf, nb, nw = [0] * S, [0] * S, [0] * S  # next micro-batch per kind
    free, wake = [0.0] * S, [0.0] * S
    orders: list[list[int]] = [[] for _ in range(S)]
    heap = [(0.0, s) for s in range(S)]
    pop, push = heapq.heappop, heapq.heappush
    while heap:
        t, s = pop(heap)
        if t != wake[s]:
            continue  # superseded wake-up
        f, b, w, ws = nf[s], nb[s], nw[s], warm[s]
        # the kind to run (0 F, 1 B, 2 W) or -1 to wait: warm-up forwards first, then B > F > W
        f_ok = f < M and f - w < limit and f_in[s][f] <= t
        if f < ws:
            kind = 0 if f_ok else -1
        elif b < f and b_in[s][b] <= t:
            kind = 1
        elif f_ok:
            kind = 0
        else:
            kind = 2 if w < b else -1
        if kind < 0:  # wait for the input known to arrive next (INF if not yet known)
            f_next = f_in[s][f] if f < M and f - w < limit else INF
            b_next = b_in[s][b] if b < f and f >= ws else INF
            nxt = min(f_next, b_next)
            wake[s] = nxt
            if nxt < INF:
                heapq.heappush(heap, (nxt, s))
            continue
        end = t + dur[kind][s]
        if kind == 0:
            nf[s] = f + 1
            code = f
            if s < last:  # the activation goes to the next stage, which may wake earlier
                at = end + p2p + link[s]
                f_in[s + 1][f] = at
                o = s + 1
                new = at if at > free[o] else free[o]
                if new < wake[o]:
                    wake[o] = new
                    push(heap, (new, o))
                end = at if gpu else end
            else:
                b_in[s][f] = end
        elif kind == 1:
            nb[s] = b + 1
            code = M + b
            if s > 0:  # the gradient goes to the previous stage
                at = end + p2p + link[s - 1]
                b_in[s - 1][b] = at
                o = s - 1
                new = at if at > free[o] else free[o]
                if new < wake[o]:
                    wake[o] = new
                    push(heap, (new, o))
                end = at if gpu else end
        else:
            nw[s] = w + 1
            code = 2 * M + w
        orders[s].append(code)
        free[s] = end
        wake[s] = end
        push(heap, (end, s))
    if any(len(o) != 3 * M for o in orders):
        raise RuntimeError(f"greedy scheduler stalled (warmup {warm}, activation_limit {model.activation_limit})")
    return tuple(tuple(o) for o in orders), max(free)
