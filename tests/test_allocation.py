"""Decision validation: each rule raises InvalidDecision naming it; a failed batch changes nothing."""

from __future__ import annotations

import numpy as np
import pytest

from gpusched_env.allocation import ClusterState
from gpusched_env.topology import NodeGroup, Topology
from gpusched_env.types import InvalidDecision, Job, Migrate, Preempt, Sharing, Start


def state(max_jobs: int = 2) -> ClusterState:
    s = ClusterState(Topology.build([NodeGroup(2, 2, "V100", 16.0), NodeGroup(1, 2, "P100", 16.0)]), max_jobs)
    s.submit(Job(0, 0.0, 2, 100, "resnet50", mem_gb=10.0))
    s.submit(Job(1, 1.0, 1, 100, "resnet50", mem_gb=10.0))
    s.submit(Job(2, 2.0, 1, 100, "resnet50", mem_gb=4.0, gpu_type="P100"))
    return s


@pytest.mark.parametrize(
    ("decisions", "rule"),
    [
        ([Start(9, (0, 1))], "job-unknown"),
        ([Start(0, (0,))], "gpu-count"),
        ([Start(0, (0, 0))], "gpu-distinct"),
        ([Start(0, (0, 99))], "gpu-exists"),
        ([Start(2, (0,))], "gpu-type"),
        ([Start(1, (0,), Sharing("exclusive")), Start(0, (0, 1))], "sharing-exclusive"),
        ([Start(1, (0,), Sharing.mps(50)), Start(0, (0, 1))], "sharing-mix"),
        ([Start(1, (0,), Sharing.mps(60)), Start(0, (0, 1), Sharing.mps(50))], "sharing-mps-sum"),
        ([Preempt(1)], "job-not-running"),
        ([Migrate(1, (2,))], "job-not-running"),
        ([Start(1, (0,)), Start(1, (1,))], "duplicate-job"),
        ([Start(0, (0, 1)), Start(1, (0,))], "gpu-memory"),  # 10 + 10 GB > 16 GB
    ],
)
def test_rules(decisions, rule):
    s = state()
    before = (list(s.pending), dict(s.running), s.n_resident.copy())
    with pytest.raises(InvalidDecision) as e:
        s.apply(decisions, 0.0)
    assert e.value.rule == rule
    assert rule in str(e.value)
    assert (list(s.pending), dict(s.running)) == before[:2] and (s.n_resident == before[2]).all()


def test_max_jobs_per_gpu():
    s = ClusterState(Topology.build([NodeGroup(1, 1)]), max_jobs_per_gpu=2)
    for i in range(3):
        s.submit(Job(i, 0.0, 1, 10, "dcgan", mem_gb=1.0))
    s.apply([Start(0, (0,)), Start(1, (0,))], 0.0)
    with pytest.raises(InvalidDecision, match="max-jobs-per-gpu"):
        s.apply([Start(2, (0,))], 0.0)


def test_down_gpu_rejected():
    s = state()
    s.set_up([1], False)
    with pytest.raises(InvalidDecision, match="gpu-down"):
        s.apply([Start(0, (0, 1))], 0.0)


def test_batch_can_swap_jobs():
    s = ClusterState(Topology.build([NodeGroup(1, 2)]), max_jobs_per_gpu=1)
    s.submit(Job(0, 0.0, 1, 10, "dcgan"))
    s.submit(Job(1, 0.0, 1, 10, "dcgan"))
    s.apply([Start(0, (0,)), Start(1, (1,))], 0.0)
    s.apply([Migrate(0, (1,)), Migrate(1, (0,))], 5.0)  # legal only as one batch
    assert s.running[0].gpus == (1,) and s.running[1].gpus == (0,)
    assert s.running[0].since_s == 5.0


def test_preempt_requeues_in_arrival_order():
    s = state()
    s.apply([Start(0, (0, 1)), Start(1, (2,))], 0.0)
    s.apply([Preempt(0)], 3.0)
    assert [j.job_id for j in s.pending] == [0, 2]
    assert s.free_mask.tolist() == [True, True, False, True, True, True]


def test_sharing_modes_checked_per_gpu():
    s = ClusterState(Topology.build([NodeGroup(1, 1)]), max_jobs_per_gpu=4)
    for i in range(4):
        s.submit(Job(i, 0.0, 1, 10, "dcgan", mem_gb=1.0))
    s.apply([Start(0, (0,), Sharing.mps(60)), Start(1, (0,), Sharing.mps(40))], 0.0)  # sums to 100: allowed
    with pytest.raises(InvalidDecision, match="sharing-mps-sum"):
        s.apply([Start(2, (0,), Sharing.mps(1))], 0.0)
    s.apply([Preempt(1)], 1.0)
    s.apply([Start(2, (0,), Sharing.mps(40))], 1.0)  # the leaver's share is free again
    over = ClusterState(Topology.build([NodeGroup(1, 1)]), max_jobs_per_gpu=4)
    for i in range(2):
        over.submit(Job(i, 0.0, 1, 10, "dcgan", mem_gb=1.0))
    over.apply([Start(i, (0,), Sharing.mps(80, oversubscribe=True)) for i in range(2)], 0.0)
    assert over.n_resident[0] == 2


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [({"kind": "mig"}, "kind"), ({"kind": "mps", "sm_pct": 0.0}, "sm_pct"), ({"kind": "mps", "sm_pct": 150.0}, "sm_pct"),
     ({"kind": "exclusive", "sm_pct": 50.0}, "MPS-only")],
)
def test_bad_sharing_named(kwargs, field):
    with pytest.raises(ValueError, match=field):
        Sharing(**kwargs)


