"""GPU-driven sends on per-peer NCCL streams (ZeroBubble's isend / irecv): run one iteration.

How ZeroBubble issues its point-to-point operations (PipeMorph@bc31ab09, zerobubble/megatron/core/
pipeline_parallel/zb_schedules_origin.py ``fused_pipeline_ops``): one ``torch.distributed.isend`` /
``irecv`` per message, not batched; PyTorch's NCCL process group runs each peer pair's operations on
a communicator and a stream of their own (pytorch/pytorch torch/csrc/distributed/c10d/
ProcessGroupNCCL.cpp: ``pointToPoint`` keys them by ``getKeySendRecv``, "low:high" rank; newer
releases reuse the group's communicator only when it is initialised eagerly with a device id, which
the artifact's Megatron does not pass: zerobubble/megatron/initialize.py ``init_process_group``),
and makes that stream wait for the compute work issued before each call. The sends are waited for only at the end of the iteration (``run``: the
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
run as the planner sees the pipeline (healthy, each message ``transfer_ms`` after its operation).
"""

from __future__ import annotations

from collections import deque
from dataclasses import replace
from functools import lru_cache

import numpy as np

from gpusched_env.pipeline.execute import IterationResult
from gpusched_env.pipeline.model import PipelineModel
from gpusched_env.pipeline.ops import Orders

INF = float("inf")

# one stream item: (is_send, message id, index of the stage's compute op issued before it, or -1)
_Item = tuple[bool, int, int]


def issue_plan(model: PipelineModel, orders: Orders) -> tuple[tuple[tuple[_Item, ...], tuple[_Item, ...]], ...]:
    """Per stage, the (next-peer, previous-peer) stream items in issue order.

    A message id is ``kind * M + mb`` of the operation that *consumes* it on the receiver (F for
    activations, B for gradients), the same code on both ends. The planned times are the orders
    run as ZeroBubble's planner sees the pipeline (as :mod:`gpusched_env.pipeline.greedy` plans
    it): healthy, each message ``transfer_ms`` after its operation, senders not held.
    """
    S = model.stages
    plan_view = replace(model, link_delay_ms=(0.0,) * (S - 1), slowdown=(1.0,) * S, comm="cpu",
                        pcie_gb_s=float("inf"), cpu_channels=0, overhead_ms=0.0, peer_streams=False,
                        rendezvous=False, injector_group_ranks=False, activation_limit=1 << 30)
    return _issue_plan(plan_view, orders)


@lru_cache(maxsize=64)
def _issue_plan(model: PipelineModel, orders: Orders) -> tuple[tuple[tuple[_Item, ...], tuple[_Item, ...]], ...]:
    S, M = model.stages, model.microbatches
    start, end = _plan_times(model, orders)
    # per stage, the nodes sorted by (time, 0 = comm / 1 = compute, tie, compute index or -1 send /
    # -2 receive, code): computations at their planned start; a send at its operation's end, numbered
    # by ``tie`` in (stage, index) order, and the matching receive in the receiver's list with the
    # same key; a message's code is its consumer's (F(m) or B(m)), the same on both ends. The keys
    # are distinct, so numpy's lexsort gives the order of sorting the tuples.
    codes = [np.asarray(o, dtype=np.int64) for o in orders]
    fwd = [np.flatnonzero(c < M) if s < S - 1 else np.empty(0, np.int64) for s, c in enumerate(codes)]
    bwd = [np.flatnonzero((c >= M) & (c < 2 * M)) if s > 0 else np.empty(0, np.int64) for s, c in enumerate(codes)]
    ties: list[np.ndarray] = []  # per stage: the tie of each op's message (0 where none)
    tie = 0
    for s in range(S):
        sent = np.zeros(len(codes[s]), dtype=np.int64)
        own = np.sort(np.concatenate((fwd[s], bwd[s])))
        sent[own] = np.arange(tie + 1, tie + 1 + len(own))
        tie += len(own)
        ties.append(sent)
    nodes: list[tuple[list[float], list[int], list[int]]] = []  # per stage: time, index, code
    for s in range(S):
        n = len(codes[s])
        st_s, en_s = np.asarray(start[s], dtype=float), np.asarray(end[s], dtype=float)
        own = np.sort(np.concatenate((fwd[s], bwd[s])))
        parts = [(st_s, np.ones(n, np.int64), np.zeros(n, np.int64), np.arange(n), codes[s]),
                 (en_s[own], np.zeros(len(own), np.int64), ties[s][own], np.full(len(own), -1), codes[s][own])]
        for r, sel in ((s - 1, fwd[s - 1] if s > 0 else None), (s + 1, bwd[s + 1] if s < S - 1 else None)):
            if sel is not None:  # receives of the messages stage r sends here
                parts.append((np.asarray(end[r], dtype=float)[sel], np.zeros(len(sel), np.int64), ties[r][sel],
                              np.full(len(sel), -2), codes[r][sel]))
        key_t, key_c, key_tie, key_i, key_code = (np.concatenate(x) for x in zip(*parts, strict=True))
        order = np.lexsort((key_code, key_i, key_tie, key_c, key_t))
        nodes.append((key_t[order].tolist(), key_i[order].tolist(), key_code[order].tolist()))
    out = []
    for s in range(S):
        en = end[s]
        sides: tuple[list[_Item], list[_Item]] = ([], [])
        last = before = -1  # the last compute op issued, and the one before it
        after_compute = False  # the previous node is a computation (a receive may move ahead of it)
        for t, idx, code in zip(*nodes[s], strict=True):
            if idx >= 0:
                before, last, after_compute = last, idx, True
            elif idx == -1:  # a send: forwards go to the next stage, gradients to the previous
                sides[0 if code < M else 1].append((True, code, last))
                after_compute = False
            elif after_compute and t <= en[last]:  # a receive overlapping that computation goes first
                sides[1 if code < M else 0].append((False, code, before))
            else:  # a receive: activations come from the previous stage, gradients from the next
                sides[1 if code < M else 0].append((False, code, last))
                after_compute = False
        out.append((tuple(sides[0]), tuple(sides[1])))
    return tuple(out)


