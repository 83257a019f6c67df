"""gpusched-bench on device and pipeline scenarios: progress, Ctrl-C keeps the finished runs, the
agent's model is recorded, and the printed tables say what their numbers are."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from rich.console import Console

from gpusched.bench import level_runner
from gpusched.bench.level_runner import BenchInterrupted, load_level_scenario, run_level_bench
from gpusched.bench.report import mark_subsets, paper_table, results_table
from gpusched_env.scenario import CONF_DIR


def _raw(name: str, **over: Any) -> dict[str, Any]:
    return {**yaml.safe_load((CONF_DIR / "scenario" / f"{name}.yaml").read_text()), **over}


def _text(renderable: Any) -> str:
    con = Console(file=io.StringIO(), width=400)
    con.print(renderable)
    return con.file.getvalue()  # type: ignore[attr-defined]


def test_progress_bar_and_plot_time_are_printed(tmp_path):
    buf = io.StringIO()
    run_level_bench(_raw("tally_pairs", duration_s=0.2), ["exclusive", "tally"], [0], [0, 1], 1, tmp_path, True,
                    None, Console(file=buf, width=200))
    out = buf.getvalue()
    assert "4/4" in out  # the bar counts the runs
    last = out.strip().splitlines()[-1]
    assert last.startswith(f"wrote {tmp_path}/results.json, results.csv, tally_pairs_latency_cdf.png")
    assert " s wall, plots " in last


def test_ctrl_c_keeps_finished_runs(tmp_path, monkeypatch):
    """Interrupted after 3 of 8 runs: results.json holds those 3, marked partial."""
    real = level_runner._run_one
    calls = []

    def one(*args: Any) -> Any:
        calls.append(1)
        if len(calls) == 4:
            raise KeyboardInterrupt
        return real(*args)

    monkeypatch.setattr(level_runner, "_run_one", one)
    with pytest.raises(BenchInterrupted) as e:
        run_level_bench(_raw("daris_rt", duration_s=0.05), ["daris", "mps"], [0, 1], [0, 1], 1, tmp_path, True,
                        None, Console(file=io.StringIO()))
    doc = json.loads((tmp_path / "results.json").read_text())
    assert (doc["partial"], doc["runs_finished"], doc["runs_planned"]) == (True, 3, 8)
    assert str(e.value) == (f"interrupted: wrote the 3 of 8 runs that finished to {tmp_path / 'results.json'} "
                            "(marked \"partial\": true)")
    daris = doc["policies"]["daris"]
    assert [s["seed"] for s in daris["per_seed"]] == [0, 1] and "mps" not in doc["policies"]
    assert [w["workload"] for w in daris["per_workload"]] == _raw("daris_rt")["tasksets"][:2]
    assert (tmp_path / "results.csv").is_file() and not list(tmp_path.glob("*.png"))  # no plots of a partial run


@pytest.mark.slow  # torch and sb3 imports: ~10 s on a busy machine
def test_agent_model_is_recorded(tmp_path):
    import torch
    from sb3_contrib import MaskablePPO

    from gpusched.agents.adapter import write_meta
    from gpusched_env.envs.gpushare import GPUShareEnv

    raw = _raw("tally_pairs", duration_s=0.2)
    _, scn = load_level_scenario(raw)
    torch.set_num_threads(1)
    model = MaskablePPO("MlpPolicy", GPUShareEnv(scn), n_steps=16, batch_size=16, seed=0, device="cpu",
                        policy_kwargs={"net_arch": [8]})
    path = tmp_path / "model.zip"
    model.save(str(path))
    write_meta(path, {"algo": "maskable_ppo", "env_id": "gpusched/GPUShare-v0", "scenario": "tally_pairs",
                      "env": {"mechanism": "mps_priority"}, "seed": 7, "num_timesteps": 16})
    buf = io.StringIO()
    doc = run_level_bench(raw, ["agent"], [0], [0], 1, tmp_path / "out", False, None, Console(file=buf, width=300),
                          str(path))
    assert doc["agent"] == {"path": str(path), "env_id": "gpusched/GPUShare-v0", "algo": "maskable_ppo",
                            "scenario": "tally_pairs", "seed": 7, "num_timesteps": 16}
    assert json.loads((tmp_path / "out" / "results.json").read_text())["agent"] == doc["agent"]
    assert (f"agent: {path} (gpusched/GPUShare-v0, maskable_ppo, trained on tally_pairs, seed 7, 16 steps)"
            in buf.getvalue())


def _doc(policies: dict[str, dict[str, float]], seeds: int = 1, workloads: int = 1) -> dict[str, Any]:
    block = {}
    for p, m in policies.items():
        block[p] = {"metrics": m, "per_seed": [{"seed": s, "metrics": m} for s in range(seeds)]}
        if workloads > 1:
            block[p]["per_workload"] = [{"workload": f"w{i}", "metrics": m} for i in range(workloads)]
    return {"scenario": "x", "seeds": list(range(seeds)), "policies": block}


def test_rates_change_in_percentage_points():
    doc = _doc({"a": {"hp_deadline_miss_rate": 0.0001, "throughput_jobs_s": 10.0},
                "b": {"hp_deadline_miss_rate": 0.0451, "throughput_jobs_s": 12.5}})
    row = _text(results_table(doc, ["hp_deadline_miss_rate", "throughput_jobs_s"]))
    assert "0.045 (+4.5 pp)" in row and "12.50 (+25.0%)" in row and "%)" not in row.split("12.50")[0]


def test_counts_over_several_runs_say_mean_per_run():
    one = _text(results_table(_doc({"a": {"restarts": 1.0}}), ["restarts"]))
    five = _text(results_table(_doc({"a": {"restarts": 0.2}}, workloads=5), ["restarts"]))
    assert "restarts (mean/run)" in five and "0.200" in five
    assert "restarts" in one and "(mean/run)" not in one


def test_claim_about_all_workloads_run_on_a_subset_is_labelled():
    claim = {"claim": "PAL vs packed, geomean 8 workloads", "value": 0.43, "sim_value": 0.1, "metric": "avg_jct_s",
             "policy": "pal", "baseline": "packed", "kind": "improvement", "aggregate": "geomean", "workloads": [],
             "bound": "", "meets_bound": None, "source": "s"}
    named = {**claim, "claim": "on w0", "workloads": ["w0"]}
    doc = _doc({"pal": {"avg_jct_s": 1.0}, "packed": {"avg_jct_s": 1.1}}, workloads=2)
    rows = mark_subsets([claim, named], doc["policies"], 8)
    assert rows[0]["sim_workloads"] == "2 of 8" and "sim_workloads" not in rows[1]
    assert mark_subsets([claim], doc["policies"], 2) == [claim]  # every workload ran: unchanged
    text = _text(paper_table({"paper": {"claims": rows}}))
    assert "PAL vs packed, geomean 8 workloads (sim: geomean of 2 of 8 workloads)" in text and "n/a (subset)" in text


def test_pipeline_metric_names_say_micro_batches():
    from gpusched_env.pipeline import bench

    _, scn = load_level_scenario(_raw("adaptra_14b"))
    m = bench.run(scn, "1f1b", 0, 0).metrics  # type: ignore[arg-type]
    assert m["peak_activations_microbatches"] == 8.0 and "peak_activations_mb" not in m


@pytest.mark.slow  # a real bench in worker processes, interrupted mid-way (~15 s)
def test_sigint_stops_workers_and_writes_finished_runs(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    import psutil

    root = Path(__file__).resolve().parent.parent
    out = tmp_path / "o"
    seeds = ",".join(str(s) for s in range(100))
    p = subprocess.Popen([sys.executable, "-m", "gpusched.bench.cli", "scenario=daris_rt", "scenario.duration_s=0.5",
                          "policies=[daris]", f"seeds=[{seeds}]", "workers=2", "plots=false", f"out_dir={out}"],
                         env={**os.environ, "PYTHONPATH": str(root), "COLUMNS": "200"}, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while len(psutil.Process(p.pid).children()) < 2:
            assert p.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        time.sleep(3.0)
        kids = psutil.Process(p.pid).children(recursive=True)
        os.killpg(p.pid, signal.SIGINT)
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    lines = [x for x in err.splitlines() if x.strip()]
    assert p.returncode == 130 and len(lines) == 1 and "Traceback" not in err, err
    doc = json.loads((out / "results.json").read_text())
    planned = 100 * len(_raw("daris_rt")["tasksets"])
    assert doc["partial"] is True and doc["runs_planned"] == planned and 0 < doc["runs_finished"] < planned
    assert lines[0] == (f"gpusched-bench: interrupted: wrote the {doc['runs_finished']} of {planned} runs that "
                        f"finished to {out / 'results.json'} (marked \"partial\": true)")
    assert not [k for k in kids if k.is_running() and k.status() != psutil.STATUS_ZOMBIE], "workers left behind"
