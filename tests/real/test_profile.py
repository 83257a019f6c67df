"""`profile` output loads in the simulator: profile.csv as a variability profile, models.json as
catalogue overrides; the calibrated simulator then runs the same workload."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
from realtest_helpers import TINY, FakeWorkers, Fifo, tiny_workload

from gpusched.real.compare import errors, simulate
from gpusched.real.config import DevicesConf, build_devices
from gpusched.real.launcher import LocalNodeAgent
from gpusched.real.profile import ProfileConf, load_profile_dir, run_profile
from gpusched_env.cluster.model import SimModel
from gpusched_env.cluster.simulator import Simulator
from gpusched_env.cluster.variability import VariabilityConfig, load_profile, sample_factors
from gpusched_env.metrics import compute_metrics


def test_profile_writes_what_the_simulator_loads(run_dir: Path) -> None:
    """Torch-free job processes (their step times are measured as the worker measures its own: test_worker.py)."""
    wl = tiny_workload([(0.0, "pointnet", 100), (0.0, "pointnet", 50), (1.0, "pointnet", 100)])
    devices, _ = build_devices(DevicesConf(kind="cpu", count=2), "auto", None)
    runner = FakeWorkers()
    sizes = {"pointnet": TINY["pointnet"]}  # one model (class D): the other classes take the device's mean
    cfg = ProfileConf(repeats=1, warmup_iters=3, iters=15)
    prof = run_profile(sizes, wl.topology, devices, LocalNodeAgent(runner, run_dir), run_dir, cfg, seed=0)

    with open(run_dir / "profile.csv") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["gpu", "node", "A", "B", "C", "D"] and len(rows) == 3
    f = load_profile(run_dir / "profile.csv")
    assert f.shape == (2, 4) and np.all(f > 0)
    np.testing.assert_allclose(f, prof.factors, rtol=1e-5)
    np.testing.assert_allclose(np.median(f, axis=0), 1.0, rtol=1e-5)  # normalised to the median device
    np.testing.assert_allclose(f[:, :3], f[:, [3, 3, 3]])
    np.testing.assert_allclose(sample_factors(2, VariabilityConfig(profile_path=str(run_dir / "profile.csv")),
                                              np.random.default_rng(0)), f)
    base = json.loads((run_dir / "models.json").read_text())
    assert set(base) == {"pointnet"} and base["pointnet"] > 0
    with open(run_dir / "profile_runs.csv") as fh:
        runs = list(csv.DictReader(fh))
    assert [(r["device"], r["model"], r["perf_class"]) for r in runs] == [("0", "pointnet", "D"), ("1", "pointnet", "D")]

    back = load_profile_dir(run_dir)
    assert back.base_iter_s == prof.base_iter_s and back.startup_s > 0
    res = simulate(wl, back, Fifo(), seed=0)
    m = compute_metrics(res)
    assert m["jobs_finished"] == 3
    # the calibrated simulator's job time: start-up + iterations x profiled time on its device
    r0 = res.records[0]
    expect = back.startup_s + 100 * base["pointnet"] * f[0, 3]
    assert abs(r0.jct_s - expect) < 1e-6 * expect
    assert errors(m, m)["avg_jct_s"] == 0.0
    Simulator(wl.topology, wl.jobs, SimModel(), 0, slowdown_profile=f, models={})  # plain catalogue also loads
