"""Reproduction scenarios (pal_philly, eaco_node, eaco_cluster): hand-checked accounting and the
idle-round shortcut of the round schedulers. PAL clustering / L x V order, PM-First, PAL re-run
stability and EaCO's refuse/undo are covered in tests/baselines/."""

from __future__ import annotations

import numpy as np
import pytest

from baselines import get_policy
from bench.runner import make_policy, simulate, with_run_time
from gpusched_env.catalog import GPUS, model_spec
from gpusched_env.cluster.model import SimModel
from gpusched_env.cluster.simulator import Simulator
from gpusched_env.fitted import NODE_BASE_W
from gpusched_env.metrics import J_PER_KWH, compute_metrics
from gpusched_env.policy import run_policy
from gpusched_env.scenario import WorkloadConfig, build_workloads, load_scenario, with_slos
from gpusched_env.topology import NodeGroup, Topology
from gpusched_env.types import Job

HOUR = 3600.0
# EaCO exclusive-run table (CALIBRATION.md): model, JCT h
EACO_JOBS = [("alexnet", 34.76), ("resnet18", 35.13), ("resnet50_imagenet", 36.01), ("vgg16", 36.13)]


def _gpu_w(util: float) -> float:
    v100 = GPUS["V100"]
    return v100.idle_w + (v100.busy_w - v100.idle_w) * min(1.0, util)


def _node_w(util: float) -> float:
    return NODE_BASE_W + 8 * _gpu_w(util)


def test_eaco_node_scenario_matches_the_table():
    scn = load_scenario("eaco_node")
    ((_, jobs),) = build_workloads(scn, 0)
    assert [j.model for j in jobs] == [m for m, _ in EACO_JOBS]
    for j, (_, hours) in zip(jobs, EACO_JOBS, strict=True):
        assert j.num_gpus == 8
        assert j.work_iters * model_spec(j.model).base_iter_s == pytest.approx(hours * HOUR)


def test_eaco_node_exclusive_energy_by_hand():
    """fifo: the four jobs one after another, each alone on the whole node."""
    scn = load_scenario("eaco_node")
    _, res = simulate(scn, make_policy("fifo", scn, 0), 0)
    m = compute_metrics(res)
    hand_j = sum(_node_w(model_spec(name).util) * hours * HOUR for name, hours in EACO_JOBS)
    assert m["energy_kwh"] == pytest.approx(hand_j / J_PER_KWH, rel=1e-9)
    assert m["makespan_s"] == pytest.approx(sum(h for _, h in EACO_JOBS) * HOUR)
    # the published total of the four exclusive runs is 161.67 kWh (the node base power is fitted to it)
    assert m["energy_kwh"] == pytest.approx(24.73 + 33.69 + 47.87 + 55.38, rel=0.01)


def test_eaco_node_colocated_energy_by_hand():
    """eaco: all four on the same 8 GPUs; phases end as jobs finish (slowdown by count, EaCO)."""
    scn = load_scenario("eaco_node")
    _, res = simulate(scn, make_policy("eaco", scn, 0), 0)
    m = compute_metrics(res)
    table = scn.model.sharing.count_slowdown  # [1, 1.03, 1.078, 1.19]
    left = {name: hours * HOUR for name, hours in EACO_JOBS}  # seconds of exclusive work left
    t = energy = 0.0
    finish: dict[str, float] = {}
    while left:
        k = len(left)
        utils = [model_spec(n).util for n in left]
        slow = table[k - 1] * max(1.0, sum(utils))  # device/analytic.py: count slowdown x saturation
        dt = min(left.values()) * slow  # the job with least work left finishes first
        energy += _node_w(sum(utils)) * dt  # GPU util = sum of residents', capped at 1
        t += dt
        for n in list(left):
            left[n] -= dt / slow
            if left[n] <= 1e-6:
                finish[n] = t
                del left[n]
    assert m["energy_kwh"] == pytest.approx(energy / J_PER_KWH, rel=1e-6)
    assert m["makespan_s"] == pytest.approx(t, rel=1e-9)
    runs = with_run_time({}, res)["avg_run_s"]
    assert runs == pytest.approx(float(np.mean(list(finish.values()))), rel=1e-9)


def test_eaco_cluster_scenario_loads_with_slos():
    scn = load_scenario("eaco_cluster")
    assert scn.cluster.topology().n_gpus == 28 * 8
    w = scn.workload
    assert set(w.model_mix or {}) == {m for m, _ in EACO_JOBS}
    assert w.deadline_factor == 2.0 and 0 < w.priority_share < 1


def test_with_slos_deadline_is_a_multiple_of_the_exclusive_runtime():
    jobs = [Job(i, 10.0 * i, 1, 1000.0, "resnet18") for i in range(200)]
    w = WorkloadConfig(kind="inline", deadline_factor=2.0, deadline_share=1.0, priority_share=0.25)
    out = with_slos(jobs, w, np.random.default_rng(0))
    base = model_spec("resnet18").base_iter_s
    assert all(j.deadline_s == pytest.approx(j.arrival_s + 2.0 * 1000.0 * base) for j in out)
    share = np.mean([j.priority > 0 for j in out])
    assert 0.15 < share < 0.35
    assert with_slos(jobs, WorkloadConfig(kind="inline"), np.random.default_rng(0)) is jobs


@pytest.mark.parametrize("name", ["packed_sticky", "packed_nonsticky", "pm_first", "pal"])
def test_idle_round_shortcut_changes_nothing(name):
    """A round skipped because nothing changed gives the same run as a recomputed one."""
    topo = Topology.build([NodeGroup(4, 4)], 4)
    rng = np.random.default_rng(3)
    jobs = [
        Job(i, float(rng.integers(0, 4000)), int(rng.choice([1, 2, 4, 6, 8])), float(rng.integers(2e3, 4e4)),
            "resnet50", "A")
        for i in range(40)
    ]
    model = SimModel(completion_at_round=True)
    out = []
    for memo in (True, False):
        pol = get_policy(name, **({"k1": 2} if name in ("pal", "pm_first") else {}))  # type: ignore[arg-type]
        pol._memo_ok = memo
        sim = Simulator(topo, jobs, model, seed=5, max_jobs_per_gpu=1)
        run_policy(sim, pol)
        r = sim.result()
        out.append([(x.job.job_id, x.first_start_s, x.finish_s, x.migrations) for x in r.records])
    assert out[0] == out[1]
