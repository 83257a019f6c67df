"""Model parts against hand-computed values: sharing, MPS shares, power, variability, failures."""

from __future__ import annotations

import numpy as np
import pytest

from gpusched_env.catalog import GPUS, MODELS
from gpusched_env.cluster.model import FailureConfig, SimModel
from gpusched_env.cluster.simulator import Simulator
from gpusched_env.cluster.variability import VariabilityConfig, load_profile, sample_factors, write_profile
from gpusched_env.config_util import ConfigError
from gpusched_env.device.analytic import AnalyticDevice, SharingConfig
from gpusched_env.device.seam import Tenant
from gpusched_env.fitted import GAVEL_PAIRS, QUANTILE_GRID, VARIABILITY_QUANTILES
from gpusched_env.invariants import InvariantChecker
from gpusched_env.policy import run_policy
from gpusched_env.power import gpu_power_w
from gpusched_env.scenario import load_scenario
from gpusched_env.testing import StrictFifo
from gpusched_env.topology import NodeGroup, Topology
from gpusched_env.types import Job, Sharing, Start

DEVICE = AnalyticDevice(SharingConfig())
WHOLE = Sharing()


def slowdowns(tenants: list[Tenant]) -> list[float]:
    return [t.slowdown for t in DEVICE.share("V100", tenants).tenants]


def test_gavel_pair_used_for_known_pairs():
    a = Tenant("resnet50", 0.96, WHOLE)
    b = Tenant("resnet18", 0.112, WHOLE)
    assert slowdowns([a, b]) == [GAVEL_PAIRS["V100"]["resnet50|resnet18"], GAVEL_PAIRS["V100"]["resnet18|resnet50"]]


def test_eaco_count_fallback():
    a = Tenant("alexnet", 0.047, WHOLE)
    b = Tenant("vgg16", 0.48, WHOLE)
    assert slowdowns([a, b])[0] == pytest.approx(1.03)
    assert slowdowns([a, b, a])[0] == pytest.approx(1.078)
    assert slowdowns([a, b, a, a]) == pytest.approx([1.19] * 4)
    busy = [Tenant("vgg16", 0.8, WHOLE), Tenant("alexnet", 0.6, WHOLE)]  # time-slicing saturates
    assert slowdowns(busy) == pytest.approx([1.03 * 1.4] * 2)
    assert DEVICE.share("V100", busy).util == 1.0


def test_mps_share_speed():
    a = Tenant("resnet50", 0.8, Sharing.mps(40))
    b = Tenant("bert", 0.5, Sharing.mps(50))
    out = DEVICE.share("V100", [a, b])
    assert [t.slowdown for t in out.tenants] == pytest.approx([2.0, 1.0])  # 0.8 / 0.4; shares sum 0.9
    assert out.util == pytest.approx(0.4 + 0.5)
    c = Tenant("bert", 0.5, Sharing.mps(80, oversubscribe=True))  # oversubscribed: shares sum 1.2
    assert slowdowns([a, c]) == pytest.approx([2.0 * 1.2, 1.0 * 1.2])


def test_alone_keeps_own_utilisation():
    out = DEVICE.share("V100", [Tenant("vgg16", 0.48, WHOLE)])
    assert (out.tenants[0].slowdown, out.util) == (1.0, 0.48)


def test_power_linear_in_util():
    v = GPUS["V100"]
    assert gpu_power_w(v.idle_w, v.busy_w, 0.5) == pytest.approx((v.idle_w + v.busy_w) / 2)
    assert gpu_power_w(v.idle_w, v.busy_w, 2.0) == pytest.approx(v.busy_w)


def test_colocated_jobs_run_slower_in_sim():
    jobs = [Job(0, 0.0, 1, 100, "resnet50", "A", 10.0), Job(1, 0.0, 1, 100, "resnet50", "A", 10.0)]

    class Share(StrictFifo):
        def decide(self, view):
            return [Start(j.job_id, (0,)) for j in view.pending]

    sim = Simulator(Topology.build([NodeGroup(1, 1)]), jobs, SimModel(variability=VariabilityConfig(mode="none")))
    run_policy(sim, Share())
    pair = GAVEL_PAIRS["V100"]["resnet50|resnet50"]
    t = MODELS["resnet50"].base_iter_s
    assert [r.finish_s for r in sim.result().records] == pytest.approx([100 * t * pair] * 2)


