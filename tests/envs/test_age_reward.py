"""The age-weighted (tail) reward term of the cluster envs: returns by hand on a toy, equal to
-(sum JCT + w sum JCT^2 / 2H) on a replayed heuristic, the age integral against brute force."""

from __future__ import annotations

import numpy as np
import pytest

from gpusched.agents.bc import make_teacher, play_v1
from gpusched_env.catalog import MODELS
from gpusched_env.envs import ClusterV1Env
from gpusched_env.envs.cluster import _JctIntegral
from gpusched_env.scenario import load_scenario
from gpusched_env.types import Job

T = MODELS["resnet50"].base_iter_s


def _toy():
    return load_scenario({
        "name": "toy", "round_s": 100.0,
        "cluster": {"nodes": [{"count": 1, "gpus_per_node": 1, "gpu_type": "V100", "gpu_mem_gb": 32.0}],
                    "max_jobs_per_gpu": 1},
        "workload": {"kind": "inline", "jobs": [
            {"job_id": 0, "arrival_s": 0.0, "num_gpus": 1, "work_iters": 1000, "model": "resnet50"},
            {"job_id": 1, "arrival_s": 10.0, "num_gpus": 1, "work_iters": 200, "model": "resnet50"}]},
        "model": {"variability": {"mode": "none"}, "restart_cost_s": 30.0, "start_cost_s": 0.0},
    })


def _play_first_valid(env: ClusterV1Env) -> None:
    env.reset(options={"workload": 0, "run_seed": 0})
    while True:
        mask = env.action_masks()
        *_, term, trunc, _ = env.step(int(np.flatnonzero(mask)[0]))
        if term or trunc:
            return


def test_toy_return_by_hand():
    """J0 runs 0..1000T alone; J1 (arrived at 10) runs next, ends at 1200T: JCTs 1000T and 1200T - 10.
    With age_weight w and scale H the return is -(sum JCT + w sum JCT^2 / 2H)."""
    w, h = 2.0, 50.0
    env = ClusterV1Env(_toy(), options=["packed"], queue_slots=2, fifo_slots=1, running_slots=2,
                       reward_scale=1.0, age_weight=w, age_scale_s=h)
    _play_first_valid(env)
    jcts = {r.job.job_id: r.jct_s for r in env.result().records}
    assert jcts[0] == pytest.approx(1000 * T) and jcts[1] == pytest.approx(1200 * T - 10.0)
    j0, j1 = 1000 * T, 1200 * T - 10.0
    assert env.episode_return == pytest.approx(-(j0 + j1 + w * (j0**2 + j1**2) / (2 * h)), rel=1e-9)


def test_off_by_default_and_bad_arguments():
    env = ClusterV1Env(_toy(), options=["packed"], queue_slots=2, fifo_slots=1, running_slots=2, reward_scale=1.0)
    assert env.age_weight == 0.0
    _play_first_valid(env)
    assert env.episode_return == pytest.approx(-(1000 * T + 1200 * T - 10.0), rel=1e-9)
    with pytest.raises(ValueError, match="age_weight"):
        ClusterV1Env(_toy(), age_weight=-1.0)
    with pytest.raises(ValueError, match="age_scale_s"):
        ClusterV1Env(_toy(), age_scale_s=0.0)


def test_replayed_las_return_is_the_convex_jct_cost():
    scn = load_scenario("synthetic_small")
    env = ClusterV1Env(scn, age_weight=0.5, age_scale_s=7200.0)
    res = play_v1(env, make_teacher("las", scn, 0), workload=0, run_seed=0)
    jct = np.array([r.jct_s for r in res.tracked])
    want = -(jct.sum() + 0.5 * (jct**2).sum() / (2 * 7200.0)) / 3600.0
    assert env.episode_return == pytest.approx(want, rel=1e-9)


def test_age_integral_against_brute_force():
    rng = np.random.default_rng(7)
    arrivals = np.sort(rng.uniform(0, 1e6, 40))
    finish = arrivals + rng.uniform(1, 5e5, 40)
    jobs = [Job(job_id=i, arrival_s=float(a), num_gpus=1, work_iters=1, model="resnet50") for i, a in enumerate(arrivals)]
    integral = _JctIntegral(jobs)
    done = np.zeros(40, bool)
    for t in np.sort(rng.uniform(0, 2e6, 30)):
        for i in np.flatnonzero((finish <= t) & ~done):
            integral.finish(float(finish[i]), float(arrivals[i]))
            done[i] = True
        age = np.clip(np.minimum(t, finish) - arrivals, 0.0, None)
        assert integral.at(t) == pytest.approx(age.sum(), rel=1e-9, abs=1e-6)
        assert integral.at2(t) == pytest.approx(0.5 * (age**2).sum(), rel=1e-9, abs=1e-3)
