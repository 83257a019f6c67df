"""Checkpoint selection (gpusched/agents/selection.py): the rule by hand, scores = the bench's figures, and a
tiny training whose model.zip is the selected candidate, replayed to the same score."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import gpusched_env  # noqa: F401
from gpusched.agents.selection import Rule, Score, heuristic_results, play, score_runs
from gpusched_env.config_util import ConfigError
from gpusched_env.metrics import compute_metrics
from gpusched_env.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[2]
SCN = "synthetic_small"


def _s(steps: int, avg: float, p99: float, finished: int = 10, jobs: int = 10, run: float = 0.0,
       kwh: float = 0.0) -> Score:
    return Score(steps=steps, avg_jct_s=avg, p99_jct_s=p99, avg_run_s=run, energy_kwh=kwh, finished=finished, jobs=jobs)


def test_rule_lowest_average_among_those_within_the_p99_bound():
    cands = [_s(0, 90.0, 480.0), _s(1, 60.0, 520.0), _s(2, 70.0, 500.0), _s(3, 50.0, 400.0, finished=9)]
    rule = Rule({"p99_jct_s": 500.0})
    assert [rule.eligible(c) for c in cands] == [True, False, True, False]
    assert rule.best(cands).steps == 2  # 60 s breaks the p99 bound, 50 s left a job unfinished
    assert Rule({"p99_jct_s": 525.0}).best(cands).steps == 1
    assert rule.best([_s(0, 70.0, 500.0), _s(1, 70.0, 490.0)]).steps == 0  # ties: the earliest


def test_rule_with_two_bounds_and_the_p99_objective():
    cands = [_s(0, 90.0, 480.0), _s(1, 60.0, 450.0), _s(2, 120.0, 300.0), _s(3, 95.0, 470.0)]
    rule = Rule({"avg_jct_s": 100.0, "p99_jct_s": 500.0}, objective="p99_jct_s")
    assert [rule.eligible(c) for c in cands] == [True, True, False, True]
    assert rule.best(cands).steps == 1  # the lowest p99 of the three whose average is within 100 s


def test_rule_least_energy_within_a_runtime_bound():
    # EaCO's goal: less energy at no more runtime than the bounding heuristic's
    cands = [_s(0, 90.0, 400.0, run=105.0, kwh=34.0), _s(1, 80.0, 300.0, run=100.0, kwh=36.0),
             _s(2, 85.0, 350.0, run=104.0, kwh=35.0), _s(3, 70.0, 300.0, run=99.0, kwh=33.0, finished=9)]
    rule = Rule({"avg_run_s": 104.5}, objective="energy_kwh")
    assert [rule.eligible(c) for c in cands] == [False, True, True, False]
    assert rule.best(cands).steps == 2  # 34 kWh runs 0.5 s too long, 33 kWh left a job unfinished
    assert Rule({"avg_run_s": 105.0}, "energy_kwh").best(cands).steps == 0


def test_rule_without_an_eligible_candidate_prefers_finishing_then_the_smallest_excess():
    rule = Rule({"avg_jct_s": 40.0, "p99_jct_s": 100.0})
    cands = [_s(0, 50.0, 300.0), _s(1, 40.0, 200.0, finished=8), _s(2, 120.0, 250.0), _s(3, 41.0, 260.0)]
    # worst ratios: 3.0, (unfinished), 3.0, 2.6
    assert rule.best(cands).steps == 3
    assert Rule({}).best(cands).steps == 3  # no bounds: the lowest average of the finished (41 s)
    assert Rule({}, "p99_jct_s").best(cands).steps == 2  # ... or the lowest p99 (250 s)
    with pytest.raises(ValueError, match="no candidates"):
        rule.best([])
    with pytest.raises(ValueError, match="unknown metric 'makespan_s'"):
        Rule({"makespan_s": 1.0})


def test_worst_ratio_objective_keeps_the_widest_margin_on_the_tightest_bound():
    rule = Rule({"avg_jct_s": 100.0, "p99_jct_s": 500.0}, objective="worst_ratio")
    cands = [_s(0, 50.0, 495.0), _s(1, 60.0, 450.0), _s(2, 95.0, 400.0), _s(3, 40.0, 300.0, finished=9)]
    # worst ratios: max(.5, .99) = .99, max(.6, .9) = .9, max(.95, .8) = .95; 3 left a job unfinished
    assert [rule.objective_of(c) for c in cands[:3]] == pytest.approx([0.99, 0.9, 0.95])
    assert rule.best(cands).steps == 1
    assert Rule(rule.bounds).best(cands).steps == 0  # the lowest average (50 s) sits at 99 % of the p99 bound
    with pytest.raises(ValueError, match="objective worst_ratio needs at least one bound"):
        Rule({}, "worst_ratio")
    with pytest.raises(ValueError, match="unknown objective 'makespan_s'"):
        Rule({}, "makespan_s")


def test_an_episode_cut_at_max_steps_is_counted_and_marked():
    from gpusched.agents.selection import format_history

    scn = load_scenario(SCN)

    def first_valid(obs: np.ndarray, mask: np.ndarray) -> int:
        return int(np.flatnonzero(mask)[0])

    full = score_runs(0, play(gym.make("gpusched/Cluster-v1", scenario=scn, options=["packed"]), first_valid,
                              [(0, 5), (0, 6)]))
    cut = score_runs(1, play(gym.make("gpusched/Cluster-v1", scenario=scn, options=["packed"], max_steps=5),
                             first_valid, [(0, 5), (0, 6)]))
    assert full.truncated == 0 and full.all_finished
    assert cut.truncated == 2 and cut.jobs == full.jobs and cut.finished < full.finished
    rule = Rule({})
    assert rule.best([full, cut]) is full
    lines = format_history({}, [full, cut], rule, full).splitlines()
    assert lines[2].endswith("<- chosen") and lines[3].endswith(" 7/80  no       (2 cut)")


def test_heuristic_scores_are_the_bench_metrics_averaged():
    scn = load_scenario(SCN)
    episodes = [(0, 5), (0, 6)]
    res = heuristic_results(scn, "las", episodes)
    ms = [compute_metrics(r) for r in res]
    s = score_runs(7, res)
    assert s.steps == 7 and s.jobs == sum(len(r.tracked) for r in res) and s.all_finished
    assert s.avg_jct_s == pytest.approx((ms[0]["avg_jct_s"] + ms[1]["avg_jct_s"]) / 2, rel=1e-12)
    assert s.p99_jct_s == pytest.approx((ms[0]["p99_jct_s"] + ms[1]["p99_jct_s"]) / 2, rel=1e-12)
    assert s.energy_kwh == pytest.approx((ms[0]["energy_kwh"] + ms[1]["energy_kwh"]) / 2, rel=1e-12)
    runs = [np.mean([t.finish_s - t.first_start_s for t in r.tracked]) for r in res]  # every job finished
    assert s.avg_run_s == pytest.approx(np.mean(runs), rel=1e-12) and 0 < s.avg_run_s <= s.avg_jct_s
    assert score_runs(7, heuristic_results(scn, "las", episodes)) == s  # deterministic


def _cfg(*overrides: str):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        return compose("train", overrides=[
            f"scenario={SCN}", "env=cluster_v1", "env.workloads=[0]", "env.options=[packed]", "seed=0",
            "n_envs=1", "total_timesteps=256", "agent.params.n_steps=128", "agent.params.batch_size=64",
            "agent.params.n_epochs=1", "agent.params.policy_kwargs.net_arch=[32]", "eval.enabled=false",
            "checkpoint_freq=100000", "select.enabled=true", "select.freq=128", "select.run_seeds=[100000]",
            "select.avg_bound=las", "select.p99_bound=srtf", *overrides])


@pytest.mark.slow  # selection while training is also run by test_same_seed_trains_the_same_policy_and_scores
def test_training_with_selection_saves_the_chosen_candidate(tmp_path):
    from gpusched.agents.adapter import load_model, predict, read_meta
    from gpusched.agents.train import train

    summary = train(_cfg(), tmp_path)
    doc = json.loads((tmp_path / "selection.json").read_text())
    steps = [c["steps"] for c in doc["candidates"]]
    assert steps == [0, 128, 256] and doc["episodes"] == [[0, 100000]]
    cands = [Score(**{k: v for k, v in c.items() if k != "eligible"}) for c in doc["candidates"]]
    refs = {name: Score(**v) for name, v in doc["references"].items()}
    assert sorted(refs) == ["las", "srtf"] and doc["objective"] == "avg_jct_s"
    assert doc["bounds"] == {"avg_jct_s": refs["las"].avg_jct_s, "p99_jct_s": refs["srtf"].p99_jct_s}
    chosen = Rule(doc["bounds"]).best(cands)
    assert [c["eligible"] for c in doc["candidates"]] == [Rule(doc["bounds"]).eligible(c) for c in cands]
    assert doc["chosen_steps"] == chosen.steps == summary["selected_steps"]
    assert summary["selection_s"] == pytest.approx(sum(c.eval_s for c in cands), abs=0.1 * len(cands))
    assert 0 < summary["selection_s"] <= summary["rl_wall_s"]
    assert read_meta(tmp_path / "model.zip")["num_timesteps"] == chosen.steps
    assert read_meta(tmp_path / "last_model.zip")["num_timesteps"] == summary["num_timesteps"] == 256
    assert not (tmp_path / "selected.zip").exists()
    # the saved model, replayed on the validation episode, scores exactly what was recorded
    model = load_model(tmp_path / "model.zip")
    env = gym.make("gpusched/Cluster-v1", scenario=load_scenario(SCN), options=["packed"], max_steps=20000)
    again = score_runs(chosen.steps, play(env, lambda o, m: predict(model, o, m, True), [(0, 100000)]))
    assert (again.avg_jct_s, again.p99_jct_s, again.finished) == (chosen.avg_jct_s, chosen.p99_jct_s, chosen.finished)
    assert refs["las"].all_finished and np.isfinite(refs["srtf"].p99_jct_s)


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """One tiny training with a warm start and its candidates saved, for the tests below that read its
    folder (each on a copy of its own)."""
    from gpusched.agents.train import train

    out = tmp_path_factory.mktemp("selection") / "run"
    train(_cfg("checkpoint_freq=128", "bc.teacher=las", "bc.episodes=1", "bc.epochs=1"), out)
    return out


def test_reselection_picks_among_the_saved_candidates_without_playing(trained, tmp_path, capsys):
    import torch

    from gpusched.agents.adapter import load_model, predict, read_meta
    from gpusched.agents.selection import OBJECTIVES, candidate_file, load_history, main, reselect

    shutil.copytree(trained, tmp_path, dirs_exist_ok=True)
    bounds, scores = load_history(tmp_path)
    assert [c.steps for c in scores] == [0, 128, 256]
    same = reselect(tmp_path, "avg_jct_s", tmp_path / "again.zip")  # the training's own objective
    assert read_meta(tmp_path / "again.zip") == read_meta(tmp_path / "model.zip")
    a, b = (load_model(tmp_path / f).policy.state_dict() for f in ("model.zip", "again.zip"))
    assert same.steps == read_meta(tmp_path / "model.zip")["num_timesteps"] and all(torch.equal(a[k], b[k]) for k in a)
    env = gym.make("gpusched/Cluster-v1", scenario=load_scenario(SCN), options=["packed"], max_steps=20000)
    for objective in OBJECTIVES:  # each written policy is its candidate: replayed, it scores what was recorded
        out = tmp_path / f"{objective}.zip"
        chosen = reselect(tmp_path, objective, out)
        assert chosen == Rule(bounds, objective).best(scores) and read_meta(out)["num_timesteps"] == chosen.steps
        model = load_model(out)
        again = score_runs(chosen.steps, play(env, lambda o, m, model=model: predict(model, o, m, True), [(0, 100000)]))
        assert (again.avg_jct_s, again.p99_jct_s, again.finished) == (chosen.avg_jct_s, chosen.p99_jct_s, chosen.finished)
    main([str(tmp_path), "--objective", "p99_jct_s"])  # prints, writes nothing
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("bounds: avg_jct_s <= ") and printed[0].endswith("; objective p99_jct_s")
    assert [line.split()[0] for line in printed[2:]] == ["0", "128", "256"] and sum("<- chosen" in x for x in printed) == 1
    (tmp_path / "checkpoints" / "model_128_steps.zip").unlink()
    with pytest.raises(ConfigError, match="model_128_steps.zip: no saved policy for the candidate at 128 steps"):
        candidate_file(tmp_path, 128)
    with pytest.raises(SystemExit) as e:
        main([str(tmp_path / "nope"), "--objective", "avg_jct_s"])
    assert e.value.code == 2 and "nope/selection.json: cannot read it" in capsys.readouterr().err


@pytest.mark.parametrize(("override", "message"), [
    ("select.p99_bound=nope", "select.p99_bound must be a heuristic .*or null, got 'nope'"),
    ("select.objective=makespan_s",
     "select.objective must be one of avg_jct_s, p99_jct_s, avg_run_s, energy_kwh, worst_ratio, got 'makespan_s'"),
    ("select.objective=worst_ratio select.avg_bound=null select.p99_bound=null",
     "select.objective=worst_ratio needs a bound"),
    ("select.run_bound=nope", "select.run_bound must be a heuristic .*or null, got 'nope'"),
    ("select.freq=0", "select.freq must be an integer >= 1, got 0"),
    ("select.max_steps=-3", "select.max_steps must be an integer >= 1, got -3"),
    ("select.run_seeds=[]", "select.run_seeds must name at least one run seed"),
    ("select.slack=-0.1", "select.slack must be >= 0, got -0.1"),
])
def test_bad_selection_keys_are_named_before_anything_is_written(tmp_path, override, message):
    from gpusched.agents.train import train

    with pytest.raises(ConfigError, match=message):
        train(_cfg(*override.split()), tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_wall_clock_does_not_charge_excluded_time():
    from gpusched.agents.train import _WallClock

    spent = [0.0]
    clock = _WallClock(10.0, lambda: spent[0])
    clock.t0 = __import__("time").perf_counter() - 25.0  # 25 s since the start of RL
    assert not clock._on_step()
    spent[0] = 20.0  # of which 20 s scoring candidates: 5 s of RL
    assert clock._on_step()


def test_same_seed_trains_the_same_policy_and_scores(tmp_path):
    """One seed tree: the warm start, PPO and the selection scores repeat exactly on one machine."""
    import torch

    from gpusched.agents.adapter import load_model
    from gpusched.agents.train import train

    runs = [tmp_path / "a", tmp_path / "b"]
    for out in runs:
        train(_cfg("n_envs=2", "total_timesteps=512", "bc.teacher=las", "bc.episodes=1", "bc.epochs=1"), out)
    a, b = (load_model(out / "last_model.zip").policy.state_dict() for out in runs)
    assert all(torch.equal(a[k], b[k]) for k in a)
    scores = [[{k: v for k, v in c.items() if k != "eval_s"} for c in json.loads((out / "selection.json").read_text())["candidates"]]
              for out in runs]
    assert scores[0] == scores[1] and [c["steps"] for c in scores[0]] == [0, 128, 256, 384, 512]


def test_rescoring_replays_the_history_and_selects_across_validation_sets(trained, tmp_path, capsys):
    from gpusched.agents.selection import load_history, main, select_across
    from gpusched.studies.rescore import main as rescore_main
    from gpusched.studies.rescore import rescore

    shutil.copytree(trained, tmp_path, dirs_exist_ok=True)
    # the training's own episodes, no override: every figure of selection.json again, exactly
    same = json.loads(rescore(tmp_path, "same", []).read_text())
    doc = json.loads((tmp_path / "selection.json").read_text())
    assert same == {**doc, "candidates": [dict(c, eval_s=s["eval_s"]) for c, s in zip(doc["candidates"],
                                                                                       same["candidates"], strict=True)]}
    # a heavier load: its own references and bounds; the selection across both sets by hand
    rescore(tmp_path, "heavy", ["scenario.workload.load=1.5"], run_seeds=[100001])
    base, heavy = load_history(tmp_path), load_history(tmp_path, "heavy")
    assert heavy[0] != base[0] and [s.steps for s in heavy[1]] == [0, 128, 256]
    ok = [st for st in (0, 128, 256) if all(Rule(b, "worst_ratio").eligible(next(s for s in c if s.steps == st))
                                            for b, c in (base, heavy))]

    def worst(st: int) -> float:
        return max(Rule(b).worst_ratio(next(s for s in c if s.steps == st)) for b, c in (base, heavy))

    want = min(ok, key=worst) if ok else min((0, 128, 256), key=lambda st: (
        -sum(next(s for s in c if s.steps == st).finished for _, c in (base, heavy)), worst(st)))
    assert select_across([base, heavy], "worst_ratio") == want
    for objective in ("avg_jct_s", "worst_ratio"):  # one set: the rule of the training
        assert select_across([base], objective) == Rule(base[0], objective).best(base[1]).steps
    main([str(tmp_path), "--objective", "worst_ratio", "--also", "heavy", "--out", str(tmp_path / "both.zip")])
    printed = capsys.readouterr().out
    assert "== selection.json" in printed and "== selection_heavy.json" in printed
    assert printed.count("<- chosen") == 2 and f"(the candidate at {want} steps)" in printed
    main([str(tmp_path), "--objective", "worst_ratio", "--only", "heavy"])  # the heavy set alone
    printed = capsys.readouterr().out
    assert "== " not in printed and printed.count("<- chosen") == 1
    alone = Rule(heavy[0], "worst_ratio").best(heavy[1]).steps
    assert next(x for x in printed.splitlines() if "<- chosen" in x).split()[0] == str(alone)
    with pytest.raises(SystemExit) as e:
        main([str(tmp_path), "--objective", "worst_ratio", "--also", "nope"])
    assert e.value.code == 2 and f"python -m gpusched.studies.rescore {tmp_path} --name nope writes it" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        rescore_main([str(tmp_path), "--name", "bad/name"])
    assert e.value.code == 2 and "--name: letters, digits, '_' or '-' only" in capsys.readouterr().err


def test_run_setup_reads_null_workloads_as_every_workload_and_names_a_bad_file(tmp_path):
    import yaml

    from gpusched.studies.rescore import read_setup

    cfg = {"scenario": {"name": "synthetic_philly"}, "env": {"workloads": None},
           "select": {"workloads": None, "run_seeds": [100000, 100001], "avg_bound": "srtf", "p99_bound": None,
                      "run_bound": None, "slack": 0.05, "objective": "avg_jct_s"}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    setup = read_setup(tmp_path)
    assert setup.workloads is None and setup.run_seeds == [100000, 100001]
    assert setup.bounds == {"avg_jct_s": "srtf"} and setup.slack == 0.05
    cfg["env"]["workloads"] = [2, 3]
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    assert read_setup(tmp_path).workloads == [2, 3]
    del cfg["select"]["run_seeds"]
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    with pytest.raises(ConfigError, match="config.yaml: not a training config with select.* .KeyError: 'run_seeds'"):
        read_setup(tmp_path)
