"""agents.seeds_report: per-seed rows, median, spread and the goal verdicts from results.json files."""

from __future__ import annotations

import json

import pytest

from agents.seeds_report import report


def _doc(path, policies, agent=None):
    doc = {"scenario": "s", "seeds": [0, 1], "policies": {
        p: {"metrics": {"avg_jct_s": a, "p99_jct_s": q, "makespan_s": 10.0, "jobs_finished": 5.0}}
        for p, (a, q) in policies.items()}}
    if agent is not None:
        doc["agent"] = agent
    path.write_text(json.dumps(doc))
    return str(path)


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
