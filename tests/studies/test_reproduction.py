"""gpusched/studies/reproduction.py helpers and the PAL locality behaviour the A2 sweep relies on."""

from __future__ import annotations

import numpy as np
import pytest

from gpusched.baselines.pal import PALPlacement, _FactorSource
from gpusched.baselines.placement import PMFirstPlacement
from gpusched.studies.reproduction import gains, geomean_gain
from gpusched_env.placement import PlacementContext
from gpusched_env.scenario import load_scenario
from tests.baselines.bl_helpers import job, make_state, make_view


def test_pal_locality_is_the_sweep_one_workload_per_lf() -> None:
    from gpusched.bench.runner import cached_workloads, make_policy

    scn = load_scenario("pal_locality")
    assert scn.workload_names == ["lf-1.0", "lf-1.5", "lf-2.0", "lf-2.5", "lf-3.0"]
    assert scn.model.variability.mode == "pal_artifact"
    lfs = [1.0, 1.5, 2.0, 2.5, 3.0]
    assert [scn.model_for(i).locality.lf for i in range(5)] == lfs
    # PAL plans with the penalty its workload's model charges (the artifact's one flag)
    assert [make_policy("pal", scn, 0, workload=i).placement.source.lf for i in range(5)] == lfs
    # every lf runs the same jobs, background included
    wls = cached_workloads(scn, 0)
    assert all(jobs is wls[0][1] for _, jobs in wls) and len(wls[0][1]) > 160
    # the paper rows: both policies at every lf; published only at the ends of the sweep
    rows = {(c.policy, c.workloads[0]): c.value for c in scn.paper}
    assert len(rows) == 10 and all(c.baseline == "packed_sticky" for c in scn.paper)
    assert rows[("pm_first", "lf-1.0")] == rows[("pal", "lf-1.0")] == 0.30
    assert rows[("pm_first", "lf-3.0")] == 0.09 and rows[("pal", "lf-3.0")] == 0.20
    assert rows[("pal", "lf-2.0")] is None


def test_gain_helpers() -> None:
    block = {"b": {"per_workload": [{"metrics": {"avg_jct_s": 100.0}}, {"metrics": {"avg_jct_s": 200.0}}]},
             "p": {"per_workload": [{"metrics": {"avg_jct_s": 50.0}}, {"metrics": {"avg_jct_s": 200.0}}]}}
    g = gains(block, "b")
    assert g["p"] == [0.5, 0.0]
    assert geomean_gain(g["p"]) == pytest.approx(1 - np.sqrt(0.5))


def test_pal_keeps_a_4gpu_job_on_one_node_where_pm_first_spans() -> None:
    # 2 nodes x 4 GPUs, class A: node 0 = F F S S, node 1 = F F S S; a 4-GPU job.
    s = make_state(2, 4)
    sd = np.full((8, 4), 1.2)
    sd[[0, 1, 4, 5], 0] = 1.0
    view = make_view(s, slowdown=sd)
    free = np.ones(8, dtype=bool)
    src = _FactorSource(2, 3.0, 1.7)
    pm = PMFirstPlacement(src.levels).place(job(0, 4), PlacementContext(view, free.copy()))
    pal = PALPlacement(src).place(job(0, 4), PlacementContext(view, free.copy()))
    assert pm == (0, 1, 4, 5)  # the four fast GPUs, across both nodes (x lf)
    assert pal == (0, 1, 2, 3)  # (slow, within, 1.2) precedes (fast, across, 1.7): one node
    # with lf = 1.1 the across-node fast set wins again (1.1 < 1.2)
    pal11 = PALPlacement(_FactorSource(2, 3.0, 1.1)).place(job(0, 4), PlacementContext(view, free.copy()))
    assert pal11 == (0, 1, 4, 5)


def test_eaco_sets_separate_by_set_size_and_policy(tmp_path) -> None:
    from gpusched.studies.reproduction import eaco_sets

    doc = eaco_sets(1, tmp_path, sizes=(2, 4), gpus_per_job=(8, 4))
    assert doc["arrival_gap_s"] == 3600.0
    rows = {(r["set"], r["gpus_per_job"], r["policy"]): r for r in doc["rows"]}
    four = "vgg16+resnet50_imagenet+resnet18+alexnet"
    pair = "resnet18+alexnet"
    # whole-node pairs: every co-locating policy co-locates at once (EaCO's 3 % for 2 jobs, an input)
    assert rows[(pair, 8, "eaco")]["avg_run_change"] == pytest.approx(0.03, abs=0.002)
    assert rows[(pair, 8, "eaco")]["energy_saving"] == rows[(pair, 8, "fifo_packed")]["energy_saving"]
    assert 0.39 < rows[(pair, 8, "eaco")]["energy_saving"] < 0.41
    # all four: fifo_packed co-locates 4 (19 % slowdown, an input, over most of the run); eaco stops at 2
    assert rows[(four, 8, "fifo_packed")]["avg_run_change"] == pytest.approx(0.19, abs=0.01)
    assert rows[(four, 8, "fifo_packed")]["energy_saving"] == pytest.approx(0.388, abs=0.005)
    assert rows[(four, 8, "eaco")]["energy_saving"] == pytest.approx(0.306, abs=0.005)
    assert rows[(four, 8, "gandiva")]["energy_kwh"] == rows[(four, 8, "fifo_packed")]["energy_kwh"]
    # half-node pair: fifo_packed / gandiva run side by side like fifo; eaco shares the busy half (3 % slower)
    assert rows[(pair, 4, "fifo_packed")]["energy_kwh"] == rows[(pair, 4, "fifo")]["energy_kwh"]
    assert rows[(pair, 4, "eaco")]["avg_run_change"] == pytest.approx(0.03, abs=0.002)
    assert rows[(four, 4, "gandiva")]["energy_kwh"] < rows[(four, 4, "fifo_packed")]["energy_kwh"]
    assert rows[(pair, 8, "fifo")]["energy_saving"] == 0.0


def test_locality_anatomy_at_lf_3(tmp_path) -> None:
    """The A2 reading in docs/REPRODUCTIONS.md: every job of more than 4 GPUs spans nodes under every
    policy; packed placement puts three of the four largest ResNet-50 jobs on the 2.83x GPU, PM-First
    none; PAL keeps every 4-GPU job on one node where PM-First spans two."""
    from gpusched.studies.reproduction import locality_anatomy

    doc = locality_anatomy(tmp_path, 0, workloads=[4])
    rows = {r["policy"]: r for r in doc["rows"]}
    assert set(rows) == {"packed_sticky", "pm_first", "pal"} and all(r["lf"] == "lf-3.0" for r in rows.values())
    for r in rows.values():
        assert (r["n_1"], r["n_4"], r["n_>4"]) == (62, 10, 88)
        assert r["spans_>4"] == 88 and r["spans_1"] == 0
    assert rows["packed_sticky"]["largest_worst_factor"] == [2.83, 2.83, 1.15, 2.83]
    assert rows["pm_first"]["largest_worst_factor"] == [1.04] * 4
    assert (rows["pm_first"]["spans_4"], rows["pal"]["spans_4"]) == (2, 0)
    q = sum(rows["pm_first"][f"queue_h_{k}"] for k in ("1", "4", ">4"))
    assert q / sum(rows["pm_first"][f"jct_h_{k}"] for k in ("1", "4", ">4")) > 0.9