def _plan_times(model: PipelineModel, orders: Orders) -> tuple[list[list[float]], list[list[float]]]:
    """Start and end of each stage's i-th operation as planned: healthy, every message
    ``transfer_ms`` after its operation, senders never held."""
    S, M = model.stages, model.microbatches
    fd, bd, wd = model.durations()
    xfer = model.transfer_ms
    arrive = [[INF] * (2 * M) for _ in range(S)]
    for m in range(M):
        arrive[0][m] = 0.0
    start = [[0.0] * len(o) for o in orders]
    end = [[0.0] * len(o) for o in orders]
    ptr, free = [0] * S, [0.0] * S
    todo = deque(range(S))
    queued = [True] * S
    while todo:
        s = todo.popleft()
        queued[s] = False
        order, arr, st, en = orders[s], arrive[s], start[s], end[s]
        i, t, n = ptr[s], free[s], len(order)
        first = i
        while i < n:
            code = order[i]
            if code < 2 * M:
                at = arr[code]
                if at == INF:
                    break
                t = t if t > at else at
            st[i] = t
            t += fd[s] if code < M else bd[s] if code < 2 * M else wd[s]
            en[i] = t
            if code < M:
                if s < S - 1:
                    arrive[s + 1][code] = t + xfer
                else:
                    arr[M + code] = t  # the last stage's B follows its own F
            elif code < 2 * M and s > 0:
                arrive[s - 1][code] = t + xfer
            i += 1
        ptr[s], free[s] = i, t
        if i > first:
            for nb in (s - 1, s + 1):
                if 0 <= nb < S and not queued[nb]:
                    todo.append(nb)
                    queued[nb] = True
    if any(ptr[s] < len(orders[s]) for s in range(S)):
        raise RuntimeError(f"orders deadlock with the plan's timing (stage pointers {ptr})")
    return start, end


