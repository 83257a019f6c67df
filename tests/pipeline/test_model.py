"""Pipeline model: closed forms, comm modes, memory, the planner, bad input."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpusched_env.pipeline import greedy
from gpusched_env.pipeline.execute import execute
from gpusched_env.pipeline.model import PipelineModel, link_delays
from gpusched_env.pipeline.ops import B, F, W, check_orders, op
from gpusched_env.pipeline.schedules import SCHEDULES, get
from gpusched_env.pipeline.spec import PipelineSpec
from gpusched_env.pipeline.warmup import adaptra_warmup, zb_warmup


def _spec(S=4, M=8, f=1.0, b=2.0, w=1.0) -> PipelineSpec:
    return PipelineSpec(S, M, (f,) * S, (b,) * S, (w,) * S)


def _run(name: str, model: PipelineModel, record: bool = False):
    sched = get(name)
    m = sched.model_for(model)
    return execute(m, sched.orders(m), record=record)


@pytest.mark.parametrize("name", ["1f1b", "gpipe"])
def test_closed_form_without_delay(name):
    # S=4, M=8, F=1, B=2, W=1: (M + S - 1)(F + B + W) = 11 * 4 = 44 ms, + overhead 5 ms
    r = _run(name, PipelineModel(_spec(), overhead_ms=5.0))
    assert r.makespan_ms == pytest.approx(44.0)
    assert r.iteration_ms == pytest.approx(49.0)
    # every stage computes M (F + B + W) = 32 ms, so its bubble is 1 - 32/44
    assert r.bubble_fraction == pytest.approx((12 / 44,) * 4)


def test_closed_form_one_stage_and_14b_healthy():
    assert _run("1f1b", PipelineModel(_spec(S=1, M=3))).makespan_ms == pytest.approx(12.0)  # 3 * (1+2+1)
    spec = PipelineSpec(8, 24, (8.9,) * 8, (10.0,) * 8, (5.9,) * 8)
    # (24 + 7) * (8.9 + 10 + 5.9) = 31 * 24.8 = 768.8 ms
    assert _run("1f1b", PipelineModel(spec)).makespan_ms == pytest.approx(768.8)


def test_gpu_driven_send_blocks_sender_by_delay_per_send_without_rendezvous():
    model = PipelineModel(_spec(), link_delay_ms=link_delays(4, {1: 3.0}), rendezvous=False)
    r = _run("1f1b", model)
    # stage 1 sends 8 forwards over link 1, stage 2 sends 8 gradients back over it: 8 * 3 ms each
    assert r.send_blocked_ms == pytest.approx((0.0, 24.0, 24.0, 0.0))
    assert r.makespan_ms > 44.0 + 24.0


def test_cpu_delegated_sender_never_waits():
    delayed = PipelineModel(_spec(), link_delay_ms=link_delays(4, {1: 30.0}))
    r = _run("zb_cpu", delayed, record=True)
    assert r.send_blocked_ms == (0.0, 0.0, 0.0, 0.0)
    # stage 1's forwards of its warm-up (3 of them) run back to back from t = F: no wait after a send
    f1 = sorted((start, end) for s, k, m, start, end in r.timeline if s == 1 and k == F)[:3]
    assert [x[0] for x in f1] == pytest.approx([1.0, 2.0, 3.0])
    # stage 2 receives forward m only 30 ms after stage 1 finished it
    f2 = min(start for s, k, m, start, end in r.timeline if s == 2 and k == F and m == 0)
    assert f2 == pytest.approx(2.0 + 30.0)


def test_gpu_driven_sender_waits_for_delivery():
    delayed = PipelineModel(_spec(), link_delay_ms=link_delays(4, {1: 30.0}))
    zb = get("zb")
    held = zb.model_for(delayed).with_conditions()
    r = execute(replace(held, peer_streams=False), zb.orders(held), record=True)
    f1 = sorted(start for s, k, m, start, end in r.timeline if s == 1 and k == F)[:2]
    assert f1 == pytest.approx([1.0, 2.0 + 30.0])  # the second forward waits for the first send
    # ZB's isend on its per-peer stream: the sleep [2, 32] runs there, stage 1 goes on computing
    r = _run("zb", delayed, record=True)
    f1 = sorted(start for s, k, m, start, end in r.timeline if s == 1 and k == F)[:2]
    assert f1 == pytest.approx([1.0, 2.0])
    assert min(start for s, k, m, start, end in r.timeline if s == 2 and k == F) == pytest.approx(32.0)


@pytest.mark.parametrize("limit", [2, 3, 5])
@pytest.mark.parametrize("delay", [0.0, 20.0])
def test_activation_limit_holds_in_planned_schedules(limit, delay):
    model = PipelineModel(_spec(M=12), link_delay_ms=link_delays(4, {2: delay}), activation_limit=limit, comm="cpu")
    for name in ("zb", "zb_cpu", "adaptra"):
        r = _run(name, model)
        assert max(r.peak_activations) == limit  # warm-up wants more, so the cap is reached
    with pytest.raises(ValueError, match="activation_limit"):
        _run("gpipe", model)


def test_1f1b_peak_is_stages_minus_index_and_executor_rejects_overfull_order():
    r = _run("1f1b", PipelineModel(_spec()))
    assert r.peak_activations == (4, 3, 2, 1)
    gp = get("gpipe")
    with pytest.raises(ValueError, match="activation_limit 4"):
        execute(PipelineModel(_spec(), activation_limit=4), gp.orders(PipelineModel(_spec())))


def test_orders_valid_and_planner_matches_executor():
    model = PipelineModel(_spec(S=5, M=10), link_delay_ms=(0.0, 7.0, 0.0, 2.0), comm="cpu")
    for sched in SCHEDULES.values():
        check_orders(sched.orders(sched.model_for(model)), 5, 10)
    orders, predicted = greedy.plan(model, adaptra_warmup(model.durations()[0], model.link_delay_ms))
    assert execute(model, orders).makespan_ms == pytest.approx(predicted)


def test_warmup_rules():
    assert zb_warmup(8) == (15, 13, 11, 9, 7, 5, 3, 1)
    # c = 30 ms on link 6, F = 8.9: ceil(30 / 8.9) = 4, so w6 = 1 + 4 + 2 = 7, then +2 per stage
    assert adaptra_warmup((8.9,) * 8, link_delays(8, {6: 30.0})) == (19, 17, 15, 13, 11, 9, 7, 1)


def test_adaptra_beats_zb_cpu_under_a_slow_link_and_equals_it_healthy():
    spec = PipelineSpec(8, 24, (8.9,) * 8, (10.0,) * 8, (5.9,) * 8)
    healthy, slow = PipelineModel(spec), PipelineModel(spec, link_delay_ms=link_delays(8, {6: 60.0}))
    assert _run("adaptra", healthy).makespan_ms == pytest.approx(_run("zb_cpu", healthy).makespan_ms)
    assert _run("adaptra", slow).makespan_ms < 0.7 * _run("zb_cpu", slow).makespan_ms
    assert _run("zb_cpu", slow).makespan_ms < _run("zb", slow).makespan_ms


def test_slowdown_scales_every_op():
    r = _run("1f1b", PipelineModel(_spec(), slowdown=(2.0,) * 4))
    assert r.makespan_ms == pytest.approx(88.0)


def test_check_orders_rejects_w_before_b():
    M = 2
    bad = ((op(F, 0, M), op(W, 0, M), op(B, 0, M), op(F, 1, M), op(B, 1, M), op(W, 1, M)),)
    with pytest.raises(ValueError, match="F before B before W"):
        check_orders(bad, 1, M)


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: PipelineSpec(0, 4, (), (), ()), "stages"),
        (lambda: PipelineSpec(4, 3, (1.0,) * 4, (1.0,) * 4, (1.0,) * 4), "microbatches"),
        (lambda: PipelineSpec(2, 4, (1.0, -1.0), (1.0,) * 2, (1.0,) * 2), "f_ms"),
        (lambda: PipelineSpec(2, 4, (1.0,) * 2, (1.0,) * 2, (-0.5, 1.0)), "w_ms"),
        (lambda: link_delays(4, {3: 10.0}), r"link index must be in 0\.\.2"),
        (lambda: link_delays(4, {-1: 10.0}), r"link index must be in 0\.\.2"),
        (lambda: PipelineModel(_spec(), link_delay_ms=(0.0, -1.0, 0.0)), "link_delay_ms"),
        (lambda: PipelineModel(_spec(), slowdown=(0.5, 1.0, 1.0, 1.0)), "slowdown"),
        (lambda: PipelineModel(_spec(), comm="nccl"), "comm"),
        (lambda: PipelineModel(_spec(), activation_limit=0), "activation_limit"),
        (lambda: get("pipedream"), "policy"),
    ],
)
def test_bad_input_names_the_field(make, field):
    with pytest.raises(ValueError, match=field):
        make()
