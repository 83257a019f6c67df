"""gpusched-bench end to end (a subprocess, as a user runs it) and the bench library's guarantees."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpusched.bench.runner import run_tasks, tasks_for
from gpusched_env import data as data_mod
from gpusched_env.scenario import build_workloads, load_scenario

ROOT = Path(__file__).resolve().parent.parent


def test_bench_cli_writes_results(tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "gpusched.bench.cli", "scenario=synthetic_small", "policies=[fifo,las,gandiva]",
           "seeds=[0,1]", f"out_dir={out}", "workers=2", "check_invariants=true",
           "table_metrics=[avg_jct_s,avg_jct_all_s,jobs_finished]"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "COLUMNS": "200", "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads((out / "results.json").read_text())
    assert doc["scenario"] == "synthetic_small" and doc["seeds"] == [0, 1]
    assert list(doc["policies"]) == ["fifo", "las", "gandiva"]
    fifo = doc["policies"]["fifo"]
    for key in ("avg_jct_s", "p99_jct_s", "makespan_s", "utilization", "energy_kwh"):
        assert key in fifo["metrics"]
    assert [s["seed"] for s in fifo["per_seed"]] == [0, 1]
    mean = (fifo["per_seed"][0]["metrics"]["avg_jct_s"] + fifo["per_seed"][1]["metrics"]["avg_jct_s"]) / 2
    assert fifo["metrics"]["avg_jct_s"] == pytest.approx(mean)
    assert 0.0 <= fifo["metrics"]["utilization"] <= 1.0
    assert fifo["metrics"]["jobs_finished"] == 40
    assert (out / "results.csv").read_text().startswith("policy,seed,workload,")
    assert (out / "jct_cdf.png").stat().st_size > 1000 and (out / "cluster_timeline.png").exists()
    assert (out / ".hydra" / "config.yaml").exists()
    assert "avg_jct_s" in proc.stdout and "gandiva" in proc.stdout
    assert "avg_jct_all_s" in proc.stdout and "p99_jct_s" not in proc.stdout  # the chosen columns
    assert fifo["metrics"]["avg_jct_all_s"] == fifo["metrics"]["avg_jct_s"]  # every job finished


def test_unknown_table_metric_is_a_named_error():
    from gpusched.bench.report import print_report

    doc = {"scenario": "toy", "seeds": [0],
           "policies": {"fifo": {"metrics": {"avg_jct_s": 1.0}, "per_seed": [{"metrics": {"avg_jct_s": 1.0}}]}}}
    with pytest.raises(ValueError, match=r"table_metrics: unknown metric\(s\) \['avg_jtc_s'\]"):
        print_report(doc, metrics=["avg_jtc_s"])


def test_parallel_equals_serial():
    scn = load_scenario("synthetic_small")
    tasks = tasks_for(scn, ["fifo", "tiresias"], [0, 1])
    serial = [r.metrics for r in run_tasks(scn, tasks, workers=1, keep_series=False)]
    parallel = [r.metrics for r in run_tasks(scn, tasks, workers=2, keep_series=False)]
    assert serial == parallel


def test_same_seed_same_workload_other_seed_differs():
    scn = load_scenario("synthetic_small")
    a, b, c = (build_workloads(scn, s)[0][1] for s in (0, 0, 1))
    assert a == b and a != c


def test_missing_data_names_file_and_remedy(monkeypatch, tmp_path):
    monkeypatch.setattr(data_mod, "search_dirs", lambda: [tmp_path / "nowhere"])
    scn = load_scenario("pal_philly")
    with pytest.raises(data_mod.DataMissing) as e:
        build_workloads(scn, 0)
    msg = str(e.value)
    assert "workload-1.csv" in msg and "nowhere" in msg and "gpusched-data download" in msg


def test_workload_subset():
    from gpusched.bench.runner import aggregate

    scn = load_scenario("pal_philly")
    tasks = tasks_for(scn, ["fifo"], [0], [6, 7])
    assert [t.workload for t in tasks] == [6, 7]
    with pytest.raises(ValueError, match="out of range"):
        tasks_for(scn, ["fifo"], [0], [8])
    from gpusched.bench.runner import TaskResult

    fake = [TaskResult(t, scn.workload_names[t.workload], {"avg_jct_s": float(t.workload)}) for t in tasks]
    block = aggregate(scn, fake, [0])
    assert [w["workload"] for w in block["fifo"]["per_workload"]] == ["workload-7", "workload-8"]
    assert block["fifo"]["metrics"]["avg_jct_s"] == 6.5


def test_same_results_names_each_difference():
    from gpusched.bench.same_results import differences

    a = {"fifo": {"metrics": {"avg_jct_s": 1.0, "wall_s": 3.0}, "per_seed": [{"seed": 0, "metrics": {"x": 1}}]}}
    b = {"fifo": {"metrics": {"avg_jct_s": 1.5, "wall_s": 9.0}, "per_seed": [{"seed": 0, "metrics": {"x": 2}}]}}
    assert differences(a, a) == []
    assert differences(a, b) == ["fifo.metrics.avg_jct_s: 1.0 != 1.5", "fifo.per_seed[0].metrics.x: 1 != 2"]


def test_bench_runs_a_pipeline_scenario(tmp_path):
    """A ``level: pipeline`` scenario goes through the same app: results.json with the contract's
    metrics per policy and workload, and the paper claims."""
    import json

    import yaml
    from rich.console import Console

    from gpusched.bench.level_runner import run_level_bench
    from gpusched_env.scenario import CONF_DIR

    raw = yaml.safe_load((CONF_DIR / "scenario" / "adaptra_14b.yaml").read_text())
    doc = run_level_bench(raw, ["1f1b", "adaptra"], [0], [0, 2], 1, tmp_path, False, None, Console(quiet=True))
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["level"] == "pipeline" and saved["policies"].keys() == {"1f1b", "adaptra"}
    wl = [w["workload"] for w in saved["policies"]["adaptra"]["per_workload"]]
    assert wl == ["delay-10ms", "delay-60ms"]
    m = doc["policies"]["adaptra"]["metrics"]
    assert m["iteration_time_ms"] < doc["policies"]["1f1b"]["metrics"]["iteration_time_ms"]
    assert m["throughput_samples_s"] > 0


def test_unknown_level_is_a_named_error():
    from gpusched.bench.level_runner import level_of
    from gpusched_env.config_util import ConfigError

    with pytest.raises(ConfigError, match="scenario.level: 'gpu' is not one of cluster, device, pipeline"):
        level_of({"level": "gpu"})


def test_timeline_plot_one_panel_row_per_policy_over_the_busy_window(tmp_path):
    """Six policies: six rows of small panels on shared axes; the x axis spans where GPUs are busy
    (a run whose work sits between 100 h and 110 h, then idles for days, is not a sliver)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from gpusched.bench.report import busy_window, plot, timeline_figure

    h = 3600.0
    series = {}
    for i, name in enumerate(["fifo", "sjf", "las", "tiresias", "gandiva", "pal"]):
        t = [0.0, 100 * h + i * 60, 105 * h, 110 * h - i * 60, 400 * h]
        series[name] = (t, [0, 4, 8, 0, 0], [500.0, 900.0, 1500.0, 500.0, 500.0])
    assert busy_window(series) == (100 * h, 110 * h)
    fig = timeline_figure(plt, series, 8)
    axes = fig.axes
    assert len(axes) == 12 and [a.get_ylabel() for a in axes[::2]] == list(series)
    assert len({a.get_xlim() for a in axes}) == 1  # one time axis for all
    assert len({a.get_ylim() for a in axes[::2]}) == 1 and len({a.get_ylim() for a in axes[1::2]}) == 1
    lo, hi = axes[0].get_xlim()
    assert 99.5 <= lo < 100 and 110 < hi <= 110.5  # hours, the busy window and a small margin
    assert axes[-1].get_xlabel() == "time (h)"
    plt.close(fig)
    (path_cdf, path_tl) = plot(tmp_path, {"fifo": [1.0, 2.0]}, series, 8)
    assert path_tl.stat().st_size > 10_000


