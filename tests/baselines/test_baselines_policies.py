"""Policies on hand-built views: every decision returned here goes through ClusterState.apply."""

from __future__ import annotations

import numpy as np
import pytest
from bl_helpers import Progress, job, make_state, make_view, run_on, step

from gpusched.baselines import POLICY_NAMES, get_policy, policy_params
from gpusched.baselines.ordering import AgedMlfqOrder, LasOrder, TiresiasOrder
from gpusched_env.policy import Policy
from gpusched_env.types import Migrate, Preempt, Start


def rng() -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(7))


# -- registry -----------------------------------------------------------------------------------
def test_registry_names_and_protocol():
    assert set(POLICY_NAMES) == {
        "fifo", "sjf", "srtf", "las", "tiresias", "gandiva", "packed_sticky", "packed_nonsticky",
        "random_sticky", "random_nonsticky", "pm_first", "pal", "fifo_packed", "eaco", "mlfq_aged",
    }  # fmt: skip
    for name in POLICY_NAMES:
        p = get_policy(name, rng=rng()) if name.startswith("random") else get_policy(name)
        assert isinstance(p, Policy)
        assert p.name == name


def test_registry_errors():
    with pytest.raises(ValueError, match="unknown policy 'nope'.*fifo.*eaco"):
        get_policy("nope")
    with pytest.raises(ValueError, match="unknown parameter 'speed'.*'las'"):
        get_policy("las", speed=3)
    with pytest.raises(ValueError, match="needs rng"):
        get_policy("random_sticky")
    assert policy_params("tiresias")["threshold_gpu_s"] == 3600.0
    assert get_policy("las", round_s=60).round_s == 60


# -- FIFO / SJF ---------------------------------------------------------------------------------
def test_fifo_head_of_line_and_packed():
    s = make_state(2, 4)
    for j in [job(0, 3), job(1, 4), job(2, 2), job(3, 1)]:
        s.submit(j)
    p = get_policy("fifo")
    # job 2 needs 2 GPUs, only GPU 3 is left: head-of-line stop, job 3 (1 GPU) waits too
    assert step(p, s, make_view(s)) == [Start(0, (0, 1, 2)), Start(1, (4, 5, 6, 7))]
    assert step(p, s, make_view(s, 1.0)) == []
    s.finish(0)
    # node 0 has 4 free: no node with exactly 2 -> smallest with >= 2 -> (0, 1); then (2,)
    assert step(p, s, make_view(s, 2.0)) == [Start(2, (0, 1)), Start(3, (2,))]


def test_sjf_orders_by_total_work_and_cache_tracks_queue():
    s = make_state(1, 2)
    s.submit(job(0, 2, work=10))
    run_on(s, 0, (0, 1))
    s.submit(job(1, 1, work=5000))
    s.submit(job(2, 1, work=50))
    p = get_policy("sjf")
    assert step(p, s, make_view(s)) == []
    s.submit(job(3, 1, work=1))
    s.finish(0)
    assert step(p, s, make_view(s, 10.0)) == [Start(3, (0,)), Start(2, (1,))]
    s.finish(3)
    assert step(p, s, make_view(s, 20.0)) == [Start(1, (0,))]


# -- LAS / Tiresias / SRTF ----------------------------------------------------------------------
def test_las_and_tiresias_order():
    s = make_state(1, 4)
    for j in [job(0), job(1), job(2), job(3)]:
        s.submit(j)
    prog = Progress(s, attained={0: 5000.0, 1: 100.0, 2: 3000.0, 3: 0.0})
    v = make_view(s, progress=prog)
    las, tir = LasOrder(), TiresiasOrder(3600.0)
    assert sorted(s.pending, key=lambda j: las(v, j)) == [s.jobs[i] for i in (3, 1, 2, 0)]
    # queue 0 (< 3600 GPU-s): jobs 1, 2, 3 in FIFO order; queue 1: job 0
    assert sorted(s.pending, key=lambda j: tir(v, j)) == [s.jobs[i] for i in (1, 2, 3, 0)]


