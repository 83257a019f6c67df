"""Fuzzing the cluster model through the bench's own path: generated scenarios (mixed GPU types,
jobs larger than a node or than the cluster, bursts, zero-length jobs, failures and stragglers on,
every cluster-level policy of ``baselines``). Every case either runs to the end with the invariant
checker on, finishing every job, or stops with a project error (ConfigError) naming the input.

CI runs the ``ci`` profile (a few hundred cases); ``make fuzz`` sets GPUSCHED_FUZZ=long (10,000).
"""

from __future__ import annotations

import os
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from gpusched.agents.policies import make_policy
from gpusched.baselines import POLICY_NAMES
from gpusched_env.cluster.build import simulate
from gpusched_env.config_util import ConfigError
from gpusched_env.scenario import build_workloads, load_scenario

settings.register_profile("gpusched-fuzz-ci", max_examples=300, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("gpusched-fuzz-long", max_examples=10_000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
PROFILE = settings.get_profile(f"gpusched-fuzz-{os.environ.get('GPUSCHED_FUZZ', 'ci')}")

GPU_TYPES = ["V100", "A100", "K80", "T4", "H100"]
MODELS = ["resnet50", "vgg19", "bert", "pointnet", "gpt2", "dcgan", "a3c"]
ARRIVALS = st.one_of(st.sampled_from([0.0, 0.0, 10.0, 10.0, 3600.0]),  # bursts: many jobs at one instant
                     st.floats(0.0, 7200.0, allow_nan=False))


@st.composite
def jobs(draw: Any, n_gpus_hint: int, types: list[str]) -> list[dict[str, Any]]:
    n = draw(st.integers(1, 12))
    out = []
    for i in range(n):
        odd = draw(st.integers(0, 3 * n)) == 0  # now and then a job no GPU set can hold
        job: dict[str, Any] = {
            "job_id": i,
            "arrival_s": draw(ARRIVALS),
            # often larger than a node; now and then larger than the cluster
            "num_gpus": draw(st.integers(n_gpus_hint + 1, n_gpus_hint + 2) if odd else st.integers(1, n_gpus_hint)),
            "work_iters": draw(st.sampled_from([0.0, 1.0, 50.0, 500.0, 3000.0])),  # zero-length jobs too
            "model": draw(st.sampled_from(MODELS)),
            "mem_gb": draw(st.sampled_from([30.0, 60.0] if odd else [0.0, 2.0, 12.0])),
        }
        if draw(st.integers(0, 4)) == 0:  # a required GPU type; now and then one the cluster lacks
            job["gpu_type"] = draw(st.sampled_from(["A40"] if odd else types))
        if draw(st.booleans()):
            job["priority"] = draw(st.integers(0, 1))
        out.append(job)
    return out


@st.composite
def scenarios(draw: Any) -> dict[str, Any]:
    groups = draw(st.lists(st.fixed_dictionaries({
        "count": st.integers(1, 3),
        "gpus_per_node": st.sampled_from([1, 2, 4, 8]),
        "gpu_type": st.sampled_from(GPU_TYPES),
        "gpu_mem_gb": st.sampled_from([16.0, 32.0, 80.0]),
    }), min_size=1, max_size=3))
    n_gpus = sum(g["count"] * g["gpus_per_node"] for g in groups)
    types = sorted({g["gpu_type"] for g in groups})
    if draw(st.integers(0, 3)) == 0:
        workload: dict[str, Any] = {"kind": "synthetic_philly", "n_jobs": draw(st.integers(1, 25)),
                                    "load": draw(st.sampled_from([0.3, 0.9, 2.0])),
                                    "max_gpus": draw(st.sampled_from([None, 1, 4, n_gpus]))}
    else:
        workload = {"kind": "inline", "jobs": draw(jobs(n_gpus, types))}
    model: dict[str, Any] = {
        "locality": {"mode": draw(st.sampled_from(["constant", "bandwidth"])),
                     "lf": draw(st.sampled_from([1.0, 1.7, 3.0]))},
        "variability": {"mode": draw(st.sampled_from(["per_gpu", "per_run", "none"]))},
        "restart_cost_s": draw(st.sampled_from([0.0, 30.0])),
        "start_cost_s": draw(st.sampled_from([0.0, 5.0])),
    }
    if draw(st.booleans()):
        model["failures"] = {"mtbf_h": draw(st.sampled_from([0.5, 2.0, 24.0])),
                             "repair_s": draw(st.sampled_from([0.0, 60.0, 3600.0])),
                             "checkpoint_interval_s": draw(st.sampled_from([60.0, 1800.0]))}
    if draw(st.integers(0, 3)) == 0:
        model["stragglers"] = {"enabled": True}
    return {
        "name": "fuzz",
        "cluster": {"nodes": groups, "nodes_per_rack": draw(st.integers(1, 3)),
                    "max_jobs_per_gpu": draw(st.integers(1, 4))},
        "workload": workload,
        "model": model,
        # Philly-length synthetic jobs (hours) under 60 s rounds are thousands of decision points per
        # case; short rounds are drawn for the inline jobs (seconds to minutes) only.
        "round_s": draw(st.sampled_from([None, 360.0, 3600.0] if workload["kind"] == "synthetic_philly"
                                        else [None, 60.0, 360.0])),
    }


def run_case(raw: dict[str, Any], policy: str, seed: int) -> str:
    """One case: 'error' (a ConfigError naming the input) or 'ok' (ran, every job finished)."""
    try:
        scn = load_scenario(raw)
        (_, jobs_), = build_workloads(scn, seed)
    except ConfigError as e:
        msg = str(e)
        assert msg.startswith("scenario") and "\n" not in msg, msg  # names the key or the job
        return "error"
    name, result = simulate(scn, make_policy(policy, scn, seed), seed, check=True)
    unfinished = sorted(r.job.job_id for r in result.records if r.finish_s is None)
    assert not unfinished, f"{policy}: jobs {unfinished} never finished (of {len(jobs_)})"
    assert len(result.records) == len(jobs_)
    return "ok"


@PROFILE
@given(raw=scenarios(), policy=st.sampled_from(POLICY_NAMES), seed=st.integers(0, 3))
def test_fuzz_scenarios(raw: dict[str, Any], policy: str, seed: int) -> None:
    event(run_case(raw, policy, seed))


def test_fuzz_reaches_both_outcomes() -> None:
    """The generator is not degenerate: the same case kinds run and are refused."""
    ok = {"name": "f", "cluster": {"nodes": [{"count": 2, "gpus_per_node": 2, "gpu_type": "V100"}]},
          "workload": {"kind": "inline", "jobs": [
              {"job_id": 0, "arrival_s": 0.0, "num_gpus": 3, "work_iters": 0.0, "model": "bert"},  # spans nodes
              {"job_id": 1, "arrival_s": 0.0, "num_gpus": 1, "work_iters": 10.0, "model": "bert", "gpu_type": "V100"}]},
          "model": {"failures": {"mtbf_h": 0.5}}}
    assert run_case(ok, "fifo", 0) == "ok"
    big = {**ok, "workload": {"kind": "inline", "jobs": [
        {"job_id": 0, "arrival_s": 0.0, "num_gpus": 5, "work_iters": 1.0, "model": "bert"}]}}
    assert run_case(big, "fifo", 0) == "error"
