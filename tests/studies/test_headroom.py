"""gpusched.studies.headroom: alone times and the split of each JCT, by hand on toy clusters."""

from __future__ import annotations

import numpy as np
import pytest

from gpusched.baselines import las
from gpusched.studies.headroom import SIZE_CLASSES, alone_times, main, measure, split_jobs, summarise
from gpusched_env.catalog import MODELS
from gpusched_env.cluster.model import LocalityConfig, SimModel
from gpusched_env.cluster.simulator import Simulator
from gpusched_env.cluster.variability import VariabilityConfig
from gpusched_env.policy import run_policy
from gpusched_env.scenario import load_scenario
from gpusched_env.testing import StrictFifo
from gpusched_env.topology import NodeGroup, Topology
from gpusched_env.types import Job

T = MODELS["resnet50"].base_iter_s
NO_VAR = SimModel(variability=VariabilityConfig(mode="none"))
ONE_NODE = (NodeGroup(1, 2),)


def _job(jid: int, t: float, gpus: int, iters: float) -> Job:
    return Job(jid, t, gpus, iters, "resnet50", "A", 10.0)


def _run(policy, jobs, model=NO_VAR, groups=ONE_NODE):
    sim = Simulator(Topology.build(list(groups)), jobs, model, seed=0)
    alone = alone_times(sim, jobs)
    run_policy(sim, policy)
    return alone, split_jobs(sim.result(), alone, sim.topology.max_gpus_per_node)


def test_fifo_split_by_hand():
    jobs = [_job(0, 0.0, 1, 1000), _job(1, 10.0, 2, 500), _job(2, 20.0, 1, 200)]
    alone, splits = _run(StrictFifo(), jobs)
    assert [alone[i] for i in range(3)] == pytest.approx([1000 * T, 500 * T, 200 * T])
    # J1 (2 GPUs) waits for J0; J2 waits behind J1 (head of line); nobody is preempted.
    assert [s.first_wait for s in splits] == pytest.approx([0.0, 1000 * T - 10, 1500 * T - 20])
    assert [s.extra_on_gpus for s in splits] == pytest.approx([0.0, 0.0, 0.0], abs=1e-9)
    assert [s.later_wait for s in splits] == pytest.approx([0.0, 0.0, 0.0], abs=1e-9)
    assert [s.size for s in splits] == ["1 GPU", "within a node", "1 GPU"]


def test_preemption_shows_as_later_wait_and_restart_cost():
    # One GPU, LAS rounds of 100 s, restart cost 10 s: J1 arrives at 50 s; at the 100 s round J0
    # (100 GPU-s attained) is preempted for J1 (0); J1 runs 100..100+200T; J0 restarts then, pays
    # 10 s and runs its remaining 1000T - 100 s.
    model = SimModel(variability=VariabilityConfig(mode="none"), restart_cost_s=10.0)
    jobs = [_job(0, 0.0, 1, 1000), _job(1, 50.0, 1, 200)]
    _, (s0, s1) = _run(las(round_s=100.0), jobs, model, groups=(NodeGroup(1, 1),))
    assert s0.jct == pytest.approx(100 + 200 * T + 10 + (1000 * T - 100))
    assert (s0.first_wait, s0.extra_on_gpus, s0.later_wait) == pytest.approx((0.0, 10.0, 200 * T))
    assert (s1.first_wait, s1.extra_on_gpus, s1.later_wait) == pytest.approx((50.0, 0.0, 0.0), abs=1e-9)
    for s in (s0, s1):
        assert s.jct == pytest.approx(s.alone + s.first_wait + s.extra_on_gpus + s.later_wait)


def test_alone_time_takes_the_fastest_node_and_pays_locality_to_span():
    # Two nodes of two GPUs; class A factors 1.2, 1.0 | 0.9, 1.1; locality lf = 1.5; start cost 5 s.
    profile = np.ones((4, 4))
    profile[:, 0] = [1.2, 1.0, 0.9, 1.1]
    model = SimModel(
        variability=VariabilityConfig(mode="none"), locality=LocalityConfig(mode="constant", lf=1.5), start_cost_s=5.0
    )
    sim = Simulator(Topology.build([NodeGroup(2, 2)]), [], model, seed=0, slowdown_profile=profile)
    jobs = [_job(0, 0.0, 1, 100), _job(1, 0.0, 2, 100), _job(2, 0.0, 4, 100)]
    alone = alone_times(sim, jobs)
    assert alone[0] == pytest.approx(100 * T * 0.9 + 5)  # the fastest GPU anywhere
    assert alone[1] == pytest.approx(100 * T * 1.1 + 5)  # node 1 (worst 1.1) beats node 0 (worst 1.2)
    assert alone[2] == pytest.approx(100 * T * 1.2 * 1.5 + 5)  # must span: every GPU, lf applies


def test_summary_means_and_shares():
    jobs = [_job(0, 0.0, 1, 1000), _job(1, 10.0, 2, 500), _job(2, 20.0, 1, 200)]
    _, splits = _run(StrictFifo(), jobs)
    h = summarise("fifo", [splits])
    assert h.jct == pytest.approx((1000 * T + 1500 * T - 10 + 1700 * T - 20) / 3)
    assert h.alone == pytest.approx(1700 * T / 3)
    excess = {"1 GPU": 1500 * T - 20, "within a node": 1000 * T - 10, "across nodes": 0.0}
    total = sum(excess.values())
    assert h.excess_by_size == pytest.approx({s: excess[s] / total for s in SIZE_CLASSES})
    assert h.jobs_by_size == {"1 GPU": 2, "within a node": 1, "across nodes": 0}
    assert h.split_by_size["1 GPU"] == pytest.approx(((1500 * T - 20) / 2, 0.0, 0.0), abs=1e-9)
    assert h.split_by_size["within a node"] == pytest.approx((1000 * T - 10, 0.0, 0.0), abs=1e-9)
    assert h.split_by_size["across nodes"] == (0.0, 0.0, 0.0)


def test_measure_adds_up_and_is_deterministic():
    scn = load_scenario("synthetic_small")
    a = measure(scn, "las", [0], [0])
    assert a == measure(scn, "las", [0], [0])
    assert a.jct == pytest.approx(a.alone + a.first_wait + a.extra_on_gpus + a.later_wait)
    assert a.jct >= a.alone
    assert sum(a.excess_by_size.values()) == pytest.approx(1.0)


def test_cli_table_and_errors(capsys):
    assert main(["--scenario", "synthetic_small", "--policies", "fifo", "--seeds", "0"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "scenario synthetic_small, seeds [0], workloads [0]"
    assert out.splitlines()[2].startswith("fifo ")
    assert main(["--scenario", "synthetic_small", "--policies", "fifo", "--seeds", "0", "--by-size"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [ln.split()[0] for ln in lines[3:6]] == ["1", "within", "across"]
    assert main(["--scenario", "synthetic_small", "--workloads", "3"]) == 2
    assert "--workloads: indices [3] out of range" in capsys.readouterr().err
    assert main(["--scenario", "synthetic_small", "--seeds", "a"]) == 2
    assert "--seeds: expected comma-separated integers, got 'a'" in capsys.readouterr().err