def test_aged_mlfq_order_by_hand():
    s = make_state(1, 4)
    for j in [job(0, 1), job(1, 2), job(2, 1), job(3, 1)]:  # arrivals 0, 1, 2, 3 s (job(i) arrives at i)
        s.submit(j)
    prog = Progress(s, attained={0: 100.0, 1: 200.0, 2: 3600.0, 3: 20_000.0})
    order = AgedMlfqOrder(threshold_gpu_s=3600.0, factor=4.0, aging=0.1)
    assert [order.queue(a) for a in (0.0, 3599.0, 3600.0, 14_399.0, 14_400.0, 57_600.0)] == [0, 0, 1, 1, 2, 3]
    # at t = 1001 s: job 0 100 - 0.1 x 1001 x 1 = -0.1; job 1 200 - 0.1 x 1000 x 2 = 0.0 (queue 0 both);
    # job 2 queue 1, job 3 queue 2 (20,000 >= 14,400)
    keys = {j.job_id: order(make_view(s, 1001.0, progress=prog), j) for j in s.pending}
    assert keys[0][:2] == pytest.approx((0.0, -0.1)) and keys[1][:2] == pytest.approx((0.0, 0.0))
    assert sorted(s.pending, key=lambda j: keys[j.job_id]) == [s.jobs[i] for i in (0, 1, 2, 3)]
    # at t = 1: job 0 100 - 0.1 = 99.9, job 1 200 - 0 = 200: LAS's order; aging 0 is LAS inside a queue
    early = make_view(s, 1.0, progress=prog)
    assert order(early, s.jobs[0])[1] == pytest.approx(99.9) and order(early, s.jobs[1])[1] == 200.0
    # at t = 3001 the two-GPU job has aged past job 0: 200 - 600 = -400 < 100 - 300.1
    late = make_view(s, 3001.0, progress=prog)
    assert sorted([s.jobs[0], s.jobs[1]], key=lambda j: order(late, j)) == [s.jobs[1], s.jobs[0]]
    for bad, match in ((dict(threshold_gpu_s=0.0), "threshold"), (dict(factor=1.0), "factor"),
                       (dict(aging=float("nan")), "aging")):
        with pytest.raises(ValueError, match=match):
            AgedMlfqOrder(**bad)


def test_las_lease_keeps_a_started_job_for_its_rounds():
    """lease_rounds=2 (720 s at 360 s rounds): job 0, started at t = 0, keeps its GPU at the 360 s round and
    loses it at 720 s, as plain LAS takes it at 360 s (test below); a pending job holds no lease."""
    s = make_state(1, 2)
    for j in (job(0, 1), job(1, 1)):
        s.submit(j)
    run_on(s, 0, (0,))
    run_on(s, 1, (1,), now=300.0)
    s.submit(job(2, 1))
    prog = Progress(s, attained={0: 900.0, 1: 100.0})
    leased = get_policy("las", lease_rounds=2)
    assert step(leased, s, make_view(s, 360.0, progress=prog)) == []
    out = step(get_policy("las", lease_rounds=2), s, make_view(s, 720.0, progress=prog))
    assert out == [Preempt(0), Start(2, (0,))]
    # after that round: job 1 (started at 300 s) and job 2 (started now) hold leases; job 0, queued again, none
    keys = {j: leased.order(make_view(s, 720.0, progress=prog), s.jobs[j]) for j in (0, 1, 2)}
    assert [keys[j][0] for j in (0, 1, 2)] == [1.0, 0.0, 0.0]
    assert keys[0][1:] == (900.0, 0.0, 0)  # then LAS's key as it is
    with pytest.raises(ValueError, match="lease_rounds"):
        get_policy("las", lease_rounds=-1.0)


def test_las_round_preempts_most_served():
    s = make_state(1, 2)
    s.submit(job(0, 1))
    s.submit(job(1, 1))
    run_on(s, 0, (0,))
    run_on(s, 1, (1,))
    s.submit(job(2, 1))
    prog = Progress(s, attained={0: 900.0, 1: 100.0})
    out = step(get_policy("las"), s, make_view(s, 360.0, progress=prog))
    assert out == [Preempt(0), Start(2, (0,))]


def test_srtf_preempts_long_job_for_short_one():
    s = make_state(1, 2)
    s.submit(job(0, 2, work=1e6))
    run_on(s, 0, (0, 1))
    s.submit(job(1, 1, work=10))
    p = get_policy("srtf")
    out = step(p, s, make_view(s, 0.0))
    # order [1, 0]; prefix: job 1 (1 GPU); job 0 (2 more) exceeds 2 GPUs -> head-of-line stop
    assert out == [Preempt(0), Start(1, (0,))]
    # between rounds (events=True): fill only, never preempt
    s.submit(job(2, 1, work=1))
    assert step(p, s, make_view(s, 10.0)) == [Start(2, (1,))]


