"""Pipeline-parallel jobs in the cluster model: their iteration time comes from the pipeline level,
given the links their placement crosses and their GPUs' slowness."""

from __future__ import annotations

import pytest

from gpusched_env.cluster.model import SimModel
from gpusched_env.cluster.simulator import Simulator
from gpusched_env.cluster.variability import VariabilityConfig
from gpusched_env.pipeline.spec import PipelineSpec
from gpusched_env.policy import run_policy
from gpusched_env.topology import DEFAULT_LINKS, NodeGroup, Topology
from gpusched_env.types import Job, Start

SPEC = PipelineSpec(stages=2, microbatches=4, f_ms=(1.0, 1.0), b_ms=(1.0, 1.0), w_ms=(1.0, 1.0),
                    schedule="1f1b", activation_mb=125.0)
NO_VAR = SimModel(variability=VariabilityConfig(mode="none"))


class _Place:
    """Starts the one job on the given GPUs."""

    name, round_s, events = "place", None, True

    def __init__(self, gpus: tuple[int, ...]) -> None:
        self.gpus = gpus

    def decide(self, view):
        return [Start(j.job_id, self.gpus) for j in view.pending]


def _finish(gpus: tuple[int, ...], spec: PipelineSpec = SPEC) -> float:
    topo = Topology.build([NodeGroup(2, 2)], nodes_per_rack=2)
    sim = Simulator(topo, [Job(0, 0.0, 2, 1000, "resnet50", pipeline=spec)], NO_VAR)
    run_policy(sim, _Place(gpus))
    (rec,) = sim.result().records
    assert rec.finish_s is not None
    return rec.finish_s


def test_one_node_pipeline_matches_the_1f1b_closed_form():
    """1F1B with latency-only messages: (M + S - 1) x (F + B + W) = 5 x 3 ms per iteration (the
    1 us NVLink latency on the critical path is below the tolerance); 1000 iterations."""
    from dataclasses import replace

    t = _finish((0, 1), replace(SPEC, activation_mb=0.0)) / 1000  # seconds per iteration
    assert t == pytest.approx(15e-3, rel=1e-3)


def test_splitting_a_pipeline_over_nodes_costs_the_link():
    """125 MB per message: NVLink (150 GB/s) adds 0.83 ms per hop, InfiniBand (12.5 GB/s) 10 ms."""
    ib = DEFAULT_LINKS["rack"]
    hop_ms = (ib.latency_s + 125e6 / (ib.bandwidth_gbps * 1e9)) * 1e3
    assert hop_ms == pytest.approx(10.0, rel=1e-3)
    local, split = _finish((0, 1)), _finish((0, 2))
    assert split > local * 1.5  # the slow link is on the critical path of every micro-batch


def test_pipeline_job_needs_one_gpu_per_stage():
    topo = Topology.build([NodeGroup(1, 4)])
    with pytest.raises(ValueError, match=r"num_gpus \(3\) must equal pipeline.stages \(2\)"):
        Simulator(topo, [Job(0, 0.0, 3, 10, "resnet50", pipeline=SPEC)], NO_VAR)


def test_cluster_takes_colocation_speed_from_the_kernel_device_model():
    """sharing.model=kernel: two jobs sharing one H100 by MPS run at the slowdown the kernel-level
    device model gives for that tenant set (same seed stream as the simulator's)."""
    from dataclasses import replace

    import numpy as np

    from gpusched_env.catalog import MODELS
    from gpusched_env.device.analytic import SharingConfig
    from gpusched_env.device.kernel_device import KernelDevice
    from gpusched_env.device.seam import Tenant
    from gpusched_env.types import Sharing

    class _Mps:
        name, round_s, events = "mps", None, True

        def decide(self, view):
            return [Start(j.job_id, (0,), Sharing.mps(50)) for j in view.pending]

    model = replace(NO_VAR, sharing=SharingConfig(model="kernel"))
    topo = Topology.build([NodeGroup(1, 1, gpu_type="H100", gpu_mem_gb=80.0)])
    jobs = [Job(i, 0.0, 1, 200, "resnet50", mem_gb=10.0) for i in range(2)]
    sim = Simulator(topo, jobs, model, seed=3)
    run_policy(sim, _Mps())
    seed = int(np.random.SeedSequence(3).spawn(5)[4].generate_state(1)[0])
    spec = MODELS["resnet50"]
    tenant = Tenant("resnet50", min(spec.util, 1.0), Sharing.mps(50))
    sd = KernelDevice(seed=seed).share("H100", [tenant, tenant]).tenants[0].slowdown
    from gpusched_env.catalog import GPUS

    expect = 200 * spec.base_iter_s * sd / GPUS["H100"].speed
    assert [r.finish_s for r in sim.result().records] == pytest.approx([expect, expect], rel=1e-9)
    assert sd > 1.0
