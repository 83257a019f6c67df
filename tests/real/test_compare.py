"""``compare`` (issue 11, items 2-3): the simulator uses the profile's measured iteration times as
they are on any GPU type, and no errors are computed when the two runs finished different jobs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from realtest_helpers import CLASS, TINY, Fifo

from gpusched.real.compare import CompareError, compare, simulate
from gpusched.real.config import RealWorkload
from gpusched.real.profile import ProfileResult
from gpusched_env.run_rules import assemble_result
from gpusched_env.topology import NodeGroup, Topology
from gpusched_env.types import Job, JobRecord


def _workload(groups: list[NodeGroup], n_jobs: int, iters: float = 100.0) -> RealWorkload:
    topo = Topology.build(groups)
    jobs = [Job(i, 0.0, 1, iters, "pointnet", CLASS["pointnet"], mem_gb=0.5) for i in range(n_jobs)]
    return RealWorkload("cmp", topo, jobs, dict(TINY), max_jobs_per_gpu=1)


def _profile(factors: list[float], tmp_path: Path, base: float = 0.02, startup: float = 0.5) -> ProfileResult:
    return ProfileResult(np.array([[f] * 4 for f in factors]), {"pointnet": base}, startup, tmp_path)


def test_h100_profile_times_are_used_as_measured(tmp_path: Path) -> None:
    """100 iterations measured at 20 ms on the H100 itself take 2 s (+0.5 s start-up) in the simulator."""
    wl = _workload([NodeGroup(1, 1, "H100", 80.0)], 1)
    res = simulate(wl, _profile([1.0], tmp_path), Fifo(), 0, startup=True)
    assert res.records[0].finish_s == pytest.approx(2.5)
    raw = simulate(wl, _profile([1.0], tmp_path), Fifo(), 0, startup=False)
    assert raw.records[0].finish_s == pytest.approx(2.0)


def test_mixed_gpu_types_use_each_devices_measured_time(tmp_path: Path) -> None:
    """V100 + H100, the H100 measured twice as fast: 2 s on the V100, 1 s on the H100."""
    wl = _workload([NodeGroup(1, 1, "V100", 16.0), NodeGroup(1, 1, "H100", 80.0)], 2)
    res = simulate(wl, _profile([1.0, 0.5], tmp_path), Fifo(), 0, startup=False)
    assert [r.finish_s for r in res.records] == pytest.approx([2.0, 1.0])


def test_compare_refuses_runs_that_finished_different_jobs(tmp_path: Path) -> None:
    wl = _workload([NodeGroup(1, 1, "V100", 16.0)], 2)
    recs = [JobRecord(j) for j in wl.jobs]
    recs[0].first_start_s, recs[0].finish_s = 0.0, 2.0
    real = assemble_result(recs, 1, 10.0, 0.0, 2.0, 0.0)
    with pytest.raises(CompareError, match=r"real run left tracked jobs \[1\] unfinished, the simulated run \[\]"):
        compare(wl, _profile([1.0], tmp_path), Fifo, real, 0, energy=False)
    recs[1].first_start_s, recs[1].finish_s = 2.0, 4.0
    doc = compare(wl, _profile([1.0], tmp_path, startup=0.0), Fifo, assemble_result(recs, 1, 4.0, 0.0, 4.0, 0.0), 0,
                  energy=False)
    assert doc["error"] == {"avg_jct_s": pytest.approx(0.0), "makespan_s": pytest.approx(0.0)}


def test_energy_is_compared_only_on_the_scenarios_gpu_types() -> None:
    """The simulator's power model is the scenario's GPU type's: an H200 run of a V100 scenario (seen: +365 %
    "error") is not compared; names match with spaces, dashes and a memory suffix ignored."""
    from gpusched.real.compare import energy_mismatch

    v100 = Topology.build([NodeGroup(1, 1, "V100M16", 16.0)])
    assert energy_mismatch(["Tesla V100-SXM2-16GB"], v100) is None
    assert energy_mismatch(["NVIDIA H200"], v100) == "GPU 0 is a NVIDIA H200, the scenario's power model a V100M16"
    mixed = Topology.build([NodeGroup(1, 1, "H100", 80.0), NodeGroup(1, 1, "RTX6000", 24.0)])
    assert energy_mismatch(["NVIDIA H100 80GB HBM3", "Quadro RTX 6000"], mixed) is None
    assert energy_mismatch(["NVIDIA H100 80GB HBM3"], mixed) == "1 devices, the scenario has 2 GPUs"
