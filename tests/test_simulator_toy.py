"""A toy cluster whose JCTs, energy and utilisation are computed by hand."""

from __future__ import annotations

import pytest

from gpusched_env.catalog import GPUS, MODELS
from gpusched_env.cluster.model import SimModel
from gpusched_env.cluster.simulator import Simulator
from gpusched_env.cluster.variability import VariabilityConfig
from gpusched_env.fitted import NODE_BASE_W
from gpusched_env.invariants import InvariantChecker
from gpusched_env.metrics import J_PER_KWH, compute_metrics
from gpusched_env.policy import run_policy
from gpusched_env.testing import StrictFifo
from gpusched_env.topology import NodeGroup, Topology
from gpusched_env.types import Job

T = MODELS["resnet50"].base_iter_s  # 0.1754 s per iteration on a V100
NO_VAR = SimModel(variability=VariabilityConfig(mode="none"))


def toy_jobs() -> list[Job]:
    return [
        Job(0, 0.0, 1, 1000, "resnet50", "A", 10.0),
        Job(1, 10.0, 2, 500, "resnet50", "A", 10.0),
        Job(2, 20.0, 1, 200, "resnet50", "A", 10.0),
    ]


def run(policy, jobs=None, model=NO_VAR, groups=None):
    topo = Topology.build(groups or [NodeGroup(1, 2)])
    sim = Simulator(topo, jobs or toy_jobs(), model, seed=0, checker=InvariantChecker())
    run_policy(sim, policy)
    return sim, sim.result()


def test_fifo_jcts_by_hand():
    _, res = run(StrictFifo())
    finish = {r.job.job_id: r.finish_s for r in res.records}
    # J0 runs 0..1000T; J1 (2 GPUs) waits for it, runs 500T; J2 blocked behind J1 (head of line).
    assert finish[0] == pytest.approx(1000 * T)
    assert finish[1] == pytest.approx(1500 * T)
    assert finish[2] == pytest.approx(1700 * T)
    m = compute_metrics(res)
    assert m["avg_jct_s"] == pytest.approx((1000 * T + 1500 * T - 10 + 1700 * T - 20) / 3)
    assert m["makespan_s"] == pytest.approx(1700 * T)
    busy = 1000 * T + 2 * 500 * T + 200 * T
    assert m["utilization"] == pytest.approx(busy / (2 * 1700 * T))


def test_backfill_jcts_by_hand():
    _, res = run(StrictFifo(backfill=True))
    finish = {r.job.job_id: r.finish_s for r in res.records}
    assert finish[2] == pytest.approx(20 + 200 * T)  # backfilled on the second GPU
    assert finish[1] == pytest.approx(1500 * T)


def test_energy_by_hand():
    _, res = run(StrictFifo())
    v100 = GPUS["V100"]
    busy_w = v100.idle_w + (v100.busy_w - v100.idle_w) * MODELS["resnet50"].util
    one = busy_w + v100.idle_w + NODE_BASE_W
    two = 2 * busy_w + NODE_BASE_W
    expected = one * 1000 * T + two * 500 * T + one * 200 * T
    assert res.energy_j == pytest.approx(expected)
    assert compute_metrics(res)["energy_kwh"] == pytest.approx(expected / J_PER_KWH)
    # per-job energy: each job's GPUs at busy power for its run time
    job_e = {r.job.job_id: r.energy_j for r in res.records}
    assert job_e[1] == pytest.approx(2 * busy_w * 500 * T)
    assert res.energy_j >= res.idle_floor_j


def test_locality_penalty_when_spanning_nodes():
    jobs = [Job(0, 0.0, 2, 100, "resnet50", "A", 1.0)]

    class Spread(StrictFifo):
        def decide(self, view):
            from gpusched_env.types import Start

            return [Start(j.job_id, (0, 2)) for j in view.pending]

    _, res = run(Spread(), jobs, groups=[NodeGroup(2, 2)])
    assert res.records[0].finish_s == pytest.approx(100 * T * 1.7)


def test_deterministic_with_variability():
    model = SimModel()  # per-GPU variability sampled from the seed
    a = run(StrictFifo(), model=model)[1]
    b = run(StrictFifo(), model=model)[1]
    assert [r.finish_s for r in a.records] == [r.finish_s for r in b.records]
    assert a.energy_j == b.energy_j