def test_variability_sampling_follows_quantiles():
    f = sample_factors(20000, VariabilityConfig(mode="per_run"), np.random.default_rng(0))
    q = np.quantile(f[:, 0], [0.05, 0.5, 0.95])
    grid = VARIABILITY_QUANTILES["A"]["per_run"]
    assert q[1] == pytest.approx(1.0, abs=0.01)
    assert q[0] == pytest.approx(grid[QUANTILE_GRID.index(0.05)], abs=0.01)
    assert q[2] == pytest.approx(grid[QUANTILE_GRID.index(0.95)], abs=0.02)
    g = sample_factors(1000, VariabilityConfig(mode="per_gpu"), np.random.default_rng(0))
    assert np.corrcoef(g[:, 0], g[:, 2])[0, 1] > 0.9  # one quantile level per GPU across classes


def test_profile_roundtrip(tmp_path):
    f = np.array([[1.0, 1.1, 0.9, 1.0], [1.2, 1.0, 1.0, 1.3]])
    write_profile(tmp_path / "p.csv", f, np.array([0, 0]))
    assert np.allclose(load_profile(tmp_path / "p.csv"), f)
    (tmp_path / "bad.csv").write_text("gpu,node,A,B,C\n0,0,1,1,1\n")
    with pytest.raises(ValueError, match="missing column"):
        load_profile(tmp_path / "bad.csv")


def test_node_failure_requeues_and_finishes():
    jobs = [Job(i, 0.0, 1, 20000, "resnet50", "A", 1.0) for i in range(4)]
    model = SimModel(failures=FailureConfig(mtbf_h=0.5, repair_s=600.0, checkpoint_interval_s=600.0))
    checker = InvariantChecker()
    sim = Simulator(Topology.build([NodeGroup(2, 2)]), jobs, model, seed=3, checker=checker)
    run_policy(sim, StrictFifo())
    res = sim.result()
    assert all(r.finish_s is not None for r in res.records)
    assert sum(r.preemptions for r in res.records) > 0  # some were hit by failures
    checker.check_all_finished([j.job_id for j in jobs])


def test_unknown_config_key_is_named():
    with pytest.raises(ConfigError, match=r"scenario.model.power: unknown key\(s\) \['idle_wattage'\]"):
        load_scenario("synthetic_small", {"model": {"power": {"idle_wattage": 3}}})
    with pytest.raises(ConfigError, match="scenario.round_s: expected a number"):
        load_scenario("synthetic_small", {"round_s": "soon"})
    with pytest.raises(ConfigError, match="no file"):
        load_scenario("no_such_scenario")


def test_job_larger_than_cluster_is_an_error():
    with pytest.raises(ValueError, match="needs 9 GPUs; the cluster has 4"):
        Simulator(Topology.build([NodeGroup(1, 4)]), [Job(0, 0.0, 9, 1, "dcgan")])


def test_sleeping_node_draws_sleep_w_in_all():
    from gpusched_env.fitted import NODE_BASE_W
    from gpusched_env.power import PowerConfig

    model = SimModel(variability=VariabilityConfig(mode="none"), power=PowerConfig(low_power_idle=True, sleep_w=60.0))
    sim = Simulator(Topology.build([NodeGroup(2, 2)]), [Job(0, 0.0, 1, 100, "resnet50", "A", 1.0)], model)
    run_policy(sim, StrictFifo())
    t = 100 * MODELS["resnet50"].base_iter_s
    v = GPUS["V100"]
    busy = v.idle_w + (v.busy_w - v.idle_w) * MODELS["resnet50"].util
    assert sim.result().energy_j == pytest.approx((NODE_BASE_W + busy + v.idle_w + 60.0) * t)


def test_class_source_draws_from_another_class():
    cfg = VariabilityConfig(mode="per_run", class_source={"C": "B"})
    f = sample_factors(5000, cfg, np.random.default_rng(1))
    assert f[:, 2].max() < 1.4  # BERT's per-run tail (max 1.30), not SGEMM's
    with pytest.raises(ValueError, match="class_source"):
        VariabilityConfig(class_source={"E": "A"})
