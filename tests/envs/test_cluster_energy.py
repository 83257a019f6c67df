"""The energy goal's env (conf/env/cluster_energy.yaml): the energy reward term by hand on a toy, the
``consolidate`` placement option, and EaCO's starts expressed exactly by the config's options."""

from __future__ import annotations

from dataclasses import replace

import pytest
from omegaconf import OmegaConf

from gpusched.agents.bc import make_teacher
from gpusched_env.catalog import GPUS, MODELS
from gpusched_env.data import DataMissing
from gpusched_env.envs import ClusterEnv
from gpusched_env.envs.options import ALL_OPTION_NAMES, OPTION_NAMES, OptionSet
from gpusched_env.fitted import NODE_BASE_W
from gpusched_env.metrics import J_PER_KWH, compute_metrics
from gpusched_env.scenario import CONF_DIR, load_scenario
from gpusched_env.types import Start

T = MODELS["resnet50"].base_iter_s


def toy(jobs, nodes=1, gpus=2, max_jobs=1, low_power=True):
    """Nodes of V100s without variability; inline resnet50 jobs ``(arrival, GPUs, iterations[, model, priority])``."""
    return load_scenario({
        "name": "toy_energy",
        "cluster": {"nodes": [{"count": nodes, "gpus_per_node": gpus, "gpu_type": "V100", "gpu_mem_gb": 32.0}],
                    "max_jobs_per_gpu": max_jobs},
        "workload": {"kind": "inline", "jobs": [
            {"job_id": i, "arrival_s": j[0], "num_gpus": j[1], "work_iters": j[2],
             "model": j[3] if len(j) > 3 else "resnet50", "priority": j[4] if len(j) > 4 else 0}
            for i, j in enumerate(jobs)]},
        "model": {"variability": {"mode": "none"}, "start_cost_s": 0.0, "power": {"low_power_idle": low_power}},
    })


def test_energy_reward_by_hand():
    """One node of 2 V100s. J0 (1000 iterations, D0 = 1000T) starts at 0 on one GPU; the node then
    sleeps until J1 (500 iterations) arrives at 2 D0. Busy: one GPU at resnet50's utilisation, one
    idle, the node baseline; asleep: sleep_w (60 W) for the whole node. Reward per interval =
    -(jobs in the system x seconds) / 3600 - energy_weight x kWh."""
    d0, d1 = 1000 * T, 500 * T
    idle_w, busy_w = GPUS["V100"].idle_w, GPUS["V100"].busy_w
    busy = idle_w + (busy_w - idle_w) * MODELS["resnet50"].util + idle_w + NODE_BASE_W
    w = 2.5
    env = ClusterEnv(toy([(0.0, 1, 1000), (2 * d0, 1, 500)]), options=["packed"], queue_slots=1, fifo_slots=1,
                     energy_weight=w)
    _, info = env.reset(options={"workload": 0, "run_seed": 0})
    assert info["time_s"] == 0.0
    _, r0, term, _, info = env.step(0)  # start J0: the next point is J1's arrival
    assert not term and info["time_s"] == pytest.approx(2 * d0)
    e0 = (busy * d0 + 60.0 * d0) / J_PER_KWH
    assert r0 == pytest.approx(-d0 / 3600.0 - w * e0, rel=1e-9)
    _, r1, term, _, _ = env.step(0)  # start J1: runs to the end
    assert term
    e1 = busy * d1 / J_PER_KWH
    assert r1 == pytest.approx(-d1 / 3600.0 - w * e1, rel=1e-9)
    m = compute_metrics(env.result())
    assert m["energy_kwh"] == pytest.approx(e0 + e1, rel=1e-9)
    assert env.episode_return == pytest.approx(-(d0 + d1) / 3600.0 - w * m["energy_kwh"], rel=1e-9)


def test_consolidate_option_picks_eacos_gpus():
    """2 nodes x 2 GPUs, up to 4 jobs per GPU. At t=0 the agent starts J0 (alexnet) and J1 (alexnet, high
    priority) packed: GPUs 0 and 1 of node 0. J2 (1 GPU) arrives at t=1: ``consolidate`` joins J0 (shared,
    unsaturated, not high priority), ``least_interference`` and ``packed`` take a free GPU of node 1.
    A 2-GPU job finds one joinable GPU only, so ``consolidate`` takes free GPUs (node 1's two)."""
    scn = toy([(0.0, 1, 10**6, "alexnet"), (0.0, 1, 10**6, "alexnet", 1), (1.0, 1, 1000, "resnet18")],
              nodes=2, gpus=2, max_jobs=4)
    env = ClusterEnv(scn, options=["packed", "least_interference", "consolidate"], queue_slots=2, fifo_slots=2)
    _, info = env.reset(options={"workload": 0, "run_seed": 0})
    b0 = env.builder
    assert [j.job_id for j in b0.window] == [0, 1]
    env.step(0)  # J0 packed
    assert [(d.job_id, d.gpus) for d in b0.decisions] == [(0, (0,))]
    _, _, _, _, info = env.step(0)  # J1 (now slot 0) packed; nothing is left, the point ends
    # (the env's builder is re-aimed at the next point: the batch is read from the running jobs)
    assert {j: a.gpus for j, a in env.view().running.items()} == {0: (0,), 1: (1,)}
    assert info["time_s"] == pytest.approx(1.0)
    b = env.builder
    assert [j.job_id for j in b.window] == [2]
    job = b.window[0]
    place = {n: b.options.place(i, job, b.ws) for i, n in enumerate(b.options.names)}
    assert place == {"packed": (2,), "least_interference": (2,), "consolidate": (0,)}
    assert b.options.place(2, replace(job, num_gpus=2), b.ws) == (2, 3)


def test_option_names_and_default_set():
    assert "consolidate" in ALL_OPTION_NAMES and "consolidate" not in OPTION_NAMES
    assert ALL_OPTION_NAMES[: len(OPTION_NAMES)] == OPTION_NAMES
    with pytest.raises(ValueError, match="distinct names"):
        OptionSet(["packed", "pack"])


def _config_env():
    cfg = OmegaConf.load(CONF_DIR / "env" / "cluster_energy.yaml")
    kw = OmegaConf.to_container(cfg, resolve=True)
    assert kw.pop("id") == "gpusched/Cluster-v0"
    return kw


@pytest.mark.parametrize("teacher", ["eaco", "gandiva", "fifo"])
def test_config_options_express_every_heuristic_start(teacher):
    """On eaco_cluster (run seed 0) every start of eaco, gandiva and fifo is one of the config's options."""
    kw = _config_env()
    scn = load_scenario("eaco_cluster")
    env = ClusterEnv(scn, **{k: v for k, v in kw.items() if k not in ("workloads", "run_seeds")})
    try:
        env.reset(options={"workload": 0, "run_seed": 0})
    except DataMissing:
        pytest.skip("Philly trace absent")
    policy = make_teacher(teacher, scn, 0)
    exact = total = 0
    point, starts, over = -1, [], False
    while not over:
        b = env.builder
        if env.decision_points != point:
            point = env.decision_points
            starts = [d for d in policy.decide(env.view()) if isinstance(d, Start)]
            total += len(starts)
        a = b.done_action
        if starts:
            d = starts.pop(0)
            a = b.action_for(d.job_id, d.gpus)
            assert a is not None
            slot, opt = b.decode(a)
            exact += b.options.place(opt, b.window[slot], b.ws) == tuple(sorted(d.gpus))
        _, _, term, trunc, _ = env.step(a)
        over = term or trunc
    assert total == 1511 and exact == total
