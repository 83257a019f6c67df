"""The leaner toggles and completions (docs/PERFORMANCE.md, "Eleventh pass") against the plain
steps: toggles at a job's last settle (no time passed) and in one instant, a speed-up arming an
earlier completion, and completions of one- and several-GPU jobs."""

from __future__ import annotations

import copy
import math

from gpusched.baselines import get_policy
from gpusched_env.allocation import ClusterState
from gpusched_env.cluster.model import SimModel
from gpusched_env.cluster.simulator import Simulator
from gpusched_env.topology import NodeGroup, Topology
from gpusched_env.types import Job, Start


def _started() -> Simulator:
    """Three jobs (1, 2 and 4 GPUs) started by FIFO at t=0 on two 4-GPU nodes."""
    topo = Topology.build([NodeGroup(2, 4, "V100", 16.0)])
    jobs = [Job(i, 0.0, n, 5000.0, "resnet50", perf_class="A", mem_gb=4.0) for i, n in enumerate([1, 2, 4])]
    sim = Simulator(topo, jobs, SimModel(start_cost_s=7.0), seed=3)
    sim.start(None)
    assert sim.advance()
    sim.apply(get_policy("fifo").decide(sim.view()))
    assert len(sim.runs) == 3 and sim.env.now == 0.0
    return sim


def _state(sim: Simulator) -> tuple[object, ...]:
    runs = {j: (r.iter_s, r.due, r.armed_at, r.last_t, r.version) for j, r in sim.runs.items()}
    heap = sorted((e[0], e[2], e[4][0], e[4][2]) for e in sim.env.heap if isinstance(e[4], tuple))
    return sim.done, sim.attained, sim.records, runs, heap, sim.env.now, sim.env.order


def test_toggles_in_one_instant_give_the_plain_floats():
    """The batch loop (:meth:`Simulator._toggles`) against the plain steps, toggle by toggle: a
    toggle at the jobs' start (no time passed), a slowdown and a speed-up of the same GPU at one
    later instant (the second settles no time, and arms an earlier completion), on the GPU of the
    two- and the four-GPU job."""
    fast = _started()
    plain = copy.deepcopy(fast)
    plain.incremental_toggles = plain.written_out = False
    g2, g4 = fast.state.running[1].gpus[1], fast.state.running[2].gpus[0]
    hits = [0.0, g2, 1.5, 400.0, g4, 2.0, 400.0, g2, 1.0, 400.0, g4, 1.0]
    k, limit = fast._toggles([float(x) for x in hits], math.inf, -math.inf)
    assert (k, limit) == (-1, math.inf)
    for i in range(0, len(hits), 3):
        plain.env.now = hits[i]
        plain.set_straggle(int(hits[i + 1]), hits[i + 2])
    assert _state(fast) == _state(plain)
    # by hand: the 4-GPU job worked 400 - 7 s at its (unslowed) pace when both toggles of t=400 came
    run = fast.runs[2]
    assert fast.done[2] == (400.0 - 7.0) / run.iter_s
    assert fast.attained[2] == 400.0 * 4 and fast.records[2].gpu_seconds == 400.0 * 4


def test_a_batch_cut_short_by_an_armed_completion():
    """A speed-up that arms a completion before the limit moves it there; the toggles after it
    that the loop already ran (``last_t`` at or after the new limit) are left: their 1-based
    start is returned. The one applied gives the plain steps' floats."""
    fast = _started()
    g1 = float(fast.state.running[0].gpus[0])
    fast._toggles([0.0, g1, 3.0], math.inf, -math.inf)  # the one-GPU job slowed from its start
    assert fast.advance() and fast.advance()  # the other two finish; its early event re-arms it
    assert list(fast.runs) == [0] and fast.env.now > fast.runs[0].last_t
    late, version = fast.runs[0].armed_at, fast.runs[0].version
    plain = copy.deepcopy(fast)
    plain.incremental_toggles = plain.written_out = False
    k, limit = fast._toggles([1000.0, g1, 1.0, 1100.0, g1, 3.0], late, 1e9)
    run = fast.runs[0]
    assert k == 1 and limit == run.armed_at == run.due < late and run.version == version + 1
    plain.env.now = 1000.0
    plain.set_straggle(int(g1), 1.0)
    assert _state(fast) == _state(plain)