def test_paper_claim_kinds_aggregates_workloads_and_bounds():
    """Hand-computed: two workloads; ratios 0.5 and 0.8 of policy p to baseline b."""
    from gpusched_env.paper import PaperClaim

    def entry(a, b):
        return {"metrics": {}, "per_workload": [{"workload": "w1", "metrics": {"x": a}}, {"workload": "w2", "metrics": {"x": b}}]}

    block = {"p": entry(50.0, 80.0), "b": entry(100.0, 100.0)}
    def claim(**kw):
        return PaperClaim("c", 0.1, **{"metric": "x", "policy": "p", "baseline": "b", **kw})

    assert claim(kind="improvement").sim_value(block) == pytest.approx(1 - (0.5 * 0.8) ** 0.5)
    assert claim(kind="change", aggregate="mean").sim_value(block) == pytest.approx(0.65 - 1)
    assert claim(kind="improvement", aggregate="min").sim_value(block) == pytest.approx(0.5)  # 1 - min ratio
    assert claim(kind="change", workloads=["w2"]).sim_value(block) == pytest.approx(-0.2)
    assert PaperClaim("c", 60.0, metric="x", policy="p", kind="value", aggregate="max").sim_value(block) == 80.0
    assert claim(workloads=["nope"]).sim_value(block) is None and claim(baseline="zz").sim_value(block) is None
    upper = PaperClaim("c", 0.02, metric="x", policy="p", kind="value", bound="upper")
    assert upper.meets(0.005) is True and upper.meets(0.03) is False and claim().meets(0.5) is None
    with pytest.raises(ValueError, match="aggregate must be one of geomean, mean, min, max"):
        claim(aggregate="median")
    with pytest.raises(ValueError, match="kind change needs a baseline"):
        PaperClaim("c", 0.1, policy="p", kind="change")