def test_tiresias_fill_then_round():
    s = make_state(1, 1)
    s.submit(job(0))
    p = get_policy("tiresias", threshold_gpu_s=100.0)
    assert step(p, s, make_view(s, 0.0)) == [Start(0, (0,))]
    s.submit(job(1))
    prog = Progress(s, attained={0: 200.0})
    assert step(p, s, make_view(s, 100.0, progress=prog)) == []  # not a round yet
    assert step(p, s, make_view(s, 360.0, progress=prog)) == [Preempt(0), Start(1, (0,))]


# -- PAL study baselines ------------------------------------------------------------------------
def test_packed_nonsticky_migrates_and_sticky_keeps():
    def setup():
        s = make_state(2, 2)
        s.submit(job(0, 1))
        run_on(s, 0, (1,))
        s.submit(job(1, 2))
        return s

    s = setup()
    out = step(get_policy("packed_nonsticky"), s, make_view(s, 360.0))
    # all released: job 0 -> smallest node with >= 1 free (node 0, both free) -> GPU 0; job 1 -> node 1
    assert out == [Migrate(0, (0,)), Start(1, (2, 3))]
    s = setup()
    out = step(get_policy("packed_sticky"), s, make_view(s, 360.0))
    assert out == [Start(1, (2, 3))]


def test_random_placement_is_seeded():
    def once():
        s = make_state(4, 4)
        for i in range(5):
            s.submit(job(i, 2))
        return step(get_policy("random_nonsticky", rng=rng()), s, make_view(s))

    a, b = once(), once()
    assert a == b and len(a) == 5


def pal_cluster():
    s = make_state(4, 4)
    sd = np.ones((16, 4))
    sd[:, 0] = np.r_[np.full(8, 1.0), np.full(8, 1.3)]
    jobs = [
        job(0, 2, cls="C"),
        job(1, 4, cls="A"),
        job(2, 1, cls="B"),
        job(3, 2, cls="A"),
        job(4, 8, cls="D"),
    ]
    for j in jobs:
        s.submit(j)
    return s, sd


@pytest.mark.parametrize("name", ["pal", "pm_first"])
def test_pal_rerun_is_stable(name):
    s, sd = pal_cluster()
    p = get_policy(name, k1=2)
    first = step(p, s, make_view(s, 0.0, slowdown=sd))
    # FIFO prefix by count: 2+4+1+2 = 9 <= 16, +8 = 17 > 16 -> jobs 0..3; class order A(1,3) B(2) C(0)
    assert [d.job_id for d in first] == [1, 3, 2, 0]
    assert step(p, s, make_view(s, 360.0, slowdown=sd)) == []  # same GPUs again: no decision
    assert step(p, s, make_view(s, 720.0, slowdown=sd)) == []


def test_pal_places_class_a_on_fast_gpus():
    s, sd = pal_cluster()
    out = step(get_policy("pal", k1=2), s, make_view(s, 0.0, slowdown=sd))
    by_id = {d.job_id: d for d in out}
    assert isinstance(by_id[1], Start) and by_id[1].gpus == (0, 1, 2, 3)  # 4 fast GPUs of node 0
    assert isinstance(by_id[3], Start) and by_id[3].gpus == (4, 5)  # fast node 1


# -- co-location ---------------------------------------------------------------------------------
def full_pair():
    s = make_state(1, 2, max_jobs=2)
    s.submit(job(0, 1, mem=4.0))
    s.submit(job(1, 1, mem=4.0))
    s.submit(job(2, 1, mem=4.0))
    run_on(s, 0, (0,))
    run_on(s, 1, (1,))
    return s


def test_gandiva_packs_onto_least_loaded_when_full():
    s = full_pair()
    util = np.array([0.9, 0.3])
    assert step(get_policy("gandiva"), s, make_view(s, util=util)) == [Start(2, (1,))]
    s = full_pair()
    assert step(get_policy("fifo_packed"), s, make_view(s, util=util)) == [Start(2, (0,))]
    s.submit(job(3, 1, mem=4.0))
    s.submit(job(4, 1, mem=4.0))
    # GPU 0 is at max_jobs_per_gpu (2): job 3 goes to GPU 1, job 4 fits nowhere
    assert step(get_policy("fifo_packed"), s, make_view(s, util=util)) == [Start(3, (1,))]


