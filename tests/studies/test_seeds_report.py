"""gpusched.studies.seeds_report: per-seed rows, median, spread and the goal verdicts from results.json files."""

from __future__ import annotations

import json

import pytest

from gpusched.studies.seeds_report import report


def _write(path, metrics, agent=None):
    """A results.json with ``metrics`` = {policy: {metric: value}} (and the agent's identity)."""
    doc = {"scenario": "s", "seeds": [0, 1], "policies": {p: {"metrics": m} for p, m in metrics.items()}}
    if agent is not None:
        doc["agent"] = agent
    path.write_text(json.dumps(doc))
    return str(path)


def _doc(path, policies, agent=None):
    return _write(path, {p: {"avg_jct_s": a, "p99_jct_s": q, "makespan_s": 10.0, "jobs_finished": 5.0}
                         for p, (a, q) in policies.items()}, agent)


def test_rows_median_and_goal(tmp_path):
    base = _doc(tmp_path / "b.json", {"las": (100.0, 900.0), "tiresias": (110.0, 500.0), "srtf": (50.0, 800.0)})
    agents = [_doc(tmp_path / f"a{s}.json", {"agent": (a, q)}, {"seed": s, "clairvoyant": False})
              for s, (a, q) in enumerate([(80.0, 450.0), (90.0, 550.0), (120.0, 400.0)])]
    out = report(agents, base, "las", "tiresias", "srtf", 0.05)
    assert "    median         90    -10.0%    +80.0%        450       -10.0%" in out
    assert "avg_jct_s 80..120 (-20.0%..+20.0% vs las)" in out
    assert "goal, medians: avg < las: yes (-10.0%); p99 <= tiresias: yes (-10.0%); all finished: yes" in out
    assert "goal met by 1 of 3 seeds" in out  # seed 1: p99 too high; seed 2: average too high
    assert "within" not in out.split("goal, medians:")[1]  # not clairvoyant: no SRTF check


def test_clairvoyant_check_and_mismatched_files(tmp_path):
    base = _doc(tmp_path / "b.json", {"las": (100.0, 900.0), "tiresias": (110.0, 500.0), "srtf": (50.0, 800.0)})
    a = _doc(tmp_path / "a.json", {"agent": (52.0, 450.0)}, {"seed": 0, "clairvoyant": True})
    out = report([a], base, "las", "tiresias", "srtf", 0.05)
    assert "goal, medians: avg within 5% of srtf: yes (+4.0%); all finished: yes" in out
    assert "goal met by 1 of 1 seeds" in out
    other = tmp_path / "o.json"
    other.write_text(json.dumps({"scenario": "t", "seeds": [0, 1], "policies": {}}))
    with pytest.raises(SystemExit, match="differ from the baseline"):
        report([str(other)], base, "las", "tiresias", "srtf", 0.05)


def _edoc(path, policies, agent=None):
    return _write(path, {p: {"energy_kwh": e, "avg_run_s": r, "avg_jct_s": r + 10.0, "deadline_miss_rate": 0.01,
                             "jobs_finished": 5.0} for p, (e, r) in policies.items()}, agent)


def test_energy_goal_rows_median_and_verdicts(tmp_path):
    from gpusched.studies.seeds_report import energy_report

    base = _edoc(tmp_path / "b.json", {"fifo": (1000.0, 100.0), "eaco": (900.0, 110.0)})
    agents = [_edoc(tmp_path / f"a{s}.json", {"agent": (e, r)}, {"seed": s, "num_timesteps": 7})
              for s, (e, r) in enumerate([(850.0, 105.0), (880.0, 120.0), (950.0, 100.0)])]
    out = energy_report(agents, base)
    assert "reference: eaco 900 kWh (-10.0% vs fifo), avg_run_s 110 (+10.0% vs fifo), avg_jct_s 120" in out
    assert "         0        850     -5.6%    -15.0%        105        +5.0%        115   0.010         5         7" in out
    assert "    median        880     -2.2%    -12.0%        105        +5.0%        115" in out
    assert "energy_kwh 850..950 (-5.6%..+5.6% vs eaco), avg_run_s 100..120 (+0.0%..+20.0% vs fifo)" in out
    assert ("goal, medians: energy < eaco: yes (-2.2%); runtime increase <= eaco's: yes (+5.0% vs +10.0%); "
            "all finished: yes") in out
    assert "goal met by 1 of 3 seeds" in out  # seed 1: runtime +20 %; seed 2: more energy than eaco


def test_energy_goal_from_the_command_line(tmp_path, capsys):
    from gpusched.studies.seeds_report import main

    base = _edoc(tmp_path / "b.json", {"fifo": (1000.0, 100.0), "eaco": (900.0, 110.0)})
    a = _edoc(tmp_path / "a.json", {"agent": (950.0, 100.0)}, {"seed": 0})
    main([a, "--baseline", base, "--goal", "energy"])
    assert "goal met by 0 of 1 seeds" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="no metric 'energy_kwh' for policy 'gandiva'"):
        main([a, "--baseline", base, "--goal", "energy", "--energy-vs", "gandiva"])
