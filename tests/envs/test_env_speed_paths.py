"""The Cluster env's cheap paths give what the plain computation gives:

- the decision builder's fit checks, mask and validity (short Python lists, the mask joined from
  per-option byte rows) equal a numpy transcription of their definition, along random rollouts on
  an exclusive cluster, a shared one and one whose jobs constrain their GPUs;
- the JCT integral (a bisect on Python lists) equals the brute-force sum of ages;
- PAL's background jobs (built from field values) equal ``dataclasses.replace`` copies;
- a reset after other runs gives the episode a fresh env gives (nothing of one run leaks into the next).

``tests/envs/env_digest.py`` compares whole rollouts between two commits.
"""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import numpy as np
import pytest

import gpusched_env  # noqa: F401  (registers the envs)
from gpusched_env.envs import ClusterEnv
from gpusched_env.envs.cluster import _JctIntegral
from gpusched_env.envs.observe import DecisionBuilder
from gpusched_env.envs.options import OptionSet, WorkingState, job_util
from gpusched_env.scenario import load_scenario
from gpusched_env.types import Job
from gpusched_env.workload.pal import background_gaps, with_background


def _plain_fits(b: DecisionBuilder) -> tuple[np.ndarray, np.ndarray]:
    """Fit checks by definition: an exclusive option needs ``num_gpus`` eligible free GPUs in the
    working state, ``least_interference`` needs ``num_gpus`` GPUs with a free slot and memory."""
    ws = b.ws
    window = b.window
    ex = np.array([ws.ctx.n_eligible(j) >= j.num_gpus for j in window], dtype=bool)
    if b.options.all_exclusive:
        sh = np.zeros(len(window), dtype=bool)
    else:
        sh = np.array([int(np.count_nonzero(ws.shareable(j))) >= j.num_gpus for j in window], dtype=bool)
    return ex, sh


def _plain_mask(b: DecisionBuilder, ex: np.ndarray, sh: np.ndarray) -> np.ndarray:
    p = len(b.options)
    m = np.zeros(b.k * p + 1, dtype=bool)
    n = ex.size
    m[: n * p].reshape(n, p)[:] = np.where(b.options.exclusive, ex[:, None], sh[:, None])
    valid = bool((b.options.any_exclusive and ex.any()) or sh.any())
    m[-1] = bool(b.decisions or b.view.running or not valid)
    return m


def _all_at_t0(name: str, gpu_type: str | None = None):
    """The scenario with every inline job arriving at t = 0 (several starts within one decision
    point); with ``gpu_type`` every job asks for that GPU type (the exact fit checks)."""
    scn = load_scenario(name)
    extra = {} if gpu_type is None else {"gpu_type": gpu_type}
    jobs = [dict(j, arrival_s=0.0, **extra) for j in scn.workload.jobs]
    return dataclasses.replace(scn, workload=dataclasses.replace(scn.workload, jobs=jobs))


@pytest.mark.parametrize("scenario,options,min_starts", [
    ("synthetic_small", None, 1),
    ("eaco_node", None, 5),
    ("eaco_node", ("least_interference", "consolidate"), 5),
    ("eaco_node", ("pal", "packed"), 0),  # 8-GPU jobs on one 8-GPU node: one start per point
    ("eaco_node_typed", None, 5),
])
def test_mask_and_fits_equal_their_definition(scenario, options, min_starts):
    scn = {"eaco_node": lambda: _all_at_t0("eaco_node"), "eaco_node_typed": lambda: _all_at_t0("eaco_node", "V100")}.get(
        scenario, lambda: scenario)()
    kwargs = {} if options is None else {"options": options}
    env = gym.make("gpusched/Cluster-v0", scenario=scn, **kwargs)
    u = env.unwrapped
    assert isinstance(u, ClusterEnv)
    assert u._jobs.constrained == (scenario == "eaco_node_typed") or u.builder is None
    rng = np.random.default_rng(5)
    _, info = env.reset(seed=5)
    assert u._jobs.constrained == (scenario == "eaco_node_typed")
    checked = starts = 0
    for n in range(250):
        b = u.builder
        assert b is not None
        if not u._over:
            ex, sh = _plain_fits(b)
            got_ex, got_sh = b._fits()
            assert list(got_ex) == ex.tolist()
            if not b.options.all_exclusive:
                assert list(got_sh) == sh.tolist()
            want = _plain_mask(b, ex, sh)
            assert b.mask().dtype == np.bool_ and b.mask().tolist() == want.tolist()
            assert info["action_mask"].tolist() == want.tolist()
            assert b.any_valid() == bool(want[:-1].any())
            checked += 1
            starts += bool(b.decisions)
        valid = np.flatnonzero(info["action_mask"])
        _, _, term, trunc, info = env.step(int(valid[int(rng.random() * valid.size)]))
        if term or trunc:
            _, info = env.reset(seed=6 + n)
    assert checked > 100 and starts >= min_starts


def test_mask_rows_by_hand():
    opts = OptionSet(("pal", "least_interference", "packed"))
    assert opts.mask_rows[True, False] == bytes([1, 0, 1])
    assert opts.mask_rows[False, True] == bytes([0, 1, 0])
    assert opts.mask_rows[True, True] == bytes([1, 1, 1])
    assert opts.mask_rows[False, False] == bytes(3)
    # a window's entries by fit code (1: exclusive fits, 2: shared fits), remembered by pattern
    assert opts.mask_body(bytes([1, 2, 3, 0])) == bytes([1, 0, 1, 0, 1, 0, 1, 1, 1, 0, 0, 0])
    assert opts.mask_body(bytes([1, 2, 3, 0])) is opts.mask_body(bytes([1, 2, 3, 0]))
    assert opts.mask_body(b"") == b""


