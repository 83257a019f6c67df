"""GPUShare-v0 and Pipeline-v0 arguments used for training and held-out evaluation: workload pools,
run-seed pools, truncation, and the run's metrics at the episode's end."""

from __future__ import annotations

import numpy as np
import pytest

from gpusched_env.device.decisions import DarisDriver
from gpusched_env.envs.gpushare import GPUShareEnv, first_choice
from gpusched_env.envs.pipeline import PipelineEnv
from gpusched_env.pipeline import bench as pipeline_bench


def test_gpushare_pools_truncation_and_bad_values():
    env = GPUShareEnv("daris_rt", workloads=[2], run_seeds=[7, 8], duration_s=0.1, max_steps=5)
    for _ in range(3):
        _, info = env.reset()
        assert isinstance(env.driver, DarisDriver) and env.driver.workload == 2
        for k in range(5):
            _, _, term, trunc, info = env.step(first_choice(info["action_mask"]))
            assert not term and trunc == (k == 4)
    with pytest.raises(ValueError, match="workloads must be indices in 0..3"):
        GPUShareEnv("daris_rt", workloads=[4])
    with pytest.raises(ValueError, match="max_steps must be >= 1"):
        GPUShareEnv("daris_rt", max_steps=0)


def test_gpushare_run_seed_pool_gives_the_seeded_run():
    """An episode drawn from run_seeds=[s] is the run of reset(seed=s): same rewards."""
    def rewards(env: GPUShareEnv, seed: int | None) -> list[float]:
        _, info = env.reset(seed=seed)
        out = []
        for _ in range(200):
            _, r, term, _, info = env.step(first_choice(info["action_mask"]))
            out.append(r)
            if term:
                break
        return out

    pooled = rewards(GPUShareEnv("tally_pairs", workload=0, run_seeds=[4], duration_s=0.2), None)
    seeded = rewards(GPUShareEnv("tally_pairs", workload=0, duration_s=0.2), 4)
    assert pooled == seeded and len(pooled) > 10


def test_pair_metrics_keys_are_the_benchs():
    """The env's end-of-run metrics have the bench's keys: no SLO metrics where the scenario has none."""
    env = GPUShareEnv("tally_pairs", workload=1, duration_s=0.3, slo_factor=1.5)
    _, info = env.reset(seed=0)
    while True:
        _, _, term, _, info = env.step(first_choice(info["action_mask"]))
        if term:
            break
    from gpusched_env.device import bench

    assert set(info["metrics"]) == set(bench.run(env.scn, "mps_priority", 0, 1).metrics)
    assert "hp_deadline_miss_rate" not in info["metrics"] and "hp_latency_ms" in info["series"]


def test_pipeline_cases_and_seed_pools():
    env = PipelineEnv(workloads=[0], max_steps=3)
    _, info = env.reset(seed=1)
    for _ in range(3):
        _, _, term, trunc, info = env.step(env.zb_action())
    assert not term and trunc and env._wl is not None and env._wl.name == "delay-10ms"
    # a case run to its end reports the bench's metric keys and the iteration series
    env = PipelineEnv()
    _, info = env.reset(seed=0, options={"workload": 0})
    done = False
    while not done:
        _, _, done, _, info = env.step(env.adaptra_action())
    want = pipeline_bench.run(env.scn, "adaptra", 0, 0)
    assert set(info["metrics"]) == set(want.metrics) and len(info["series"]["iteration_ms"]) == 20

    def first_obs(e: PipelineEnv) -> np.ndarray:
        e.reset()
        trace = [e.step(e.zb_action())[0] for _ in range(10)]
        return np.array(trace)

    a, b = PipelineEnv(run_seeds=[3]), PipelineEnv(run_seeds=[3])
    a.reset(seed=10)  # different np_random states, same pool: the same random trace
    b.reset(seed=11)
    assert np.array_equal(first_obs(a), first_obs(b))
    with pytest.raises(ValueError, match="workloads must be case indices in 0..4"):
        PipelineEnv(workloads=[5])


def test_pair_be_progress_is_dense_and_sums_to_the_be_throughput():
    """BE progress comes kernel group by kernel group; over a run it adds up to the BE iterations
    done ÷ standalone iterations, up to the unfinished last iteration (< 1 / standalone iterations)."""
    env = GPUShareEnv("tally_pairs", workload=0, duration_s=0.5, be_weight=1.0, slo_factor=1e6)  # no violations
    _, info = env.reset(seed=2)
    total, rewarded = 0.0, 0
    while True:
        _, r, term, _, info = env.step(first_choice(info["action_mask"]))
        total += r
        rewarded += r > 0
        if term:
            break
    assert env.driver is not None and isinstance(env.driver.solo_be, int)
    be_norm = info["metrics"]["be_norm_throughput"]
    assert 0 <= total - be_norm < 1.0 / env.driver.solo_be
    assert rewarded > 10 * info["metrics"]["be_norm_throughput"] * env.driver.solo_be  # many steps per iteration


def test_taskset_violations_count_at_the_deadline_and_sum_to_the_late_jobs():
    env = GPUShareEnv("daris_rt", workload=0, duration_s=0.3, be_weight=0.0)
    _, info = env.reset(seed=1)
    penalties = []
    while True:
        m = info["action_mask"]
        _, r, term, _, info = env.step(8 if m[8] else first_choice(m))  # starve LP whenever allowed
        penalties.append(-r)
        if term:
            break
    assert isinstance(env.driver, DarisDriver)
    st = env.driver.sim.stats
    assert sum(penalties) == st[True].late + st[False].late > 0
    assert sum(penalties[:-1]) > 0  # felt before the run's end
