"""The Cluster env's per-step shortcuts give what the plain computation gives:

- ``least_interference`` as one compiled call equals its numpy rule (``least_interference_numpy``)
  along random rollouts on a shared and an exclusive cluster, and on a toy cluster by hand (ties,
  memory, GPU type, NaN: the numpy rule);
- ``DecisionBuilder.valid(a)`` (from the window's fit codes) is ``mask()[a]``;
- a start on many GPUs updates the working state by fancy indexing as one scalar at a time does;
- each step's observation and mask are new arrays the caller owns (handed over, not copied).

``tests/envs/env_digest.py`` compares whole rollouts between two commits.
"""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import numpy as np
import pytest

import gpusched_env  # noqa: F401  (registers the envs)
from gpusched_env.cluster.model import SimModel
from gpusched_env.cluster.simulator import Simulator
from gpusched_env.envs import ClusterEnv
from gpusched_env.envs.kernels import least_interference_k
from gpusched_env.envs.options import SCALAR_GPUS, WorkingState, _least_interference, least_interference_numpy
from gpusched_env.placement import PlacementContext
from gpusched_env.scenario import load_scenario
from gpusched_env.topology import NodeGroup, Topology
from gpusched_env.types import Job


def _all_at_t0(name: str):
    scn = load_scenario(name)
    jobs = [dict(j, arrival_s=0.0) for j in scn.workload.jobs]
    return dataclasses.replace(scn, workload=dataclasses.replace(scn.workload, jobs=jobs))


@pytest.mark.parametrize("scenario", ["eaco_node", "synthetic_small"])
def test_least_interference_and_valid_equal_their_plain_forms_along_rollouts(scenario):
    scn = _all_at_t0(scenario) if scenario == "eaco_node" else scenario
    env = gym.make("gpusched/Cluster-v0", scenario=scn)
    u = env.unwrapped
    assert isinstance(u, ClusterEnv)
    rng = np.random.default_rng(3)
    _, info = env.reset(seed=3)
    placed = 0
    for n in range(150):
        b = u.builder
        assert b is not None
        if not u._over:
            for job in b.window:
                got = _least_interference(job, b.ws)
                assert got == least_interference_numpy(job, b.ws)
                placed += got is not None
            mask = b.mask().tolist()  # valid(a) is the mask's entry, without the mask
            assert [b.valid(a) for a in range(-1, len(mask) + 1)] == [False, *mask, False]
            assert info["action_mask"].tolist() == mask and info["action_mask"] is not b.mask()
        valid = np.flatnonzero(info["action_mask"])
        _, _, term, trunc, info = env.step(int(valid[int(rng.random() * valid.size)]))
        if term or trunc:
            _, info = env.reset(seed=4 + n)
    assert placed > 100


def _toy_state() -> tuple[WorkingState, list[Job]]:
    """One node of 6 GPUs (32 GB, 4 job slots each), two running jobs: job 0 on GPUs 0-1 (8 GB),
    job 1 on GPU 1 (20 GB)."""
    topo = Topology.build([NodeGroup(1, 6)])
    jobs = [Job(0, 0.0, 2, 1e6, "resnet50", "A", 8.0), Job(1, 0.0, 1, 1e6, "vgg16", "B", 20.0)]
    sim = Simulator(topo, jobs, SimModel(), seed=0, max_jobs_per_gpu=4)
    sim.start(None)
    assert sim.advance()
    view = sim.view()
    ws = WorkingState(PlacementContext(view))
    ws.take(jobs[0], (0, 1))
    ws.take(jobs[1], (1,))
    return ws, jobs


def test_least_interference_by_hand():
    ws, _ = _toy_state()
    assert ws.n_res.tolist() == [1, 2, 0, 0, 0, 0] and ws.mem_used.tolist() == [8.0, 28.0, 0.0, 0.0, 0.0, 0.0]
    # made-up utilisation and class-A slowdown
    ws.util = np.array([0.5, 0.9, 0.0, 0.0, 0.3, 0.0])
    ws.slowdown = np.ones((6, 4))
    ws.slowdown[:, 0] = [1.0, 1.0, 1.2, 1.1, 1.0, 1.1]
    job = Job(7, 0.0, 3, 10.0, "resnet50", "A", 4.0)
    # order: no resident job (2..5) by utilisation (2, 3, 5 at 0 before 4), then slowdown (3, 5 at
    # 1.1 before 2), then GPU 0 (one job), then GPU 1 (two): 3, 5, 2, 4, 0, 1
    out = np.empty(3, dtype=np.int64)
    assert least_interference_k(ws.up, ws.n_res, 4, ws.mem_used, 4.0, ws.mem_cap, np.ones(6, dtype=bool), ws.util,
                                ws.slowdown, 0, 3, out) == 3  # the compiled path, not the fallback
    assert out.tolist() == [2, 3, 5]
    assert _least_interference(job, ws) == (2, 3, 5)
    assert _least_interference(dataclasses.replace(job, num_gpus=5), ws) == (0, 2, 3, 4, 5)
    assert _least_interference(dataclasses.replace(job, num_gpus=6), ws) == (0, 1, 2, 3, 4, 5)  # 28 + 4 <= 32
    assert _least_interference(dataclasses.replace(job, num_gpus=6, mem_gb=5.0), ws) is None  # 28 + 5 > 32
    assert _least_interference(dataclasses.replace(job, num_gpus=2, perf_class="B"), ws) == (2, 3)  # class B: all 1.0
    assert _least_interference(dataclasses.replace(job, gpu_type="nope"), ws) is None
    ws.util = np.array([0.5, 0.9, 0.0, np.nan, 0.3, 0.0])  # NaN: the numpy rule, whose sort puts it last
    assert _least_interference(job, ws) == least_interference_numpy(job, ws) == (2, 4, 5)


