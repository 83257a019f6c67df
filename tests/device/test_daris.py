"""DARIS stage model: queue order, EDF, admission, oversubscription speeds, determinism, bad input."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import yaml

from gpusched_env.device import bench
from gpusched_env.device.daris.models import MODELS, context_sms, speed
from gpusched_env.device.daris.scenario import DarisScenario, run_taskset
from gpusched_env.device.daris.scheduler import QUEUE_ORDER, Daris, DarisConfig, queue_of
from gpusched_env.device.daris.sim import Job, StageSim
from gpusched_env.device.daris.taskset import Task, build_taskset
from gpusched_env.scenario import CONF_DIR

RES = MODELS["resnet18"]


def _sim(tasks, cfg: DarisConfig | None = None, horizon=1.0) -> StageSim:
    return StageSim(tasks, Daris(cfg or DarisConfig()), horizon, 68, np.random.SeedSequence(0), jitter=0.0)


def _tasks(n_hp=1, n_lp=1, model=RES) -> list[Task]:
    p = 1 / model.rate_fps
    return [Task(model, True, p, p) for _ in range(n_hp)] + [Task(model, False, p, p) for _ in range(n_lp)]


def test_queue_order_is_the_published_one():
    got = {QUEUE_ORDER[queue_of(h, last, d)] for h in (True, False) for last in (True, False) for d in (True, False)}
    assert got == set(QUEUE_ORDER)
    assert [queue_of(True, True, True), queue_of(True, True, False), queue_of(True, False, True),
            queue_of(True, False, False), queue_of(False, True, True), queue_of(False, False, True),
            queue_of(False, True, False), queue_of(False, False, False)] == list(range(8))


def test_hand_made_stages_are_served_in_queue_then_edf_order():
    sim = _sim(_tasks(2, 2), DarisConfig(contexts=1, streams=8))
    d = sim.sched
    jobs = [  # (task, release, stage, delayed) -> queue
        Job(2, 0.000, 0.033, stage=0),  # lowOther, vdl 8.3 ms
        Job(3, 0.001, 0.034, stage=3, delayed=False),  # lowLast
        Job(0, 0.002, 0.035, stage=1, delayed=True),  # highDelayed
        Job(1, 0.000, 0.033, stage=3, delayed=True),  # highLastDelayed
        Job(0, 0.004, 0.037, stage=0),  # highOther, later vdl
        Job(1, 0.003, 0.036, stage=0),  # highOther, earlier vdl
    ]
    for j in jobs:
        d._enqueue(j, 0.0)
    assert d.choices(0) == [0, 2, 3, 6, 7]
    served = []
    while d.pending() >= 0:
        q = d.choices(0)[0]
        served.append((q, d.queues[0][q][0][2].task, round(d.queues[0][q][0][0] * 1e3, 4)))
        d.serve(0, q)
    # virtual deadline = release + Σ round(MRET_s / ΣMRET · 33.333 ms) in µs: 8.333 ms per stage
    assert served == [(0, 1, 33.332), (2, 0, 18.666), (3, 1, 11.333), (3, 0, 12.333),
                      (6, 3, 34.332), (7, 2, 8.333)]


def test_admission_accepts_exactly_when_the_inequality_holds():
    sim = _sim(_tasks(1, 2), DarisConfig(contexts=2, streams=2))
    d = sim.sched
    d.ctx_of = [0, 0, 1]
    d.u = [0.8, 0.5, 1.0]  # ctx 0: HP 0.8 -> active util 0.4; ctx 1: LP task 2 inactive
    d.active = [0, 0, 0]
    assert d.active_util(0) == pytest.approx(0.4)
    assert d.admit(1)  # 0.4 + 0.5 < 1
    d.u[1] = 0.6  # 0.4 + 0.6 == 1: not < 1; ctx 1 overall 0.5 < 0.7 - 0.6? no -> skipped
    assert not d.admit(1)
    d.u = [0.8, 0.6, 0.1]  # ctx 1 overall 0.05 < 0.7 - 0.6 = 0.1, active 0 + 0.6 < 1: migrates
    assert d.admit(1) and d.ctx_of[1] == 1
    d.ctx_of, d.active, d.u = [0, 0, 1], [0, 0, 1], [0.8, 0.6, 0.9]
    assert not d.admit(1)  # ctx 1 overall 0.45 not < 0.1
    assert d.admit(0)  # HP always


def test_oversubscribed_contexts_slow_down_as_the_sm_curve_says():
    assert [context_sms(68, 3, 1.0), context_sms(68, 3, 1.5), context_sms(68, 2, 2.0), context_sms(68, 5, 1.0)] == [24, 34, 68, 14]
    sim = _sim(_tasks(2, 0), DarisConfig(contexts=2, streams=1, oversubscription=2.0))
    assert [p.sms for p in sim.parts] == [68, 68]
    sim.launch(0, [Job(0, 0, 1)], 1e-3, 0.7, False)
    assert sim.running[0].rate == pytest.approx(1.0)  # one context alone: all 68 SMs
    sim.launch(1, [Job(1, 0, 1)], 1e-3, 0.7, False)
    want = speed(34, 68, 0.7)  # both busy: 136 SMs asked of 68 -> 34 each
    assert want == pytest.approx(1 / (0.7 + 0.3 * 2))
    assert [w.rate for w in sim.running] == pytest.approx([want, want])
    assert speed(20, 68, 0.7) == pytest.approx(0.58, abs=0.01)  # DEVICE.md: ~0.55 at 20/68 SMs


def test_batching_overloaded_runs_batches_of_ten_back_to_back():
    scn = DarisScenario("t", tasksets=["resnet"], duration_s=1.0)
    m = run_taskset(scn, "batching", 0, 0)
    assert m["throughput_jobs_s"] == pytest.approx(1036, rel=0.01)  # the measured batch-10 rate, its own latency
    assert m["hp_deadline_miss_rate"] > 0.9 and m["acceptance_rate"] == 1.0


def test_daris_meets_hp_deadlines_and_is_deterministic():
    scn = DarisScenario("t", tasksets=["resnet", "mix"], duration_s=1.0)
    a, b, c = (run_taskset(scn, "daris", s, 1) for s in (0, 0, 1))
    assert a == b and a != c
    assert a["hp_deadline_miss_rate"] == 0.0 and a["lp_deadline_miss_rate"] < 0.02
    assert 0.5 < a["lp_acceptance_rate"] < 1.0 and a["acceptance_rate"] > a["lp_acceptance_rate"]


def test_tasksets_and_phases():
    ts = build_taskset("mix", np.random.default_rng(0))
    assert len(ts) == 28 and sum(t.high for t in ts) == 10
    assert all(0 <= t.phase_s < t.period_s and t.deadline_s == t.period_s for t in ts)


@pytest.mark.parametrize(("kw", "field"), [({"period_s": 0.0}, "period_s"), ({"deadline_s": 1e-3}, "deadline_s")])
def test_bad_tasks_rejected(kw, field):
    args = {"model": MODELS["resnet18"], "high": True, "period_s": 0.033, "deadline_s": 0.033} | kw
    with pytest.raises(ValueError, match=field):
        Task(**args)


def test_bad_contexts_rejected():
    with pytest.raises(ValueError, match=r"contexts must be in \[1, 68\]"):
        context_sms(68, 69, 1.0)
    with pytest.raises(ValueError, match=r"daris contexts must be in \[1, 8\]"):
        DarisConfig(contexts=9)
    with pytest.raises(ValueError, match="tasksets"):
        DarisScenario("t", tasksets=["vgg"])


def test_daris_rt_loads_through_the_device_bench():
    raw = yaml.safe_load((CONF_DIR / "scenario" / "daris_rt.yaml").read_text())
    scn = bench.load({k: v for k, v in raw.items() if k != "level"}, "daris_rt")
    assert isinstance(scn, DarisScenario) and scn.workload_names == ["resnet", "unet", "inception", "mix"]
    assert {"daris", "batching", "gslice", "mps"} <= set(bench.POLICIES)
    short = replace(scn, duration_s=0.3)
    run = bench.run(short, "gslice", 0, 3)
    assert {"throughput_jobs_s", "hp_deadline_miss_rate", "lp_deadline_miss_rate", "hp_response_ms"} <= set(run.metrics)


def test_stage_overhead_holds_the_stream_and_does_not_scale_with_sms():
    # one HP ResNet-18 job, 1 context on all 68 SMs: each of its 4 stages lasts a + h, a = 1/724 s / 4
    a, h = 1 / 724 / 4, 0.33e-3
    sim = _sim(_tasks(1, 0), DarisConfig(contexts=1, streams=1, stage_overhead_s=h), horizon=0.02)
    sim.run()
    assert sim.stats[True].response_s[0] == pytest.approx(4 * (a + h))
    # 2 contexts of 34 SMs: the work part takes a · (0.7 + 0.3 · 68/34) (SGPRS curve), the overhead stays h
    half = _sim(_tasks(1, 0), DarisConfig(contexts=2, streams=1, stage_overhead_s=h), horizon=0.02).run()
    assert half.stats[True].response_s[0] == pytest.approx(4 * (h + a * 1.3))
