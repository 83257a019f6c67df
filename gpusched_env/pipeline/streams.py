"""GPU-driven sends on per-peer NCCL streams (ZeroBubble's isend / irecv): run one iteration.

How ZeroBubble issues its point-to-point operations (PipeMorph@bc31ab09, zerobubble/megatron/core/
pipeline_parallel/zb_schedules_origin.py ``fused_pipeline_ops``): one ``torch.distributed.isend`` /
``irecv`` per message, not batched; PyTorch's NCCL process group runs each peer pair's operations on
a communicator and a stream of their own, and makes that stream wait for the compute work issued
before each call. The sends are waited for only at the end of the iteration (``run``: the
``send_handles``); a receive is waited for by the compute operation that consumes it
(``schedule_f`` / ``schedule_b``: ``h.wait()``). PipeMorph's injector launches its sleep on the
stream it is handed, the peer's NCCL stream, just before ``ncclSend`` (``failslow_injection.cu``).

So here each stage has a compute stream and one stream per neighbour. A stream runs its
operations in the order the stage issues them:
- a send (after the operation that produced the message) sleeps the link's delay, then transfers
  together with the peer's matching receive: NCCL send and receive kernels start together and end
  ``transfer_ms`` later, so each waits for the other;
- a receive can start once the compute operation issued before it has ended, and the operation
  that consumes the message waits for the receive.
A delayed send therefore holds every receive queued behind it on the same stream, and the
compute stream is never held by a send.

Issue order follows ZeroBubble's plan (``auto_schedule.py ilp_results``): operations sorted by
their planned start, a send at its operation's planned end, the matching receive in the receiver's
list at that same time (communication before computation at equal times), and a receive that
overlaps the computation just before it is moved ahead of it. The planned times are the orders
run on a healthy pipeline (no delay, no slowdown) with free-running sends (the plan's conditions).
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

from gpusched_env.pipeline.model import PipelineModel
from gpusched_env.pipeline.ops import Orders

INF = float("inf")

# one stream item: (is_send, message id, index of the stage's compute op issued before it, or -1)
_Item = tuple[bool, int, int]


@lru_cache(maxsize=64)
def issue_plan(model: PipelineModel, orders: Orders) -> tuple[tuple[tuple[_Item, ...], tuple[_Item, ...]], ...]:
    """Per stage, the (next-peer, previous-peer) stream items in issue order.

    A message id is ``kind * M + mb`` of the operation that *consumes* it on the receiver (F for
    activations, B for gradients), the same code on both ends.
    """
    from gpusched_env.pipeline.execute import execute  # the plan's timing, no per-peer streams

    S, M = model.stages, model.microbatches
    healthy = replace(model, link_delay_ms=(0.0,) * (S - 1), slowdown=(1.0,) * S, rendezvous=False,
                      peer_streams=False, injector_group_ranks=False)
    tl = execute(healthy, orders, record=True).timeline
    start: dict[tuple[int, int], float] = {}
    end: dict[tuple[int, int], float] = {}
    for s, kind, m, a, b in tl:
        start[s, kind * M + m] = a
        end[s, kind * M + m] = b
    # per stage: (time, 0 = comm / 1 = compute, tie, node); node = ("C", index) | ("S"/"R", peer, msg)
    nodes: list[list[tuple[float, int, int, tuple]]] = [[] for _ in range(S)]
    tie = 0
    for s in range(S):
        for i, code in enumerate(orders[s]):
            nodes[s].append((start[s, code], 1, 0, ("C", i)))
            kind, m = divmod(code, M)
            to = s + 1 if kind == 0 else s - 1 if kind == 1 else -1
            if not 0 <= to < S:
                continue
            t = end[s, code]
            tie += 1
            nodes[s].append((t, 0, tie, ("S", to, code)))  # the consumer's code: F(m) or B(m)
            nodes[to].append((t, 0, tie, ("R", s, code)))
    out = []
    for s in range(S):
        prog = sorted(nodes[s], key=lambda x: x[:3])
        for i in range(1, len(prog)):  # a receive overlapping the computation before it goes first
            prev, cur = prog[i - 1], prog[i]
            if prev[3][0] == "C" and cur[3][0] == "R" and cur[0] <= end[s, orders[s][prev[3][1]]]:
                prog[i - 1], prog[i] = cur, prev
        nxt: list[_Item] = []
        prv: list[_Item] = []
        last = -1
        for node in (x[3] for x in prog):
            if node[0] == "C":
                last = node[1]
            else:
                (nxt if node[1] == s + 1 else prv).append((node[0] == "S", node[2], last))
        out.append((tuple(nxt), tuple(prv)))
    return tuple(out)


def execute_streams(model: PipelineModel, orders: Orders, scale=None, record: bool = False):
    """Run ``orders`` under ``model`` with per-peer streams (see the module docstring).

    Returns an :class:`~gpusched_env.pipeline.execute.IterationResult`; sends never hold the compute
    stream, so ``send_blocked_ms`` is 0. Raises as :func:`~gpusched_env.pipeline.execute.execute`.
    """
    from gpusched_env.pipeline.execute import IterationResult

    S, M = model.stages, model.microbatches
    plan = issue_plan(model, orders)
    fd, bd, wd = model.durations()
    xfer, delay = model.transfer_ms, model.link_delay_ms
    limit = model.activation_limit
    # compute stream
    cptr, cfree = [0] * S, [0.0] * S
    cend = [[INF] * len(orders[s]) for s in range(S)]
    arrive = [[INF] * (2 * M) for _ in range(S)]  # message done, by consumer code (F/B only)
    for m in range(M):
        arrive[0][m] = 0.0  # stage 0's forwards need no message
        arrive[S - 1][M + m] = -1.0  # the last stage's B waits for its own F (order), not a message
    act, peak, busy = [0] * S, [0] * S, [0.0] * S
    timeline: list[tuple[int, int, int, float, float]] = []
    # peer streams: [stage][0 = next, 1 = previous]
    sptr = [[0, 0] for _ in range(S)]
    sfree = [[0.0, 0.0] for _ in range(S)]

    def ready(s: int, side: int) -> float:
        """When the head item of stream (s, side) can start (send: after its sleep); INF if unknown."""
        send, _msg, dep = plan[s][side][sptr[s][side]]
        t = sfree[s][side]
        if dep >= 0:
            e = cend[s][dep]
            if e == INF:
                return INF
            t = t if t > e else e
        if send:
            t += delay[s] if side == 0 else delay[s - 1]
        return t

    def comm(s: int) -> bool:
        """Pair the head items of stage s's streams with their peers' where both can start."""
        moved = False
        for side in (0, 1):
            items = plan[s][side]
            peer, pside = (s + 1, 1) if side == 0 else (s - 1, 0)
            while sptr[s][side] < len(items):
                send, msg, _dep = items[sptr[s][side]]
                pitems = plan[peer][pside]
                if sptr[peer][pside] >= len(pitems):
                    break
                psend, pmsg, _ = pitems[sptr[peer][pside]]
                if pmsg != msg or psend == send:
                    break  # the peer's stream is busy with an earlier item
                a, b = ready(s, side), ready(peer, pside)
                if a == INF or b == INF:
                    break
                done = (a if a > b else b) + xfer
                sfree[s][side] = sfree[peer][pside] = done
                sptr[s][side] += 1
                sptr[peer][pside] += 1
                arrive[s if not send else peer][msg] = done
                moved = True
        return moved

    def compute(s: int) -> bool:
        order = orders[s]
        i, t, moved = cptr[s], cfree[s], False
        while i < len(order):
            code = order[i]
            kind, m = divmod(code, M)
            if kind < 2:
                at = arrive[s][code]
                if at == INF:
                    break
                if kind == 1 and s == S - 1:
                    at = cend_f[s][m]
                    if at == INF:
                        break
            else:
                at = 0.0
            d = fd[s] if kind == 0 else bd[s] if kind == 1 else wd[s]
            if scale is not None:
                d *= scale[kind][s][m]
            begin = t if t > at else at
            t = begin + d
            busy[s] += d
            cend[s][i] = t
            if kind == 0:
                cend_f[s][m] = t
                act[s] += 1
                if act[s] > limit:
                    raise ValueError(f"order of stage {s} holds {act[s]} micro-batches, over activation_limit {limit}")
                peak[s] = max(peak[s], act[s])
            elif kind == 2:
                act[s] -= 1
            if record:
                timeline.append((s, kind, m, begin, t))
            i += 1
            moved = True
        cptr[s], cfree[s] = i, t
        return moved

    cend_f = [[INF] * M for _ in range(S)]
    todo, queued = list(range(S)), [True] * S
    while todo:
        s = todo.pop()
        queued[s] = False
        moved = compute(s)
        while comm(s):
            moved = True
            compute(s)
        if moved:
            for nb in (s - 1, s, s + 1):
                if 0 <= nb < S and not queued[nb]:
                    todo.append(nb)
                    queued[nb] = True
    if any(cptr[s] < len(orders[s]) or sptr[s][0] < len(plan[s][0]) or sptr[s][1] < len(plan[s][1])
           for s in range(S)):
        raise RuntimeError(f"orders deadlock on the per-peer streams (compute pointers {cptr})")
    makespan = max(max(cfree), max(max(f) for f in sfree))
    bubble = tuple(1.0 - b / makespan if makespan > 0 else 0.0 for b in busy)
    return IterationResult(
        iteration_ms=makespan + model.overhead_ms, makespan_ms=makespan, busy_ms=tuple(busy),
        bubble_fraction=bubble, send_blocked_ms=(0.0,) * S, peak_activations=tuple(peak),
        timeline=tuple(timeline),
    )
