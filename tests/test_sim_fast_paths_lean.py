"""The lean steps of the starts, completions and placements (docs/PERFORMANCE.md, "Tenth pass")
against their plain forms: objects built through their slots, scalar writes through memoryviews,
the packed placement's layout check made once, the compiled timeline called without its dispatcher."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest

from gpusched.baselines.placement import packed_gpus, packed_gpus_numpy
from gpusched.baselines.scheduler import QueueScheduler
from gpusched_env.allocation import Allocation, ClusterState
from gpusched_env.cluster.energy import PowerLedger
from gpusched_env.cluster.processes import _run_toggles
from gpusched_env.compiled import entry_point
from gpusched_env.metrics import Timeline
from gpusched_env.placement import PlacementContext
from gpusched_env.power import PowerConfig
from gpusched_env.topology import NodeGroup, Topology
from gpusched_env.types import WHOLE_GPU, Job, Sharing, Start
from gpusched_env.view import ClusterView


def _topo() -> Topology:
    return Topology.build([NodeGroup(2, 2, "V100", 16.0), NodeGroup(1, 2, "P100", 16.0)])


def _state() -> ClusterState:
    s = ClusterState(_topo(), 2)
    s.submit(Job(0, 0.0, 2, 100, "resnet50", mem_gb=10.0))
    s.submit(Job(1, 1.0, 1, 100, "resnet50", mem_gb=10.0))
    return s


def test_allocation_and_start_built_through_their_slots_are_the_dataclasses():
    """A plain batch's allocations and FIFO's starts are built field by field: equal (and hashing
    alike) to the ones their constructors make, and still frozen."""
    s = _state()
    s.apply([Start(0, (0, 1)), Start(1, (3,))], 5.0)
    a = s.running[0]
    assert type(a) is Allocation and a == Allocation((0, 1), WHOLE_GPU, 5.0)
    assert hash(a) == hash(Allocation((0, 1), WHOLE_GPU, 5.0)) and repr(s.running[1]) == repr(Allocation((3,), WHOLE_GPU, 5.0))
    with pytest.raises(AttributeError):
        a.since_s = 1.0  # type: ignore[misc]
    s2 = _state()
    view = ClusterView(s2, 2.0, np.ones((6, 4)), lambda j: None)  # type: ignore[arg-type,return-value]
    out = QueueScheduler("fifo", _ArrivalOrder(), _FirstFree()).decide(view)
    assert out == [Start(0, (0, 1)), Start(1, (2,))] and [hash(d) for d in out] == [hash(Start(0, (0, 1))), hash(Start(1, (2,)))]
    assert all(type(d) is Start and d.sharing is WHOLE_GPU for d in out)


class _ArrivalOrder:
    is_arrival_order = static = True

    def __call__(self, view: ClusterView, job: Job) -> tuple[float, int]:
        return (job.arrival_s, job.job_id)


class _FirstFree:
    def place(self, job: Job, ctx: PlacementContext) -> tuple[int, ...] | None:
        idx = np.flatnonzero(ctx.eligible(job))
        return tuple(idx[: job.num_gpus].tolist()) if idx.size >= job.num_gpus else None


def test_cluster_state_copies_write_their_own_arrays():
    """``_place`` writes ``n_resident`` and ``free_mask`` through memoryviews: a copy or a pickle of
    the state gets views of its own arrays, so a start on the copy leaves the original as it was."""
    s = _state()
    s.apply([Start(1, (3,))], 1.0)
    for other in (copy.deepcopy(s), pickle.loads(pickle.dumps(s))):
        other.apply([Start(0, (0, 1))], 2.0)
        assert other.n_resident.tolist() == [1, 1, 0, 1, 0, 0] and other.free_mask.tolist() == [
            False, False, True, False, True, True]
        assert s.n_resident.tolist() == [0, 0, 0, 1, 0, 0] and s.free_mask.tolist() == [True, True, True, False, True, True]
        other.finish(0)
        assert other.n_resident.tolist() == [0, 0, 0, 1, 0, 0] and other.n_free == 5 and 0 not in other.jobs


def test_submit_in_order_and_out_of_order():
    """A submit joining the queue's tail is written out; one that does not (an earlier key) takes
    ``_enqueue``'s binary search: the queue stays in (arrival, id) order either way."""
    s = ClusterState(_topo(), 2)
    for jid, t in [(5, 3.0), (7, 4.0), (2, 3.5), (1, 3.0), (9, 9.0)]:
        s.submit(Job(jid, t, 1 + jid % 2, 100, "resnet50", mem_gb=1.0))
    assert list(s.pending_ids) == [1, 5, 2, 7, 9] and s.enqueued == [5, 7, 2, 1, 9]
    assert s.pending_gpus == 2 + 2 + 1 + 2 + 2 and s.pending_sizes == {2: 4, 1: 1}
    assert s._pending_keys == [(3.0, 1), (3.0, 5), (3.5, 2), (4.0, 7), (9.0, 9)]


