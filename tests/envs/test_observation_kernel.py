"""The compiled observation equals its documented definition (module docstring of
``gpusched_env.envs.observe``), transcribed here in plain Python, and a hand-computed toy."""

from __future__ import annotations

import dataclasses
import math

import gymnasium as gym
import numpy as np
import pytest

import gpusched_env  # noqa: F401  (registers the envs)
from gpusched_env.catalog import base_iter_s
from gpusched_env.cluster.model import FailureConfig, SimModel
from gpusched_env.cluster.simulator import Simulator
from gpusched_env.cluster.variability import VariabilityConfig
from gpusched_env.envs import ClusterEnv
from gpusched_env.envs.observe import DecisionBuilder, JobCache
from gpusched_env.envs.options import OptionSet
from gpusched_env.scenario import load_scenario
from gpusched_env.topology import NodeGroup, Topology
from gpusched_env.types import Job, Start


def _reference(b: DecisionBuilder) -> np.ndarray:
    """The observation by its definition, one feature at a time (float64, then float32)."""
    view, ws, topo = b.view, b._ws, b.view.topology
    free = view.free if ws is None else ws.ctx.free
    n_res = view.n_resident if ws is None else ws.n_res
    n_gpus = topo.n_gpus
    out: list[float] = []
    for node in range(topo.n_nodes):
        gpus = list(topo.node_gpus(node))
        size = len(gpus)
        free_here = [g for g in gpus if free[g]]
        slow = [
            sum(view.slowdown[g, c] - 1.0 for g in free_here) / len(free_here) if free_here else 0.0
            for c in range(4)
        ]
        out += [
            len(free_here) / size,
            sum(bool(view.up[g]) for g in gpus) / size,
            *slow,
            sum(view.gpu_power_w[g] for g in gpus) / size / 300.0,
            sum(int(n_res[g]) for g in gpus) / size / view.max_jobs_per_gpu,
        ]
    n_free = int(np.count_nonzero(free))
    ex_ok, sh_ok = b._fits()
    window = b.window
    for s in range(b.k):
        if s >= len(window):
            out += [0.0] * 11
            continue
        j = window[s]
        one_hot = [1.0 if c == j.class_index else 0.0 for c in range(4)]
        wait_h = max(view.now / 3600.0 - j.arrival_s / 3600.0, 0.0)
        work_h = j.work_iters * base_iter_s(j.model) / 3600.0
        out += [
            1.0, math.log2(1 + j.num_gpus) / math.log2(1 + n_gpus), *one_hot, math.log1p(wait_h),
            math.log1p(work_h), float(ex_ok[s]), float(sh_ok[s]), j.num_gpus / max(n_free, 1),
        ]
    started = len(b.decisions)
    tod = 2 * math.pi * (view.now % 86400.0) / 86400.0
    demand = view.pending_gpus - sum(len(d.gpus) for d in b.decisions)
    out += [
        math.sin(tod), math.cos(tod), int(np.count_nonzero(n_res)) / n_gpus, n_free / n_gpus,
        math.log1p(len(view.pending) - started) / 5, math.log1p(len(view.running) + started) / 5,
        demand / n_gpus, math.log1p(started) / 3,
    ]
    return np.clip(np.nan_to_num(np.array(out), nan=0.0), -1.0, 10.0).astype(np.float32)


def _with_failures(name: str):
    scn = load_scenario(name)
    model = dataclasses.replace(scn.model, failures=FailureConfig(mtbf_h=2.0, repair_s=1800.0))
    return dataclasses.replace(scn, model=model)


def _all_at_t0(name: str):
    """The scenario with every inline job arriving at t = 0 (several starts within one decision point)."""
    scn = load_scenario(name)
    jobs = [dict(j, arrival_s=0.0) for j in scn.workload.jobs]
    return dataclasses.replace(scn, workload=dataclasses.replace(scn.workload, jobs=jobs))


