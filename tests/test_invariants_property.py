"""Property test: for random small workloads, every baseline keeps every invariant at every event."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpusched.baselines import get_policy
from gpusched_env.cluster.model import SimModel, StragglerConfig
from gpusched_env.cluster.simulator import Simulator
from gpusched_env.invariants import InvariantChecker
from gpusched_env.policy import run_policy
from gpusched_env.topology import NodeGroup, Topology
from gpusched_env.types import Job

MODELS = ["resnet50", "vgg19", "bert", "dcgan", "alexnet", "resnet18"]
POLICIES = ["fifo", "sjf", "srtf", "las", "tiresias", "gandiva", "packed_sticky", "packed_nonsticky",
            "random_sticky", "random_nonsticky", "pm_first", "pal", "fifo_packed", "eaco"]

job_st = st.tuples(
    st.floats(0, 3000), st.sampled_from([1, 1, 2, 4]), st.integers(10, 3000), st.sampled_from(MODELS),
    st.sampled_from([2.0, 6.0, 12.0]),
)


@settings(max_examples=12, deadline=None)
@given(jobs=st.lists(job_st, min_size=1, max_size=12), policy=st.sampled_from(POLICIES), seed=st.integers(0, 9))
def test_invariants_hold(jobs, policy, seed):
    js = [Job(i, a, g, w, m, mem_gb=mem) for i, (a, g, w, m, mem) in enumerate(jobs)]
    topo = Topology.build([NodeGroup(2, 4, "V100", 16.0)])
    checker = InvariantChecker()
    model = SimModel(stragglers=StragglerConfig(enabled=True, fraction_scale=0.5, sample_s=5.0), restart_cost_s=5.0)
    sim = Simulator(topo, js, model, seed=seed, checker=checker)
    kwargs = {"rng": np.random.default_rng(seed)} if policy.startswith("random") else {}
    run_policy(sim, get_policy(policy, **kwargs))
    checker.check_all_finished([j.job_id for j in js])
    assert checker.checks > 0
    res = sim.result()
    assert res.energy_j >= res.idle_floor_j