@pytest.mark.parametrize(
    ("policy", "finish"),
    [
        # FIFO: J1 (2 GPUs) blocks J2 behind it until J0 ends.
        ("fifo", {0: 1000 * T, 1: 1500 * T, 2: 1700 * T}),
        # SJF: at t=20 J2 (35 s of work) sorts before J1 (88 s) and starts on the free GPU.
        ("sjf", {0: 1000 * T, 1: 1500 * T, 2: 20 + 200 * T}),
        # LAS: equal attained service (0) -> arrival order, so the same as FIFO here.
        ("las", {0: 1000 * T, 1: 1500 * T, 2: 1700 * T}),
    ],
)
def test_baseline_jcts_by_hand(policy, finish):
    from gpusched.baselines import get_policy

    _, res = run(get_policy(policy))
    assert {r.job.job_id: r.finish_s for r in res.records} == pytest.approx(finish)


def test_utilisation_of_a_run_that_stopped_with_jobs_unfinished():
    """Utilisation is taken over the whole run, so it stays <= 1 when the run outlives its last
    tracked completion: J1 (tracked, 2 GPUs) is never started, the untracked J2 keeps a GPU busy
    until 20 + 5000T, long after J0 (tracked) ends at 1000T."""

    class NeverJobOne(StrictFifo):
        def decide(self, view):
            return [d for d in StrictFifo(backfill=True).decide(view) if d.job_id != 1]

    jobs = [
        Job(0, 0.0, 1, 1000, "resnet50", "A", 10.0),
        Job(1, 10.0, 2, 500, "resnet50", "A", 10.0),
        Job(2, 20.0, 1, 5000, "resnet50", "A", 10.0, tracked=False),
    ]
    _, res = run(NeverJobOne(), jobs=jobs)
    m = compute_metrics(res)
    assert m["jobs_finished"] == 1
    assert m["makespan_s"] == pytest.approx(1000 * T)  # J0, the only tracked completion
    assert res.span_s == pytest.approx(20 + 5000 * T)  # the run ends when J2 does
    assert m["utilization"] == pytest.approx((1000 * T + 5000 * T) / (2 * (20 + 5000 * T)))
    assert m["avg_jct_s"] == pytest.approx(1000 * T)  # J0 only
    # J1 is charged from its arrival (10 s) to the end of the run (20 + 5000T)
    assert m["avg_jct_all_s"] == pytest.approx((1000 * T + (20 + 5000 * T - 10)) / 2)


class _Idle:
    """Starts nothing, ever."""

    name, events = "idle", True

    def __init__(self, round_s: float | None) -> None:
        self.round_s = round_s

    def decide(self, view):
        return []


def test_idle_policy_is_deadlocked_by_the_shared_stall_rule():
    """With rounds, the run stops at the (STALL_LIMIT + 1)-th idle point after the last arrival: the
    arrival at t = 20 s, then the ticks at 60, 120 and 180 s. Without rounds it stops at the empty
    event queue (t = 20 s). Both report the unfinished jobs as deadlocked (gpusched_env.run_rules)."""
    from gpusched_env.run_rules import STALL_LIMIT, run_outcome

    assert STALL_LIMIT == 3
    for round_s, stop_at in ((60.0, 180.0), (None, 20.0)):
        sim, res = run(_Idle(round_s))
        assert sim.deadlocked and float(sim.env.now) == pytest.approx(stop_at)
        assert compute_metrics(res)["deadlocked"] == 1.0
        assert run_outcome(res.records, sim.deadlocked).describe() == "deadlocked: 3 tracked job(s) unfinished (ids 0, 1, 2)"


def test_complete_run_has_no_deadlock_metric():
    sim, res = run(StrictFifo())
    assert not sim.deadlocked and "deadlocked" not in compute_metrics(res)


def test_view_attained_service_by_hand():
    """``view.attained_gpu_s`` is ``progress().attained_gpu_s``: J0 (1 GPU) runs from 0, J1 waits."""
    seen: dict[float, dict[int, float]] = {}

    class Recording(StrictFifo):
        def decide(self, view):
            ids = list(view.running) + [j.job_id for j in view.pending]
            for jid in ids:
                assert view.attained_gpu_s(jid) == view.progress(jid).attained_gpu_s
            seen[view.now] = {jid: view.attained_gpu_s(jid) for jid in ids}
            return super().decide(view)

    run(Recording())
    assert seen[20.0] == {0: 20.0, 1: 0.0, 2: 0.0}  # 20 s x 1 GPU; the queued jobs have none
    assert seen[1000 * T] == pytest.approx({1: 0.0, 2: 0.0})  # J0 finished: only the queue left