def test_power_ledger_writes_and_marks_as_before():
    """``set_loads`` writes the per-GPU power and utilisation through memoryviews (the same
    arrays, hand-computed values); ``mark`` adds to the timeline as ``Timeline.add`` does (a second
    mark at the same time replaces the point); a pickled ledger writes its own arrays."""
    topo = _topo()
    p = PowerLedger(topo, PowerConfig(), timeline=True)
    idle, busy = float(p.idle_w[0]), float(p.busy_w[0])
    p.set_loads([(0, 0.5), (5, 2.0)])
    assert p.gpu_power[0] == idle + (busy - idle) * 0.5 and p.gpu_util[0] == 0.5
    assert p.gpu_power[5] == float(p.busy_w[5]) and p.gpu_util[5] == 2.0 and p.busy_gpus == 2
    want = Timeline()
    for t in (0.0, 3.0, 3.0, 4.5):
        p.mark(t)
        want.add(t, p.busy_gpus, p.cluster_power)
        if t == 3.0:
            p.set_loads([(1, 1.0)])
    assert p.timeline == want and p.timeline is not None and p.timeline.t == [0.0, 3.0, 4.5]
    q = pickle.loads(pickle.dumps(p))
    q.set_loads([(0, None)])
    assert q.gpu_power[0] == idle and q.gpu_util[0] == 0.0 and p.gpu_util[0] == 0.5


def test_packed_layout_check_made_once_per_layout():
    """The packed placement's layout check is remembered for the last ``node_first`` array: random
    masks over two layouts in turn and a ``node_first`` that does not span the mask (the numpy path)
    give the numpy definition's GPUs each time."""
    rng = np.random.default_rng(7)
    first_a = np.array([0, 4, 8, 12, 16], dtype=np.int64)
    first_b = np.array([0, 2, 8, 16], dtype=np.int64)
    short = np.array([0, 4, 8], dtype=np.int64)  # nodes of GPUs 0-7 only: not the whole mask
    for i in range(400):
        mask = rng.random(16) < 0.4
        first = (first_a, first_b, short)[i % 3]
        n = int(rng.integers(1, 6))
        assert packed_gpus(mask, n, first) == packed_gpus_numpy(mask, n, first)
    mask = np.zeros(16, dtype=bool)
    mask[[5, 6, 13]] = True
    assert packed_gpus(mask, 1, first_a) == (13,)  # the node with the fewest eligible GPUs
    assert packed_gpus(mask, 2, first_a) == (5, 6)  # the node with exactly two
    assert packed_gpus(mask, 1, first_b) == (13,)  # node 2 (GPUs 8-15) has one, node 1 (2-7) two
    assert packed_gpus(mask.astype(np.int8), 1, first_a) == packed_gpus_numpy(mask.astype(np.int8), 1, first_a)


def test_placement_context_copies_the_free_mask():
    """The context's working mask is a writeable copy of the view's (an array or any sequence)."""
    s = _state()
    view = ClusterView(s, 0.0, np.ones((6, 4)), lambda j: None)  # type: ignore[arg-type,return-value]
    ctx = PlacementContext(view)
    assert ctx.free.dtype == bool and ctx.free.flags.writeable and ctx.free.tolist() == [True] * 6
    ctx.take((0, 2))
    assert view.free.tolist() == [True] * 6 and ctx.free.tolist() == [False, True, False, True, True, True]
    ctx2 = PlacementContext(view, [1, 0, 1, 0, 0, 1])
    assert ctx2.free.tolist() == [True, False, True, False, False, True]


def test_entry_point_is_the_compiled_function():
    """``entry_point`` gives the compiled function for arguments of the types already compiled
    (the same results as the dispatcher), and the dispatcher for types it holds none for."""
    n = 4
    s = np.zeros(2 * (6 * n + 5) + 2 * 4096 + 3 * 64)
    s[:n] = np.inf  # no toggle due: the loop returns at once
    args = (1.0, np.zeros(n, dtype=np.int64), s, 0)
    got = _run_toggles(*args)
    fn = entry_point(_run_toggles, args)
    assert fn is not _run_toggles and fn(*args) == got
    assert entry_point(_run_toggles, (1.0, np.zeros(n, dtype=np.int32), s, 0)) is _run_toggles
    assert Sharing() == WHOLE_GPU
