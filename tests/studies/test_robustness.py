"""gpusched.studies.robustness: the degradation arithmetic on hand-made figures, variant parsing and its errors,
imports checked against the variant, and a tiny study end to end (run, reuse, re-print)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpusched.studies import robustness as rb
from gpusched_env.config_util import ConfigError


def _fig(avg: float, p99: float, fin: float = 10) -> dict[str, float]:
    return {"avg_jct_s": avg, "p99_jct_s": p99, "jobs_finished": fin}


def _doc() -> dict:
    """Base ``train`` and one variant ``v``; three models (so the median is one of them)."""
    def variant(name: str, heur: dict, agents: list) -> dict:
        return {"name": name, "overrides": [f"scenario={name}"], "doc": "", "scenario": name,
                "heuristics": heur, "agents": agents, "sources": {}}

    return {
        "tool": "gpusched.studies.robustness", "base": "train", "seeds": [0], "heuristics": ["las", "srtf"],
        "models": [{"scenario": "s", "clairvoyant": False}] * 3,
        "variants": [
            variant("train", {"las": _fig(100, 1000), "srtf": _fig(120, 800)},
                    [_fig(110, 900), _fig(130, 1200), _fig(105, 1000)]),
            variant("v", {"las": _fig(200, 1500), "srtf": _fig(180, 1600)},
                    [_fig(220, 1800), _fig(200, 2000), _fig(270, 1500, 9)]),
        ],
    }


def _close(cell: rb.Cell, value: float, vs_best: float, d_gap: float, vs_base: float) -> None:
    got = (cell.value, cell.vs_best, cell.d_gap, cell.vs_base)
    assert got == pytest.approx((value, vs_best, d_gap, vs_base), abs=1e-3), got


def test_degradation_arithmetic_by_hand():
    base, v = rb.tables(_doc())
    # base: best avg las 100, best p99 srtf 800; variant v: best avg srtf 180, best p99 las 1500
    assert base.best == {"avg_jct_s": "las", "p99_jct_s": "srtf"} and v.best == {"avg_jct_s": "srtf", "p99_jct_s": "las"}
    las, srtf = v.heuristics
    _close(las.cells["avg_jct_s"], 200, 11.111, 11.111, 100.0)  # 200/180-1; gap on base 0; 200/100-1
    _close(las.cells["p99_jct_s"], 1500, 0.0, -25.0, 50.0)  # base gap 1000/800-1 = 25 %
    _close(srtf.cells["avg_jct_s"], 180, 0.0, -20.0, 50.0)  # base gap 120/100-1 = 20 %
    _close(srtf.cells["p99_jct_s"], 1600, 6.667, 6.667, 100.0)
    a0, a1, a2 = v.agents
    _close(a0.cells["avg_jct_s"], 220, 22.222, 12.222, 100.0)  # base gap 110/100-1 = 10 %
    _close(a1.cells["avg_jct_s"], 200, 11.111, -18.889, 53.846)  # base gap 30 %; 200/130-1
    _close(a2.cells["avg_jct_s"], 270, 50.0, 45.0, 157.143)  # base gap 5 %; 270/105-1
    _close(a1.cells["p99_jct_s"], 2000, 33.333, -16.667, 66.667)  # base gap 1200/800-1 = 50 %
    _close(v.median.cells["avg_jct_s"], 220, 22.222, 12.222, 100.0)
    _close(v.median.cells["p99_jct_s"], 1800, 20.0, -16.667, 66.667)  # medians field by field
    lo, hi = v.spread["avg_jct_s"]
    _close(lo, 200, 11.111, -18.889, 53.846)
    _close(hi, 270, 50.0, 45.0, 157.143)
    assert v.median.finished == 10 and [r.finished for r in v.agents] == [10, 10, 9]
    for r in [*base.heuristics, *base.agents]:  # on the base every change is zero
        assert all(c.d_gap == 0 and c.vs_base == 0 for c in r.cells.values())


def test_report_prints_the_hand_computed_figures():
    text = rb.format_report(_doc())
    summary = text.split("summary")[1].splitlines()
    v_line = next(line for line in summary if line.startswith("v "))
    assert v_line.split() == ["v", "srtf", "+22.2%", "+12.2pp", "+100.0%", "+50.0..+100.0%", "las", "+20.0%",
                              "-16.7pp", "2", "of", "3"]
    assert "agents min..max" in text and "200..270" in text


def test_goal_report_against_named_heuristics_by_hand():
    lines = rb.goal_report(_doc(), "srtf", "las").splitlines()
    train = lines[2].split()
    # train: srtf avg 120, las p99 1000; agents' medians 110 (-8.3 %), 1000 (+0.0 %); within both: 110/900
    # and 105/1000 (130 is over 120)
    assert train == ["train", "120", "110", "-8.3%", "1k", "1k", "+0.0%", "2", "of", "3"]
    v = lines[3].split()
    # v: srtf avg 180, las p99 1500; medians 220 (+22.2 %), 1800 (+20.0 %); none under 180 on average
    assert v == ["v", "180", "220", "+22.2%", "1.5k", "1.8k", "+20.0%", "0", "of", "3"]
    with pytest.raises(ConfigError, match="--goal: 'pal' is not among the study's heuristics"):
        rb.goal_report(_doc(), "pal", "las")


def test_check_document_refuses_an_incomplete_study():
    doc = _doc()
    doc["variants"][1]["agents"][2] = None
    with pytest.raises(ConfigError, match="variant v is incomplete"):
        rb.check_document(doc, "x.json")


def test_check_document_reads_the_older_tool_names():
    """results.json written before the apps moved under gpusched (or before the studies package) still read."""
    for tool in ("studies.robustness", "agents.robustness", "gpusched.studies.robustness"):
        rb.check_document({**_doc(), "tool": tool}, "x.json")
    with pytest.raises(ConfigError, match="x.json: not a gpusched.studies.robustness results.json"):
        rb.check_document({**_doc(), "tool": "bench.robustness"}, "x.json")


def test_default_variants_parse_and_compose():
    for v in (*rb.DEFAULT_VARIANTS, *rb.PAL_VARIANTS):
        assert rb.parse_variant(v.spec).overrides == v.overrides
        assert v.doc
    cfg = rb.compose(rb.DEFAULT_VARIANTS[3], [])  # 16x8
    assert cfg.scenario.cluster.nodes[0].gpus_per_node == 8 and cfg.scenario.workload.max_gpus == 64
    assert rb.compose(rb.parse_variant("w: scenario=philly_window"), []).scenario.workload.limit == 1000
    pal = {v.name: v for v in rb.PAL_VARIANTS}
    cfg = rb.compose(pal["16x3"], [])
    assert cfg.scenario.cluster.nodes[0].gpus_per_node == 3 and list(cfg.workloads) == [4, 5, 6, 7]
    assert rb.compose(pal["bg_3"], []).scenario.workload.background_rate_per_hour == 3.0
    assert "workloads=[4,5,6,7]" not in pal["philly_window"].overrides  # one workload: all of it


def _meta_only(path: Path, scenario: str) -> str:
    """A file that ``describe_agent`` reads as a model trained on ``scenario`` (no policy inside)."""
    import zipfile

    from gpusched.agents.adapter import write_meta

    zipfile.ZipFile(path, "w").close()
    write_meta(path, {"scenario": scenario, "env_id": "gpusched/Cluster-v1", "env": {}})
    return str(path)


def test_default_variants_follow_the_training_scenario(tmp_path):
    from gpusched.agents.adapter import describe_agent

    pal, syn = (describe_agent(_meta_only(tmp_path / f"{s}.zip", s)) for s in ("pal_philly", "synthetic_philly"))
    assert rb.default_variants([pal, pal]) == list(rb.PAL_VARIANTS)
    assert rb.default_variants([syn]) == list(rb.DEFAULT_VARIANTS)
    with pytest.raises(ConfigError, match="models trained on \\['pal_philly', 'synthetic_philly'\\]"):
        rb.default_variants([pal, syn])
    with pytest.raises(ConfigError, match="no default variants for models trained on 'eaco_cluster'"):
        rb.default_variants([describe_agent(_meta_only(tmp_path / "e.zip", "eaco_cluster"))])


@pytest.mark.parametrize(("spec", "match"), [
    ("load 0.6 scenario=synthetic_philly", "variant 'load 0.6 scenario=synthetic_philly': expected 'NAME: OVERRIDE"),
    ("x:", "variant x: no overrides"),
    ("x: seeds=[0]", "variant x: 'seeds=\\[0\\]' is not a scenario override"),
    ("x: workloads", "variant x: 'workloads' is not a scenario override"),
    ("x: scenario=synthetic_small 'open", "variant x: cannot split"),
])
def test_bad_variant_is_a_named_error(spec, match):
    with pytest.raises(ConfigError, match=match):
        rb.parse_variant(spec)


def test_bad_override_fails_in_one_line_naming_the_variant(capsys):
    with pytest.raises(SystemExit) as e:
        rb.main(["m.zip", "--out", "x", "--variant", "base: scenario=synthetic_small",
                 "--variant", "bad: scenario=synthetic_small scenario.cluster.nope=1"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("robustness: error: variant bad:") and "nope" in err


def test_unknown_only_and_base_are_named(capsys, tmp_path):
    model = _meta_only(tmp_path / "m.zip", "synthetic_philly")
    for args, word in ((["--only", "load_9"], "--only: unknown variant(s) ['load_9']"),
                       (["--base", "nope"], "--base: no variant named 'nope'")):
        with pytest.raises(SystemExit):
            rb.main([model, "--out", "x", *args])
        assert word in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:  # the defaults need the models' training scenario
        rb.main([str(tmp_path / "absent.zip"), "--out", "x"])
    assert e.value.code == 2 and "absent.zip': no such file" in capsys.readouterr().err


# ------------------------------------------------------------------------------------ end to end
@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    """An untrained Cluster-v1 model for synthetic_small (2 nodes), saved as gpusched-train does."""
    import gymnasium as gym
    import torch
    from sb3_contrib import MaskablePPO

    import gpusched_env  # noqa: F401
    from gpusched.agents.adapter import write_meta
    from gpusched_env.scenario import load_scenario

    torch.set_num_threads(1)
    env = gym.make("gpusched/Cluster-v1", scenario=load_scenario("synthetic_small"), options=["packed"])
    u = env.unwrapped
    model = MaskablePPO("MlpPolicy", env, n_steps=64, batch_size=32, n_epochs=1, seed=0,
                        policy_kwargs={"net_arch": [16]}, device="cpu")
    path = tmp_path_factory.mktemp("robust_model") / "model.zip"
    model.save(str(path))
    write_meta(path, {"algo": "maskable_ppo", "scenario": "synthetic_small", "env_id": "gpusched/Cluster-v1",
                      "seed": 0, "num_timesteps": 0,
                      "env": {"queue_slots": u.k, "fifo_slots": u.fifo_slots, "running_slots": u.r,
                              "clairvoyant": u.clairvoyant, "migrations": u.migrations,
                              "options": list(u.option_set.names),
                              "max_actions_per_decision": u.max_actions_per_decision}})
    return path


VARIANTS = ["small: scenario=synthetic_small",
            "small_x8: scenario=synthetic_small scenario.cluster.nodes.0.gpus_per_node=8"]


def test_tiny_study_runs_reuses_and_reprints(tiny_model, tmp_path, monkeypatch, capsys):
    out = tmp_path / "study"
    argv = [str(tiny_model), "--out", str(out), "--heuristics", "las,fifo", "--seeds", "0",
            *(x for v in VARIANTS for x in ("--variant", v))]
    rb.main(argv)
    printed = capsys.readouterr().out
    doc = json.loads((out / "results.json").read_text())
    assert [v["name"] for v in doc["variants"]] == ["small", "small_x8"] and doc["base"] == "small"
    for v in doc["variants"]:  # the study holds exactly what each bench run wrote
        heur = json.loads((out / v["name"] / "heuristics" / "results.json").read_text())
        agent = json.loads((out / v["name"] / "agent_0" / "results.json").read_text())
        assert v["heuristics"]["las"]["avg_jct_s"] == heur["policies"]["las"]["metrics"]["avg_jct_s"]
        assert v["agents"][0]["p99_jct_s"] == agent["policies"]["agent"]["metrics"]["p99_jct_s"]
        assert v["agents"][0]["jobs_finished"] == 40 and agent["agent"]["seed"] == 0
    spec = json.loads((out / "small_x8" / "heuristics" / "run.json").read_text())
    assert spec["command"].startswith("gpusched-bench scenario=synthetic_small scenario.cluster.nodes.0.gpus_per_node=8 ")
    x8 = doc["variants"][1]["heuristics"]["las"]["avg_jct_s"]
    assert x8 != doc["variants"][0]["heuristics"]["las"]["avg_jct_s"]  # the override reached the run

    import gpusched.bench.cli

    def no_run(*a, **k):
        raise AssertionError("a matching run was run again")

    monkeypatch.setattr(gpusched.bench.cli, "run_bench", no_run)
    assert rb.format_report(doc) in printed
    rb.main(argv)  # every run reused
    assert "0 bench run(s) to do (4 reused or imported)" in capsys.readouterr().out
    rb.main(["--report", str(out / "results.json")])
    assert capsys.readouterr().out.strip() == rb.format_report(doc)


def test_interrupted_study_says_how_to_go_on(tiny_model, tmp_path, monkeypatch, capsys):
    import gpusched.bench.cli

    def stop(*a, **k):
        raise gpusched.bench.cli.BenchInterrupted("interrupted")

    monkeypatch.setattr(gpusched.bench.cli, "run_bench", stop)
    with pytest.raises(SystemExit) as e:
        rb.main([str(tiny_model), "--out", str(tmp_path / "s"), "--heuristics", "las", "--seeds", "0",
                 "--variant", VARIANTS[0]])
    assert e.value.code == 130
    assert capsys.readouterr().err == ("robustness: interrupted; finished runs stay in --out and the same "
                                       "command goes on from them\n")


def test_import_is_checked_against_the_variant(tiny_model, tmp_path):
    res = tmp_path / "r" / "results.json"
    (res.parent / ".hydra").mkdir(parents=True)
    res.write_text(json.dumps({"scenario": "synthetic_small", "seeds": [0], "policies": {"las": {"metrics": {}}}}))
    (res.parent / ".hydra" / "overrides.yaml").write_text("- scenario=synthetic_small\n- scenario.workload.load=0.5\n")
    v = rb.parse_variant("small: scenario=synthetic_small")
    with pytest.raises(ConfigError, match="ran with scenario overrides"):
        rb.check_import(v, str(res), [0], [])
    (res.parent / ".hydra" / "overrides.yaml").write_text("- scenario=synthetic_small\n- seeds=[0,1]\n")
    assert rb.check_import(v, str(res), [0], [])[1] is None  # heuristics; bench keys are not the scenario's
    with pytest.raises(ConfigError, match="seeds \\[0\\], this study uses \\[1\\]"):
        rb.check_import(v, str(res), [1], [])
    (res.parent / ".hydra" / "overrides.yaml").write_text("- scenario=synthetic_small\n- workloads=[0]\n")
    with pytest.raises(ConfigError, match="ran with scenario overrides \\['scenario=synthetic_small', 'workloads=\\[0\\]'\\]"):
        rb.check_import(v, str(res), [0], [])  # the workloads run are part of the variant
    assert rb.check_import(rb.parse_variant("small: scenario=synthetic_small workloads=[0]"), str(res), [0], [])[1] is None


# ------------------------------------------------------------------ the philly_window scenario (real data)
def _window_scenario(**workload):
    import yaml

    from gpusched_env.data import DataMissing, data_path
    from gpusched_env.scenario import CONF_DIR, load_scenario

    try:
        data_path("traces/philly/philly.csv")
    except DataMissing:
        pytest.skip("data file traces/philly/philly.csv absent")
    cfg = yaml.safe_load((CONF_DIR / "scenario" / "philly_window.yaml").read_text())
    cfg["workload"].update(workload)
    return load_scenario(cfg)


def test_philly_window_is_the_documented_window():
    from collections import Counter

    from gpusched_env.catalog import model_spec
    from gpusched_env.scenario import build_workloads

    scn = _window_scenario()
    topo = scn.cluster.topology()
    assert (topo.n_nodes, topo.n_gpus) == (16, 64)  # synthetic_philly's shape: its agents run here
    (_, jobs), = build_workloads(scn, 0, topo)
    assert len(jobs) == 1000 and Counter(j.num_gpus for j in jobs) == {1: 960, 2: 7, 4: 19, 8: 14}
    span = max(j.arrival_s for j in jobs)
    assert span == (2 * 86400 + 12 * 3600 + 27 * 60 + 7)  # 2017-10-16 00:35:05 .. 10-18 13:02:12
    work = sum(j.num_gpus * j.work_iters * model_spec(j.model).base_iter_s for j in jobs)
    assert work / span / 64 == pytest.approx(0.708, abs=0.001)  # the offered load the file states


def test_a_job_wider_than_the_cluster_is_an_error_not_dropped():
    from gpusched_env.scenario import build_workloads

    # virtual cluster ee9e8c holds the trace's three 128-GPU jobs, the first submitted 2017-12-12 01:58:01
    scn = _window_scenario(virtual_cluster="ee9e8c", start="2017-12-12 01:00:00", limit=50)
    with pytest.raises(ConfigError, match="philly.csv: job 6: needs 128 GPU\\(s\\) .* the cluster has 64"):
        build_workloads(scn, 0)