def test_one_tenant_fast_path_takes_freed_gpus_and_leaves_staying_tenants_to_the_full_check():
    # max 2 jobs per GPU: a preemption and a start on the freed GPUs pass (each GPU then holds one job)
    s = state()
    s.apply([Start(1, (0,), Sharing("exclusive"))], 0.0)
    s.apply([Preempt(1), Start(0, (0, 1))], 1.0)
    assert s.running[0].gpus == (0, 1) and 1 not in s.running
    assert s.resident[0] == [0] and s.n_resident.tolist() == [1, 1, 0, 0, 0, 0]
    # an exclusive tenant that stays on GPU 0: the start there must still be refused
    s = state()
    s.apply([Start(1, (0,), Sharing("exclusive"))], 0.0)
    with pytest.raises(InvalidDecision, match="sharing-exclusive"):
        s.apply([Start(0, (0, 1))], 1.0)


def test_plain_starts_fast_path_equals_the_full_checks():
    """A batch of starts on empty GPUs is applied without the full checks (``_plain_starts``): the
    state after is the one the full path leaves; a batch it cannot show valid (a GPU used twice, a
    typed job, a busy GPU) still goes to the full checks and fails with their rule."""
    fast, full = state(), state()
    batch = [Start(1, (3,)), Start(0, (0, 1))]
    assert fast._plain_starts(batch) is not None
    fast.apply(batch, 5.0)
    full._plain_starts = lambda decisions: None  # type: ignore[method-assign]
    full.apply(batch, 5.0)
    for s in (fast, full):
        assert list(s.pending_ids) == [2] and s.pending_gpus == 1 and s.n_free == 3
        assert s.running[0].gpus == (0, 1) and s.running[1].since_s == 5.0
        assert s.resident[:4] == [[0], [0], [], [1]] and s.n_resident.tolist() == [1, 1, 0, 1, 0, 0]
        assert s.mem_used.tolist() == [10.0, 10.0, 0.0, 10.0, 0.0, 0.0] and s.free_mask.tolist() == [
            False, False, True, False, True, True]
    s = state()
    assert s._plain_starts([Start(0, (0, 1)), Start(1, (1,))]) is None  # GPU 1 twice
    with pytest.raises(InvalidDecision, match="gpu-memory"):
        s.apply([Start(0, (0, 1)), Start(1, (1,))], 0.0)
    assert s._plain_starts([Start(2, (4,))]) is None  # names a GPU type: the full check
    s.apply([Start(1, (0,))], 0.0)
    s.submit(Job(3, 3.0, 1, 100, "resnet50", mem_gb=1.0))
    assert s._plain_starts([Start(3, (0,))]) is None  # GPU 0 holds job 1: the capacity check
    s.apply([Start(3, (0,))], 0.0)  # shares (max 2 jobs per GPU, 11 of 16 GB)
    assert s.resident[0] == [1, 3]


def _gpus_shown_valid(s: ClusterState, batch: list[tuple[int, tuple]]) -> bool:
    """The one-pass path's per-GPU rules written as a loop (its definition)."""
    used: set = set()
    for _, gpus in batch:
        for g in gpus:
            if type(g) is not int or not 0 <= g < 6 or g in used or s.resident[g] or not s.up[g]:
                return False
            used.add(g)
    return True


@pytest.mark.parametrize(("gpus", "valid"), [
    ((0, 1), True), ((1, 0), True), ((0, 5), True), ((0, 0), False), ((-1, 0), False), ((5, 6), False),
    ((0, np.int64(1)), False), ((0, 1.0), False), ((True, 0), False), ((4, 5), False), ((2, 3), False),
    ((3, 2), False), ((1, 2), False), ((0, 3), False)])
def test_plain_starts_gpu_rules_equal_their_definition(gpus: tuple, valid: bool) -> None:
    """``_plain_starts``' GPU rules (ints in range, named once, not used earlier in the batch, holding
    no job, up) against the loop that defines them: job 1 starts first on GPU 2, GPU 4 is down, then
    job 0 names ``gpus``; e.g. (0, 1) shown valid, (1, 2) and (0, 0) not."""
    s = state(max_jobs=1)
    s.submit(Job(3, 3.0, 1, 100, "resnet50", mem_gb=1.0))
    s.apply([Start(3, (3,))], 0.0)  # GPU 3 holds job 3
    s.set_up([4], False)
    batch = [(1, (2,)), (0, gpus)]
    got = s._plain_starts([Start(j, g) for j, g in batch]) is not None
    assert got == _gpus_shown_valid(s, batch)
    assert got == valid