def test_take_many_gpus_equals_scalar_updates():
    ws, _ = _toy_state()  # n_res [1, 2, 0, 0, 0, 0], mem_used [8, 28, 0, 0, 0, 0], GPUs 0 and 1 not free
    n = 5
    assert SCALAR_GPUS < n  # the compiled update (the hand-computed states below)
    big = Job(9, 0.0, n, 10.0, "resnet50", "A", 2.5)
    assert ws.take(big, (0, 1, 2, 3, 4)) == 3  # GPUs 0 and 1 were not free
    assert ws.n_res.tolist() == [2, 3, 1, 1, 1, 0]
    assert ws.mem_used.tolist() == [10.5, 30.5, 2.5, 2.5, 2.5, 0.0]
    assert ws.ctx.free.tolist() == [False] * 5 + [True]
    small = Job(10, 0.0, 1, 10.0, "resnet50", "A", 1.5)
    assert ws.take(small, (5,)) == 1  # one scalar
    assert ws.take(small, (0,)) == 0
    assert ws.n_res.tolist() == [3, 3, 1, 1, 1, 1]
    assert ws.mem_used.tolist() == [12.0, 30.5, 2.5, 2.5, 2.5, 1.5]
    assert ws.ctx.free.tolist() == [False] * 6
    ws, _ = _toy_state()  # the same start on ids that are not a range
    assert ws.take(big, (0, 1, 2, 3, 5)) == 3
    assert ws.n_res.tolist() == [2, 3, 1, 1, 0, 1]
    assert ws.mem_used.tolist() == [10.5, 30.5, 2.5, 2.5, 0.0, 2.5]
    assert ws.ctx.free.tolist() == [False, False, False, False, True, False]


def test_take_compiled_equals_scalar_updates_on_random_sets():
    """Every GPU-set size (one or two GPUs: scalar updates; more: the compiled call) leaves the same
    arrays and count as one plain scalar update per GPU."""
    rng = np.random.default_rng(5)
    for _ in range(40):
        ws, _ = _toy_state()
        free, n_res, mem_used = ws.ctx.free.copy(), ws.n_res.copy(), ws.mem_used.copy()
        gpus = tuple(sorted(rng.choice(6, size=int(rng.integers(1, 7)), replace=False).tolist()))
        job = Job(9, 0.0, len(gpus), 10.0, "resnet50", "A", float(rng.choice([0.0, 0.1, 2.5])))
        want = 0
        for g in gpus:
            want += bool(free[g])
            free[g] = False
            n_res[g] += 1
            mem_used[g] += job.mem_gb
        assert ws.take(job, gpus) == want
        assert ws.ctx.free.tolist() == free.tolist()
        assert ws.n_res.tolist() == n_res.tolist()
        assert ws.mem_used.tolist() == mem_used.tolist()


@pytest.mark.parametrize("env_id", ["gpusched/Cluster-v0", "gpusched/Cluster-v1"])
def test_step_observations_are_the_callers_own(env_id):
    """Each step's observation is a new array (no copy of a cached one): an invalid action (no
    change) gives equal numbers in another array, and changing an array a step returned changes
    nothing the env returns later."""
    env = gym.make(env_id, scenario="synthetic_small")
    obs0, info = env.reset(seed=1)
    keep = obs0.copy()
    invalid = np.flatnonzero(~info["action_mask"])
    assert invalid.size
    obs0[:] = -7.0  # the caller's array: the env does not see it
    obs1, reward, *_ = env.step(int(invalid[0]))
    assert reward == -1.0 and obs1 is not obs0 and obs1.tolist() == keep.tolist()
    obs1[:] = -7.0
    obs2, *_ = env.step(int(invalid[0]))
    assert obs2 is not obs1 and obs2.tolist() == keep.tolist()
    b = env.unwrapped.builder
    assert b.observe() is not obs2 and b.observe().tolist() == keep.tolist()
    _, _, _, _, info = env.step(int(invalid[0]))
    want = info["action_mask"].tolist()
    info["action_mask"][:] = False  # the caller's array: the env's mask stays
    assert env.unwrapped.action_masks().tolist() == want and any(want)