@pytest.mark.parametrize("scenario", ["synthetic_small", "eaco_node", "failures"])
def test_observation_equals_its_definition_along_random_rollouts(scenario):
    scn = {"failures": lambda: _with_failures("synthetic_small"), "eaco_node": lambda: _all_at_t0("eaco_node")}.get(
        scenario, lambda: scenario)()
    env = gym.make("gpusched/Cluster-v0", scenario=scn)
    rng = np.random.default_rng(3)
    obs, info = env.reset(seed=3)
    after_start = 0
    for n in range(600):
        u = env.unwrapped
        assert isinstance(u, ClusterEnv)
        np.testing.assert_allclose(obs, _reference(u.builder), rtol=1e-6, atol=1e-6)
        after_start += bool(u.builder.decisions)
        valid = np.flatnonzero(info["action_mask"])
        obs, _, term, trunc, info = env.step(int(valid[int(rng.random() * valid.size)]))
        if term or trunc:
            obs, info = env.reset(seed=4 + n)
    assert after_start >= 5  # observations taken after starts within a decision point were checked


def test_observation_of_a_toy_cluster_by_hand():
    """2 nodes x 2 GPUs; job 0 (1 GPU) runs on GPU 0; job 1 (2 GPUs, class B) waits 1.5 h."""
    topo = Topology.build([NodeGroup(2, 2)])
    slow = np.array([[1.0, 1.0, 1.0, 1.0], [1.2, 1.4, 1.0, 1.0], [1.1, 1.0, 1.3, 1.0], [1.5, 1.0, 1.0, 1.1]])
    jobs = [Job(0, 0.0, 1, 1e9, "resnet50", "A", 10.0), Job(1, 1800.0, 2, 100, "resnet50", "B", 10.0)]
    sim = Simulator(topo, jobs, SimModel(variability=VariabilityConfig(mode="none")), seed=0,
                    slowdown_profile=slow, max_jobs_per_gpu=1)
    sim.start(None)
    assert sim.advance() and sim.env.now == 0.0
    sim.apply([Start(0, (0,))])
    assert sim.advance() and sim.env.now == 1800.0
    sim.wake_at(7200.0)
    assert sim.advance() and sim.env.now == 7200.0
    cache = JobCache()
    b = DecisionBuilder(sim.view(), OptionSet(), k=2, fifo_slots=1, cache=cache)
    obs = b.observe()
    power = sim.view().gpu_power_w
    node0 = [1 / 2, 1.0, 0.2, 0.4, 0.0, 0.0, (power[0] + power[1]) / 2 / 300, 1 / 2]
    node1 = [1.0, 1.0, 0.3, 0.0, 0.15, 0.05, (power[2] + power[3]) / 2 / 300, 0.0]
    work_h = 100 * base_iter_s("resnet50") / 3600
    slot0 = [1.0, math.log2(3) / math.log2(5), 0.0, 1.0, 0.0, 0.0, math.log1p(1.5), math.log1p(work_h),
             1.0, 1.0, 2 / 3]
    slot1 = [0.0] * 11
    glob = [math.sin(math.pi / 6), math.cos(math.pi / 6), 1 / 4, 3 / 4, math.log1p(1) / 5, math.log1p(1) / 5,
            2 / 4, 0.0]
    np.testing.assert_allclose(obs, np.array(node0 + node1 + slot0 + slot1 + glob, dtype=np.float32), rtol=1e-6)
    b.act(0)  # slot 0, option 0 (pal): job 1 takes two free GPUs, the working copy changes
    after = b.observe()
    assert 2 * after[0] + 2 * after[8] == 1.0  # one free GPU left in all
    assert after[-5] == pytest.approx(1 / 4)  # working free share
    np.testing.assert_allclose(after, _reference(b), rtol=1e-6, atol=1e-6)
    assert after[-1] == pytest.approx(math.log1p(1) / 3)  # one start in this batch