def test_finish_is_the_removing_place():
    """``ClusterState.finish`` (``running`` and ``jobs`` popped, then ``_place``) against ``_place(job,
    gpus, -1)``: a two-GPU job sharing one GPU with another job, then a one-GPU job on a GPU of a
    node that is down (it stays not free); the counts, masks, memory and share sums by hand."""
    topo = Topology.build([NodeGroup(2, 2, "V100", 16.0)])
    fast = ClusterState(topo, 2)
    for j in (Job(0, 0.0, 2, 100, "resnet50", mem_gb=10.0), Job(1, 0.0, 1, 100, "resnet50", mem_gb=3.0),
              Job(2, 0.0, 1, 100, "resnet50", mem_gb=2.5)):
        fast.submit(j)
    fast.apply([Start(0, (0, 1)), Start(1, (1,)), Start(2, (3,))], 0.0)
    fast.set_up([2, 3], False)
    plain = copy.deepcopy(fast)
    for jid in (0, 2):
        alloc = fast.finish(jid)
        want = plain.running.pop(jid)
        plain._place(plain.jobs.pop(jid), want.gpus, -1)
        assert alloc == want
        for name in ("n_resident", "free_mask", "mem_used", "share_used"):
            assert getattr(fast, name).tolist() == getattr(plain, name).tolist(), name
        assert (fast.n_free, fast.resident, set(fast.jobs), set(fast.running)) == (
            plain.n_free, plain.resident, set(plain.jobs), set(plain.running))
    assert fast.n_resident.tolist() == [0, 1, 0, 0] and fast.free_mask.tolist() == [True, False, False, False]
    assert fast.n_free == 1 and fast.mem_used.tolist() == [0.0, 3.0, 0.0, 0.0]


def test_a_plain_batch_of_starts_places_as_the_checked_path():
    """A batch of starts shown valid in one pass (``_plain_starts``) places its jobs with the
    adding half of ``_place`` written out: the same state as the fully checked path, and by hand
    (a job using no memory adds none)."""
    topo = Topology.build([NodeGroup(2, 2, "V100", 16.0)])
    fast = ClusterState(topo, 2)
    for j in (Job(0, 0.0, 2, 100, "resnet50", mem_gb=10.0), Job(1, 0.0, 1, 100, "resnet50", mem_gb=0.0),
              Job(2, 1.0, 1, 100, "resnet50", mem_gb=2.5)):
        fast.submit(j)
    plain = copy.deepcopy(fast)
    plain._plain_starts = lambda decisions: None  # type: ignore[method-assign]
    batch = [Start(2, (3,)), Start(0, (0, 2))]
    assert fast._plain_starts(batch) is not None
    a, b = fast.apply(batch, 5.0), plain.apply(batch, 5.0)
    assert a.started == b.started == [2, 0] and fast.running == plain.running
    for name in ("n_resident", "free_mask", "mem_used", "share_used"):
        assert getattr(fast, name).tolist() == getattr(plain, name).tolist(), name
    assert (fast.n_free, fast.resident, [j.job_id for j in fast.pending]) == (
        plain.n_free, plain.resident, [j.job_id for j in plain.pending])
    assert fast.n_free == 1 and fast.n_resident.tolist() == [1, 0, 1, 1]
    assert fast.mem_used.tolist() == [10.0, 0.0, 10.0, 2.5] and fast.resident == [[0], [], [0], [2]]
    fast.apply([Start(1, (1,))], 6.0)
    assert fast.n_free == 0 and fast.mem_used.tolist() == [10.0, 0.0, 10.0, 2.5] and fast.free_mask.tolist() == [False] * 4