def test_gandiva_prefers_exclusive():
    s = make_state(1, 2)
    s.submit(job(0))
    s.submit(job(1))
    run_on(s, 0, (0,))
    assert step(get_policy("gandiva"), s, make_view(s)) == [Start(1, (1,))]


# -- smoke: every policy on a small random run ----------------------------------------------------
@pytest.mark.parametrize("name", POLICY_NAMES)
def test_every_policy_random_run_is_valid(name):
    r = np.random.default_rng(np.random.SeedSequence(11))
    s = make_state(3, 4, max_jobs=3)
    sd = 1.0 + np.abs(r.normal(0, 0.08, size=(12, 4)))
    p = get_policy(name, rng=rng()) if name.startswith("random") else get_policy(name)
    prog = Progress(s)
    jid = 0
    t = 0.0
    started = 0
    for _ in range(60):
        t += 120.0
        for _ in range(int(r.integers(0, 3))):
            n = int(r.choice([1, 1, 2, 4, 6]))
            s.submit(job(jid, n, t, cls="ABCD"[jid % 4], mem=float(r.integers(1, 10)), work=1e4))
            jid += 1
        for j in list(s.running):
            prog.ips[j] = 5.0
            prog.attained[j] = prog.attained.get(j, 0.0) + 120.0
            if r.random() < 0.2:
                s.finish(j)
        out = step(p, s, make_view(s, t, slowdown=sd, progress=prog))
        started += sum(isinstance(d, Start) for d in out)
    assert started > 0


def test_fifo_nothing_fits_returns_nothing():
    s = make_state(64, 8)  # 512 GPUs, 8 busy, a 512-GPU job at the head of a long queue
    s.submit(job(0, 8, 0.5))
    run_on(s, 0, tuple(range(8)))
    for i in range(1, 2000):
        s.submit(job(i, 512, float(i)))
    assert get_policy("fifo").decide(make_view(s, 1.0)) == []


def test_idle_round_check_sees_an_arrival():
    """After a round, the same state gives no decision at once; a job entering the queue is seen
    (the check compares the queue by its length and the enqueue log)."""
    from gpusched.baselines.ordering import FifoOrder
    from gpusched.baselines.placement import PackedPlacement
    from gpusched.baselines.scheduler import QueueScheduler

    p = QueueScheduler("r", FifoOrder(), PackedPlacement(), preemptive=True, round_s=10.0,
                       head_of_line=False, events=False)
    s = make_state(1, 3)
    s.submit(job(0, 2))
    s.submit(job(1, 2))
    assert step(p, s, make_view(s, 0.0)) == [Start(0, (0, 1))]  # job 1 does not fit beside it
    assert p._memo is not None and p._memo.matches(make_view(s, 10.0))
    assert step(p, s, make_view(s, 10.0)) == []
    s.submit(job(2, 1))
    assert not p._memo.matches(make_view(s, 20.0))
    assert step(p, s, make_view(s, 20.0)) == [Start(2, (2,))]


def test_can_start_by_hand():
    """fifo: nothing queued, no free GPU, or a head needing more GPUs than are free: False; sjf
    does not stop at the head (a later, smaller job may fit); las (rounds): always True."""
    s = make_state(1, 4)
    fifo, sjf, las = get_policy("fifo"), get_policy("sjf"), get_policy("las")
    assert (fifo.can_start(make_view(s)), sjf.can_start(make_view(s)), las.can_start(make_view(s))) == (
        False, False, True)
    s.submit(job(0, 2))
    s.submit(job(1, 3))
    s.submit(job(2, 1, work=10.0))
    run_on(s, 0, (0, 1))  # queue: job 1 (3 GPUs), job 2 (1 GPU, shorter); 2 GPUs free
    assert (fifo.can_start(make_view(s)), sjf.can_start(make_view(s))) == (False, True)
    assert fifo.decide(make_view(s)) == [] and sjf.decide(make_view(s)) == [Start(2, (2,))]
    run_on(s, 2, (2,))
    s.submit(job(3, 1))
    run_on(s, 3, (3,))  # no GPU free
    assert (fifo.can_start(make_view(s)), sjf.can_start(make_view(s))) == (False, False)
    s.finish(0)  # 2 free again, head still job 1 (3 GPUs)
    assert fifo.can_start(make_view(s)) is False
    s.finish(2)  # 3 free: the head fits
    assert fifo.can_start(make_view(s)) is True
    assert fifo.decide(make_view(s)) == [Start(1, (0, 1, 2))]