def test_compiled_placement_equals_the_plain_steps():
    """The per-GPU arrays updated by the compiled placement equal the plain Python steps': after
    random starts (shared GPUs), preemptions, finishes and a failed node (GPUs down), a state with
    ``compiled`` and one without hold the same counts, free flags, free count and sums, and the sums
    are each GPU's sum over its resident jobs (exact: quarters; a read-only view taken at the start
    sees them); the capacity check reads the current memory."""
    import numpy as np

    topo = Topology.build([NodeGroup(2, 4, "V100", 16.0)])
    s, p = ClusterState(topo, max_jobs_per_gpu=3), ClusterState(topo, max_jobs_per_gpu=3)
    s.compiled, p.compiled = True, False
    ro_mem, rng = s.readonly("mem_used"), np.random.default_rng(1)
    jobs = {}
    for i in range(300):
        jobs[i] = Job(i, float(i), int(rng.choice([1, 2])), 100, "resnet50",
                      mem_gb=float(rng.integers(0, 12)) / 4, gpu_fraction=float(rng.integers(1, 4)) / 4)
        queued = list(s.pending_ids) + [i]
        jid = queued[int(rng.integers(0, len(queued)))]
        ok = [g for g in range(8) if len(s.resident[g]) < 3 and s.up[g]]
        picked = tuple(sorted(int(g) for g in rng.choice(ok, jobs[jid].num_gpus, replace=False))) if (
            len(ok) >= jobs[jid].num_gpus) else None
        gone = list(s.running)[int(rng.integers(0, len(s.running)))] if s.running else None
        leave, preempt = gone is not None and rng.random() < 0.4, rng.random() < 0.5
        for st in (s, p):
            st.submit(jobs[i])
            if picked is not None:
                st.apply([Start(jid, picked)], float(i))
            if leave:
                st.apply([Preempt(gone)], float(i)) if preempt else st.finish(gone)
            if i in (100, 200):
                st.set_up([4, 5, 6, 7], i == 200)  # node 1 down (what it holds stays), then up
        assert s.resident == p.resident and s.n_free == p.n_free == int(s.free_mask.sum())
        for name in ("n_resident", "free_mask", "up", "mem_used", "share_used"):
            assert getattr(s, name).tolist() == getattr(p, name).tolist(), name
        want_mem = [sum(jobs[j].mem_gb for j in s.resident[g]) for g in range(8)]
        want_share = [sum(jobs[j].gpu_fraction for j in s.resident[g]) for g in range(8)]
        assert ro_mem.tolist() == want_mem and s.share_used.tolist() == want_share
        assert s.n_resident.tolist() == [len(r) for r in s.resident]
    g = next(g for g in range(8) if len(s.resident[g]) < 3)
    s.submit(Job(999, 999.0, 1, 100, "resnet50", mem_gb=16.0 - float(s.mem_used[g]) + 0.25))
    with pytest.raises(InvalidDecision, match="gpu-memory"):
        s.apply([Start(999, (g,))], 999.0)


def test_plain_batch_applied_and_logs_and_the_views_arrays() -> None:
    """A plain batch's ``Applied`` (built without its ``__init__``) equals the one its fields give,
    the full path's is not plain; the state logs the started jobs in ``dequeued`` (as ``enqueued``
    logs the queued ones); a view's ``free``, ``up`` and ``n_resident`` are the state's read-only
    arrays, made once, whether the view reads them first or the state made them before."""
    from gpusched_env.allocation import Applied
    from gpusched_env.view import ClusterView

    s = state()
    s.readonly("up")  # made before the view reads it; free and n_resident made by the view
    view = ClusterView(s, 0.0, np.ones((s.topology.n_gpus, 4)), lambda i: None)  # type: ignore[arg-type,return-value]
    free, up, n_res = view.free, view.up, view.n_resident
    assert not free.flags.writeable and free is s.readonly("free_mask") is view.free
    assert up is s.readonly("up") is view.up and n_res is s.readonly("n_resident") is view.n_resident
    assert s.apply([Start(1, (2,)), Start(0, (0, 1))], 0.0) == Applied(started=[1, 0], plain=True)
    assert s.dequeued == [1, 0] and s.enqueued == [0, 1, 2]
    assert list(free) == [False, False, False, True, True, True] and list(n_res) == [1, 1, 1, 0, 0, 0]
    s.submit(Job(3, 3.0, 1, 100, "resnet50", mem_gb=10.0))
    assert s.apply([Preempt(1), Start(3, (3,))], 1.0) == Applied(started=[3], preempted=[1], plain=False)
    assert s.dequeued == [1, 0, 3] and s.enqueued == [0, 1, 2, 3, 1]
