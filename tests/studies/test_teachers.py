"""gpusched.studies.teachers: candidates parsed, the table by hand, a candidate equal to a bound reads 0."""

from __future__ import annotations

import pytest

from gpusched.studies import teachers
from gpusched_env.config_util import ConfigError
from gpusched_env.scenario import load_scenario


def test_parse_candidate() -> None:
    c = teachers.parse_candidate("mlfq_aged:aging=0.03,factor=2")
    assert (c.name, c.params) == ("mlfq_aged", (("aging", 0.03), ("factor", 2.0)))
    assert teachers.parse_candidate("las").params == ()
    for bad, match in (("nope", "not a heuristic"), ("agent", "not a heuristic"),
                       ("las:aging=1", "not KEY=VALUE with KEY a parameter of las"),
                       ("tiresias:threshold_gpu_s=x", "not a number")):
        with pytest.raises(ConfigError, match=match):
            teachers.parse_candidate(bad)


def test_table_by_hand() -> None:
    runs = {"v1": {"las": [(100.0, 1000.0, True), (300.0, 3000.0, True)],       # avg 200, p99 2000
                   "tiresias": [(400.0, 1500.0, True), (400.0, 1500.0, True)],  # p99 1500
                   "x": [(150.0, 1400.0, True), (150.0, 1600.0, True)],         # 150 / 1500: -25 %, +0 %: within
                   "y": [(150.0, 1000.0, True), (150.0, 1000.0, False)]},       # a job unfinished: not within
            "v2": {"las": [(10.0, 10.0, True)], "tiresias": [(20.0, 8.0, True)],
                   "x": [(11.0, 8.0, True)], "y": [(9.0, 8.0, True)]}}           # x +10 %; y -10 % / 0 %: within
    out = teachers.table(runs, ["tiresias", "x", "y"], ("las", "tiresias"))
    lines = out.splitlines()
    assert lines[1].split()[1:] == ["+100.0%/", "+0.0%", "-25.0%/", "+0.0%*", "-25.0%/", "-33.3%", "+33.3%"]
    assert lines[2].split()[1:] == ["+100.0%/", "+0.0%", "+10.0%/", "+0.0%", "-10.0%/", "+0.0%*", "+25.0%"]
    assert lines[3].split()[2:] == ["0", "of", "2", "1", "of", "2", "1", "of", "2"]


def test_a_candidate_equal_to_a_bound_reads_zero_on_a_real_run() -> None:
    scn = load_scenario("synthetic_small")
    runs = teachers.study([("small", scn)], [teachers.parse_candidate("las"),
                                             teachers.parse_candidate("tiresias:threshold_gpu_s=3600")],
                          ("las", "tiresias"), [0], workers=1)
    assert runs["small"]["las"] and runs["small"]["tiresias"] == runs["small"]["tiresias:threshold_gpu_s=3600"]
    row = teachers.table(runs, ["las", "tiresias:threshold_gpu_s=3600"], ("las", "tiresias")).splitlines()[1]
    assert row.split()[1] == "+0.0%/" and row.split()[4].rstrip("*") == "+0.0%"


def test_mix_scenarios_name_the_bad_mix() -> None:
    with pytest.raises(ConfigError, match="--mix 'nope': no file .*known: .*synthetic_philly_dr"):
        teachers.mix_scenarios("synthetic_philly", "nope", False)
    held = teachers.mix_scenarios("synthetic_philly", "synthetic_philly_dr", True)
    assert [n for n, _ in held] == ["load_0.6", "load_1.2", "16x8", "16x2"]
    assert (held[2][1].cluster.nodes[0].gpus_per_node, held[2][1].workload.max_gpus) == (8, 64)


def test_main_names_bad_options(capsys: pytest.CaptureFixture[str]) -> None:
    for argv, match in ((["--seeds", "1,x"], "--seeds: expected non-negative integers"),
                        (["--seeds", "-1"], "--seeds: expected non-negative integers"),
                        (["--seeds", "0", "--goal", "las"], "--goal: expected AVG_BOUND,P99_BOUND"),
                        (["--seeds", "0", "--goal", "las,nope"], "'nope' is not a heuristic"),
                        (["--seeds", "0", "--candidates", "las:round_s=x"], "round_s='x' is not a number")):
        args = ["--mix", "synthetic_philly_dr", "--candidates", "las", *argv]
        with pytest.raises(SystemExit, match=match):
            teachers.main(args)