def test_jct_integral_against_brute_force():
    rng = np.random.default_rng(2)
    arrivals = np.round(rng.uniform(0, 100, 40), 1)
    jobs = [Job(i, float(a), 1, 10, "resnet50", tracked=i % 5 != 0) for i, a in enumerate(arrivals)]
    tracked = [j for j in jobs if j.tracked]
    integral = _JctIntegral(jobs)
    finished: dict[int, float] = {}
    for t in np.linspace(0, 150, 31).tolist():
        for j in tracked:  # jobs whose (made-up) finish time has come finish first
            if j.job_id not in finished and j.arrival_s + 20 + j.job_id <= t:
                finished[j.job_id] = j.arrival_s + 20 + j.job_id
                integral.finish(finished[j.job_id], j.arrival_s)
        ages = [min(t, finished.get(j.job_id, t)) - j.arrival_s for j in tracked if j.arrival_s <= t]
        assert integral.at(t) == pytest.approx(sum(ages), abs=1e-9)
        assert integral.at2(t) == pytest.approx(sum(a * a for a in ages) / 2, rel=1e-12, abs=1e-9)


def test_background_jobs_equal_replace_copies():
    base = [Job(3, 50.0, 2, 1000.0, "resnet50", "B", 8.0), Job(1, 10.0, 4, 200.0, "vgg16", "C", 12.0, priority=2)]
    got = with_background(base, rng=np.random.default_rng(9), n_background=5, rate_per_hour=2.0)
    gaps = np.ceil(background_gaps(np.random.default_rng(9), 5, 2.0))
    ordered = [base[1], base[0]]  # by arrival
    want = [dataclasses.replace(ordered[k % 2], job_id=4 + k, arrival_s=float(50.0 + np.cumsum(gaps)[k]),
                                tracked=False) for k in range(5)]
    assert got == want
    assert [j.job_id for j in got] == [4, 5, 6, 7, 8]
    assert got[0].model == "vgg16" and got[0].priority == 2 and got[1].model == "resnet50"
    assert all(type(j.arrival_s) is float and j.tracked is False for j in got)


def _rollout(env: gym.Env, workload: int, run_seed: int, steps: int) -> list[tuple[bytes, bytes, float]]:
    """(observation, mask, reward) of ``steps`` seeded random masked actions after one reset."""
    rng = np.random.default_rng(3)
    obs, info = env.reset(seed=0, options={"workload": workload, "run_seed": run_seed})
    out = [(obs.tobytes(), info["action_mask"].tobytes(), 0.0)]
    for _ in range(steps):
        valid = info["action_mask"].nonzero()[0]
        obs, reward, term, trunc, info = env.step(int(valid[int(rng.random() * valid.size)]))
        out.append((obs.tobytes(), info["action_mask"].tobytes(), float(reward)))
        if term or trunc:
            break
    return out


def test_reset_after_other_runs_gives_a_fresh_envs_episode():
    """The same (workload, run seed) after runs of other workloads and seeds, in one env (its job
    cache, workload cache and PAL's background copies reused across resets), gives the episode of a
    fresh env, step for step."""
    env = gym.make("gpusched/Cluster-v0", scenario="pal_philly")
    first = _rollout(env, 1, 7, 80)
    _rollout(env, 2, 8, 30)
    _rollout(env, 1, 9, 30)
    again = _rollout(env, 1, 7, 80)
    fresh = _rollout(gym.make("gpusched/Cluster-v0", scenario="pal_philly"), 1, 7, 80)
    assert len(first) == 81
    assert again == first
    assert fresh == first


def test_added_util_summed_on_first_read_equals_the_running_sum():
    """WorkingState.added_util, summed when first read and kept up to date after, equals the
    catalogue utilisation of every start on each of its GPUs (hand-computed sums)."""
    from gpusched_env.cluster.model import SimModel
    from gpusched_env.cluster.simulator import Simulator
    from gpusched_env.placement import PlacementContext
    from gpusched_env.topology import NodeGroup, Topology

    topo = Topology.build([NodeGroup(1, 4)])
    jobs = [Job(0, 0.0, 2, 10.0, "resnet50", "A", 4.0), Job(1, 0.0, 1, 10.0, "vgg16", "B", 4.0),
            Job(2, 0.0, 2, 10.0, "vgg16", "B", 4.0)]
    sim = Simulator(topo, jobs, SimModel(), seed=0, max_jobs_per_gpu=4)
    sim.start(None)
    assert sim.advance()
    r, v = job_util(jobs[0]), job_util(jobs[1])
    assert 0 < r <= 1 and 0 < v <= 1 and r != v
    ws = WorkingState(PlacementContext(sim.view()))
    ws.take(jobs[0], (0, 1))
    ws.take(jobs[1], (1,))
    assert ws.added_util.tolist() == [r, r + v, 0.0, 0.0]
    ws.take(jobs[2], (1, 3))
    assert ws.added_util.tolist() == [r, r + v + v, 0.0, v]
    assert ws.n_res.tolist() == [1, 3, 0, 1]