def execute_streams(model: PipelineModel, orders: Orders, scale=None, record: bool = False) -> IterationResult:
    """Run ``orders`` under ``model`` with per-peer streams (see the module docstring).

    Returns an :class:`~gpusched_env.pipeline.execute.IterationResult`; sends never hold the compute
    stream, so ``send_blocked_ms`` is 0. Raises as :func:`~gpusched_env.pipeline.execute.execute`.
    """
    S, M = model.stages, model.microbatches
    plan = issue_plan(model, orders)
    fd, bd, wd = model.durations()
    xfer, limit = model.transfer_ms, model.activation_limit
    # peer streams, flat: q = 2 s (towards s + 1) and 2 s + 1 (towards s - 1)
    items = [plan[q // 2][q % 2] for q in range(2 * S)]
    partner = [2 * (q // 2 + 1) + 1 if q % 2 == 0 else 2 * (q // 2 - 1) for q in range(2 * S)]
    links = (*model.link_delay_ms, 0.0)  # the last stage has no next link
    sleep = [links[q // 2] if q % 2 == 0 else links[q // 2 - 1] if q > 1 else 0.0 for q in range(2 * S)]
    sptr, sfree = [0] * (2 * S), [0.0] * (2 * S)
    cptr, cfree = [0] * S, [0.0] * S
    cend = [[INF] * len(orders[s]) for s in range(S)]  # end of each stage's i-th compute op
    arrive = [[INF] * (2 * M) for _ in range(S)]  # message done, by its consumer's code
    for m in range(M):
        arrive[0][m] = 0.0  # stage 0's forwards need no message
    f_end = [[INF] * M for _ in range(S)]
    act, peak, busy = [0] * S, [0] * S, [0.0] * S
    timeline: list[tuple[int, int, int, float, float]] = []

    # per stream: its items, its partner stream and that one's items, and the two stages (a stream
    # whose partner would be outside the pipeline holds no items)
    peers = [(items[q], partner[q], items[partner[q]] if 0 <= partner[q] < 2 * S else (), q >> 1, partner[q] >> 1)
             for q in range(2 * S)]

    def pair(q: int) -> bool:
        """Run stream q's head items with their partners' while both can start."""
        its, r, rits, s, rs = peers[q]
        i, n = sptr[q], len(its)
        if i >= n:
            return False
        j, rn = sptr[r], len(rits)
        ends, rends = cend[s], cend[rs]
        moved = False
        while i < n and j < rn:
            send, msg, dep = its[i]
            rsend, rmsg, rdep = rits[j]
            if rmsg != msg or rsend == send:
                break  # the partner's stream is still on an earlier item
            a, b = sfree[q], sfree[r]
            if dep >= 0:
                e = ends[dep]
                if e == INF:
                    break
                a = a if a > e else e
            if rdep >= 0:
                e = rends[rdep]
                if e == INF:
                    break
                b = b if b > e else e
            if send:
                a += sleep[q]
            else:
                b += sleep[r]
            done = (a if a > b else b) + xfer
            sfree[q] = sfree[r] = done
            i += 1
            j += 1
            arrive[rs if send else s][msg] = done
            moved = True
        sptr[q], sptr[r] = i, j
        return moved

    def compute(s: int) -> None:
        order, ends, fe, arr = orders[s], cend[s], f_end[s], arrive[s]
        i, t, n, last = cptr[s], cfree[s], len(order), s == S - 1
        a, pk, used = act[s], peak[s], 0.0
        f, b, w = fd[s], bd[s], wd[s]
        while i < n:
            code = order[i]
            if code < M:
                at, kind, m, d = arr[code], 0, code, f
            elif code < 2 * M:
                m = code - M
                at, kind, d = (fe[m] if last else arr[code]), 1, b  # the last stage's B follows its F
            else:
                at, kind, m, d = 0.0, 2, code - 2 * M, w
            if at == INF:
                break
            if scale is not None:
                d *= scale[kind][s][m]
            begin = t if t > at else at
            t = begin + d
            used += d
            ends[i] = t
            if kind == 0:
                fe[m] = t
                a += 1
                if a > limit:
                    raise ValueError(f"order of stage {s} holds {a} micro-batches, over activation_limit {limit}")
                if a > pk:
                    pk = a
            elif kind == 2:
                a -= 1
            if record:
                timeline.append((s, kind, m, begin, t))
            i += 1
        cptr[s], cfree[s], act[s], peak[s] = i, t, a, pk
        busy[s] += used

    todo, queued = deque(range(S)), [True] * S
    while todo:
        s = todo.popleft()
        queued[s] = False
        moved = False
        while True:
            compute(s)
            if not (pair(2 * s) | pair(2 * s + 1)):
                break
            moved = True
        if moved:  # the partners' streams moved: their stages may go on
            for nb in (s - 1, s + 1):
                if 0 <= nb < S and not queued[nb]:
                    todo.append(nb)
                    queued[nb] = True
    sptr_left = any(sptr[q] < len(items[q]) for q in range(2 * S))
    if sptr_left or any(cptr[s] < len(orders[s]) for s in range(S)):
        raise RuntimeError(f"orders deadlock on the per-peer streams (compute pointers {cptr})")
    makespan = max(max(cfree), max(sfree))
    bubble = tuple(1.0 - b / makespan if makespan > 0 else 0.0 for b in busy)
    return IterationResult(
        iteration_ms=makespan + model.overhead_ms, makespan_ms=makespan, busy_ms=tuple(busy),
        bubble_fraction=bubble, send_blocked_ms=(0.0,) * S, peak_activations=tuple(peak),
        timeline=tuple(timeline),
    )
