"""Per-peer NCCL streams (ZeroBubble's isend / irecv): issue order and serialisation, by hand."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpusched_env.pipeline.execute import execute
from gpusched_env.pipeline.model import PipelineModel
from gpusched_env.pipeline.ops import B, F, W, op
from gpusched_env.pipeline.schedules import get
from gpusched_env.pipeline.spec import PipelineSpec
from gpusched_env.pipeline.streams import issue_plan

M = 2
# S=2, M=2, F 1 / B 2 / W 1 ms, 1 ms per message (1 MB at 1 GB/s)
SPEC = PipelineSpec(2, M, (1.0, 1.0), (2.0, 2.0), (1.0, 1.0))
ORDERS = (
    tuple(op(k, m, M) for k, m in ((F, 0), (F, 1), (B, 0), (W, 0), (B, 1), (W, 1))),
    tuple(op(k, m, M) for k, m in ((F, 0), (B, 0), (W, 0), (F, 1), (B, 1), (W, 1))),
)


def _model(delay: float, peer_streams: bool = True) -> PipelineModel:
    return PipelineModel(SPEC, link_delay_ms=(delay,), message_bytes=1e6, link_gb_s=1.0, rendezvous=False,
                         peer_streams=peer_streams)


def _start(r, stage: int, kind: int, mb: int) -> float:
    return next(a for s, k, m, a, _e in r.timeline if (s, k, m) == (stage, kind, mb))


def test_issue_order_follows_the_plan_with_receives_moved_ahead():
    # The plan's timing (each message 1 ms after its op, senders free): stage 0 F0 [0,1] F1 [1,2]
    # B0 [6,8] W0 [8,9] B1 [10,12]; stage 1 F0 [2,3] B0 [3,5] W0 [5,6] F1 [6,7] B1 [7,9]. Stage 0's
    # receive of B1 sits at 9 (stage 1's B1 ends), right after W0 which ends at 9: it moves ahead of
    # W0, so it follows B0 (index 2). Its receive of B0 (at 5) follows the send of F1 (at 2): no
    # move. Stage 1 receives F0 at 1 and F1 at 2, before F0 (comm first at equal times).
    # Items: (is_send, message, index of the compute op issued before it).
    plan = issue_plan(_model(0.0), ORDERS)
    assert plan[0][0] == ((True, 0, 0), (True, 1, 1), (False, 2, 1), (False, 3, 2))
    assert plan[1][1] == ((False, 0, -1), (False, 1, -1), (True, 2, 1), (True, 3, 4))
    assert plan[0][1] == () and plan[1][0] == ()


def test_healthy_sends_do_not_hold_the_compute_stream():
    # stage 0: F0 [0,1], F1 [1,2]; send F0 done 2, send F1 done 3. Stage 1: F0 [2,3] B0 [3,5]
    # W0 [5,6] F1 [6,7] B1 [7,9] W1 [9,10]; its B0 send meets stage 0's receive (posted after F1,
    # stream free at 3) at 5 -> 6, B1's at 9 (posted after stage 0's B0, ends 8) -> 10. Stage 0: B0 [6,8]
    # W0 [8,9] B1 [10,12] W1 [12,13]. Holding the sender for the transfer instead gives 14.
    r = execute(_model(0.0), ORDERS, record=True)
    assert r.makespan_ms == pytest.approx(13.0)
    assert r.send_blocked_ms == (0.0, 0.0)
    assert execute(_model(0.0, peer_streams=False), ORDERS).makespan_ms == pytest.approx(14.0)


def test_a_delayed_send_holds_what_is_queued_behind_it_on_the_peer_stream():
    # 10 ms on the link. Stage 0's stream: send F0 sleeps [1,11], transfers to 12; send F1 sleeps
    # [12,22], to 23 (stage 0's compute ran F1 at [1,2] meanwhile). Stage 1: F0 [12,13] B0 [13,15]
    # W0 [15,16]; its gradient send B0 is queued behind the receive of F1 (done 23), so it sleeps
    # [23,33] and arrives at 34, not at 15 + 10 + 1 = 26 as with the sender's stream held.
    # Stage 1: F1 [23,24] B1 [24,26]; send B1 sleeps [34,44] -> 45 (stage 0 posted that receive
    # after B0 [34,36]). Stage 0: B0 [34,36] W0 [36,37] B1 [45,47] W1 [47,48].
    r = execute(_model(10.0), ORDERS, record=True)
    assert _start(r, 1, F, 1) == pytest.approx(23.0)
    assert _start(r, 0, B, 0) == pytest.approx(34.0)
    assert _start(r, 0, B, 1) == pytest.approx(45.0)
    assert r.makespan_ms == pytest.approx(48.0)
    # the same orders with the sender's stream held (delay + transfer) and no per-peer queue:
    # stage 1 F1 [27,28] B1 [28,30] -> gradient at 41; stage 0 B1 [41,43] W1 [43,44]
    held = execute(_model(10.0, peer_streams=False), ORDERS, record=True)
    assert _start(held, 0, B, 0) == pytest.approx(26.0)
    assert held.makespan_ms == pytest.approx(44.0)


def test_only_zb_runs_on_per_peer_streams():
    base = PipelineModel(PipelineSpec(3, 6, (1.0,) * 3, (2.0,) * 3, (1.0,) * 3), link_delay_ms=(0.0, 5.0))
    assert get("zb").model_for(base).peer_streams
    for name in ("gpipe", "1f1b", "zb_cpu", "adaptra"):
        assert not get(name).model_for(base).peer_streams
    # a three-stage ZB run finishes (no deadlock on the streams) and pays the delay
    zb = get("zb").model_for(base)
    slow, fast = execute(zb, get("zb").orders(zb)), execute(replace(zb, link_delay_ms=(0.0, 0.0)), get("zb").orders(zb))
    assert slow.makespan_ms > fast.makespan_ms + 5.0


def _plain_issue_plan(model: PipelineModel, orders) -> tuple:
    """The issue order as the module docstring states it, with Python's tuple sort: per stage, nodes
    (time, 0 comm / 1 compute, message number, compute index or -1 send / -2 receive, code)."""
    from gpusched_env.pipeline.streams import _plan_times

    S, Mb = model.stages, model.microbatches
    start, end = _plan_times(model, orders)
    progs: list[list[tuple[float, int, int, int, int]]] = [[] for _ in range(S)]
    tie = 0
    for s in range(S):
        for i, code in enumerate(orders[s]):
            progs[s].append((start[s][i], 1, 0, i, code))
            to = s + 1 if code < Mb else s - 1 if code < 2 * Mb else -1
            if 0 <= to < S:
                tie += 1
                progs[s].append((end[s][i], 0, tie, -1, code))
                progs[to].append((end[s][i], 0, tie, -2, code))
    out = []
    for s in range(S):
        sides: tuple[list, list] = ([], [])
        last = before = -1
        after = False
        for t, _c, _tie, idx, code in sorted(progs[s]):
            if idx >= 0:
                before, last, after = last, idx, True
            elif idx == -1:
                sides[0 if code < Mb else 1].append((True, code, last))
                after = False
            elif after and t <= end[s][last]:
                sides[1 if code < Mb else 0].append((False, code, before))
            else:
                sides[1 if code < Mb else 0].append((False, code, last))
                after = False
        out.append((tuple(sides[0]), tuple(sides[1])))
    return tuple(out)


def test_issue_order_equals_the_plain_tuple_sort_on_adaptra_14b():
    # adaptra_14b's job (S = 8) with M = 24, 30 ms on link 6: many equal planned times (comm before
    # compute, ties by message number), so a wrong sort key changes the order
    from gpusched_env.pipeline.model import link_delays
    from gpusched_env.pipeline.report import load_named

    job = replace(load_named("adaptra_14b").job, microbatches=24, activation_limit=24)
    sched = get("zb")
    model = sched.model_for(job.model()).with_conditions(link_delay_ms=link_delays(8, {6: 30.0}))
    orders = sched.orders(model)
    plan = issue_plan(model, orders)
    plain = replace(model, link_delay_ms=(0.0,) * 7, slowdown=(1.0,) * 8, comm="cpu",
                    pcie_gb_s=float("inf"), cpu_channels=0, overhead_ms=0.0,
                    peer_streams=False, rendezvous=False, injector_group_ranks=False,
                    activation_limit=1 << 30)
    assert plan == _plain_issue_plan(plain, orders)
    assert sum(len(a) + len(b) for a, b in plan) == 2 * 2 * 7 * 24  # every F and B message sent and received once
