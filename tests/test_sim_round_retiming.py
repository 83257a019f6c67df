"""The re-timing after starts and completions written out for completions at round boundaries (PAL's
simulator, ``SimModel.completion_at_round``; docs/PERFORMANCE.md, "the sixth env pass") against the
plain steps (:meth:`Simulator._schedule_completion`), and the placement cost's remembered locality
levels against :meth:`Topology.locality`."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from gpusched.baselines import get_policy
from gpusched_env.cluster.model import FailureConfig, SimModel
from gpusched_env.cluster.simulator import Simulator
from gpusched_env.policy import run_policy
from gpusched_env.topology import NodeGroup, Topology
from gpusched_env.types import Job

MODELS = ["resnet50", "vgg19", "bert", "dcgan", "alexnet", "resnet18"]


def _jobs(n: int, seed: int) -> list[Job]:
    rng = np.random.default_rng(seed)
    return [
        Job(i, float(rng.uniform(0, 20000)), int(rng.choice([1, 1, 2, 4, 8])), float(rng.integers(200, 20000)),
            MODELS[int(rng.integers(0, len(MODELS)))], perf_class="ABCD"[int(rng.integers(0, 4))], mem_gb=4.0,
            deadline_s=None)
        for i in range(n)
    ]


def _run(policy: str, written: bool, model: SimModel) -> Simulator:
    topo = Topology.build([NodeGroup(3, 4, "V100", 16.0), NodeGroup(1, 4, "P100", 16.0)])
    jobs = [dataclasses.replace(j, deadline_s=j.arrival_s + 3 * j.work_iters) if j.job_id % 3 == 0 else j
            for j in _jobs(50, 4)]
    sim = Simulator(topo, jobs, model, seed=5)
    sim.written_out = written
    run_policy(sim, get_policy(policy))
    return sim


def test_round_completions_written_out_give_the_plain_floats():
    """pal and las (preemptions) with completions at round boundaries and node failures: every
    job's record, the energy, the busy GPU-seconds and the timeline float for float as the plain
    steps, and every completion falls on a round boundary (origin = first arrival)."""
    model = SimModel(completion_at_round=True, restart_cost_s=5.0,
                     failures=FailureConfig(mtbf_h=30.0, repair_s=600.0))
    for policy in ("pal", "las"):
        fast = _run(policy, True, model)
        plain = _run(policy, False, model)
        assert fast._round_s and fast.model.completion_at_round
        finished = [r for r in plain.records.values() if r.finish_s is not None]
        assert len(finished) > 30
        for jid, rec in fast.records.items():
            assert rec == plain.records[jid]
        r, origin = fast._round_s, fast._first_arrival
        for rec in fast.records.values():
            if rec.finish_s is not None:
                k = (rec.finish_s - origin) / r
                assert math.isclose(k, round(k), abs_tol=1e-6)
        assert fast.result().energy_j == plain.result().energy_j
        assert fast.power.busy_gpu_s == plain.power.busy_gpu_s > 0
        assert fast.power.timeline == plain.power.timeline and fast.power.timeline is not None
        assert fast.env.now == plain.env.now


def test_remembered_locality_levels_are_topology_locality():
    """``DataParallelSpeed.placement_cost`` remembers a GPU set's level: the same cost as from
    :meth:`Topology.locality` (PAL's ``lf`` off a node, 1 within one), for sets within a node and
    across nodes, asked twice (the second answer from the memo)."""
    topo = Topology.build([NodeGroup(3, 4, "V100", 16.0), NodeGroup(1, 4, "P100", 16.0)])
    sim = Simulator(topo, _jobs(3, 1), SimModel(), seed=0)
    speed, job = sim.speed, _jobs(1, 1)[0]
    sets = [(0, 1), (0, 4), (0, 1, 2, 3), (2, 9, 15), (4, 5, 6, 7, 8)]
    for gpus in sets + sets:
        assert speed.placement_cost(job, gpus) == ((1.0 if topo.locality(gpus) == "node" else 1.7), 0.0)
    assert [speed._levels[s] for s in sets] == [topo.locality(s) for s in sets]
    assert [speed._levels[s] == "node" for s in sets] == [True, False, True, False, False]
