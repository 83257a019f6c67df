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
    """Per-stage orders of the greedy scheduler under ``model``, and the makespan it predicts (ms)."""
    S, M = model.stages, model.microbatches
    if len(warmup) != S or any(w < 1 for w in warmup):
        raise ValueError(f"warmup needs {S} values >= 1 (one per stage), got {list(warmup)}")
    warm = [min(w, M, model.activation_limit) for w in warmup]
    g = _Greedy(model)
    heap = [(0.0, s) for s in range(S)]
    while heap:
        t, s = heapq.heappop(heap)
        if t != g.wake[s]:
            continue  # superseded wake-up
        kind = g.choose(s, t, warm[s])
        if kind < 0:
            nxt = g.next_arrival(s, warm[s])
            g.wake[s] = nxt
            if nxt < INF:
                heapq.heappush(heap, (nxt, s))
            continue
        for other, at in g.run(s, t, kind):
            new = at if at > g.free[other] else g.free[other]
            if new < g.wake[other]:
                g.wake[other] = new
                heapq.heappush(heap, (new, other))
        g.wake[s] = g.free[s]
        heapq.heappush(heap, (g.free[s], s))
    if any(len(o) != 3 * M for o in g.orders):
        raise RuntimeError(f"greedy scheduler stalled (warmup {warm}, activation_limit {model.activation_limit})")
    return tuple(tuple(o) for o in g.orders), max(g.free)


class _Greedy:
    """The planner's state: next micro-batch per kind, arrivals, free times, held activations."""

    def __init__(self, model: PipelineModel) -> None:
        S, M = model.stages, model.microbatches
        self.model, self.S, self.M = model, S, M
        self.dur = model.durations()
        self.gpu = model.comm == "gpu"
        self.f_in = [[0.0] * M] + [[INF] * M for _ in range(S - 1)]
        self.b_in = [[INF] * M for _ in range(S)]
        self.nf, self.nb, self.nw = [0] * S, [0] * S, [0] * S
        self.free, self.wake = [0.0] * S, [0.0] * S
        self.orders: list[list[int]] = [[] for _ in range(S)]

    def choose(self, s: int, t: float, warm: int) -> int:
        """The kind to run on stage ``s`` at ``t`` (0 F, 1 B, 2 W) or -1 to wait."""
        nf, nb, M = self.nf[s], self.nb[s], self.M
        f_ok = nf < M and nf - self.nw[s] < self.model.activation_limit and self.f_in[s][nf] <= t
        if nf < warm:
            return 0 if f_ok else -1
        if nb < nf and self.b_in[s][nb] <= t:
            return 1
        if f_ok:
            return 0
        return 2 if self.nw[s] < nb else -1

    def next_arrival(self, s: int, warm: int) -> float:
        """When the input stage ``s`` waits for is known to arrive (INF if not yet known)."""
        nf, nb = self.nf[s], self.nb[s]
        f_next = self.f_in[s][nf] if nf < self.M and nf - self.nw[s] < self.model.activation_limit else INF
        b_next = self.b_in[s][nb] if nb < nf and nf >= warm else INF
        return min(f_next, b_next)

    def run(self, s: int, t: float, kind: int) -> list[tuple[int, float]]:
        """Run one op of ``kind`` on stage ``s`` from ``t``; return (stage, arrival) it sends."""
        M, last, sends = self.M, self.S - 1, []
        link, p2p = self.model.link_delay_ms, self.model.transfer_ms
        end = t + self.dur[kind][s]
        if kind == 0:
            m = self.nf[s]
            self.nf[s] += 1
            if s < last:
                at = end + p2p + link[s]
                self.f_in[s + 1][m] = at
                sends.append((s + 1, at))
                end = at if self.gpu else end
            else:
                self.b_in[s][m] = end
        elif kind == 1:
            m = self.nb[s]
            self.nb[s] += 1
            if s > 0:
                at = end + p2p + link[s - 1]
                self.b_in[s - 1][m] = at
                sends.append((s - 1, at))
                end = at if self.gpu else end
        else:
            m = self.nw[s]
            self.nw[s] += 1
        self.orders[s].append(kind * M + m)
        self.free[s] = end
        return sends
