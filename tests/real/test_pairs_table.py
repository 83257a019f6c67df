"""pairs_table: a pairs CSV beside the reference and a device-level results.json, by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpusched.real import pairs_table
from gpusched_env.device.measured import Cell

HEAD = ("run,measure_s,mechanism,hp_model,be_model,hp_load,hp_solo_ms,hp_requests,hp_mean_ms,hp_p50_ms,"
        "hp_p99_ms,be_iter_per_s,be_solo_iter_per_s,device\n")


def _csv(tmp_path: Path) -> Path:
    p = tmp_path / "pairs.csv"
    p.write_text(HEAD +
                 "1,6,exclusive,bert_inf,,0.5,4.0,600,9.0,7.0,30.0,,,GPU X\n"
                 "1,6,exclusive,,gpt2_train,,,,,,,20.0,20.0,GPU X\n"
                 "1,6,mps,bert_inf,gpt2_train,0.5,4.0,600,9.0,7.0,40.0,19.0,20.0,GPU X\n"
                 "1,6,time_slicing,bert_inf,gpt2_train,0.5,4.0,600,9.0,7.0,50.0,16.0,20.0,GPU X\n")
    return p


def test_rows_and_errors_by_hand(tmp_path: Path) -> None:
    measured = pairs_table.measured_cells(str(_csv(tmp_path)))
    ref = {("mps", "bert_inf", "gpt2_train"): Cell((0.9, 1.0), (18.0, 20.0), (30.0, 90.0))}
    sim = {("mps", "bert_inf", "gpt2_train"): (0.855, 35.0), ("time_slicing", "bert_inf", "gpt2_train"): (0.88, 60.0)}
    rs = pairs_table.rows(measured, ref, sim)
    assert [(r.mechanism, r.be_norm) for r in rs] == [("mps", 0.95), ("time_slicing", 0.8)]
    assert rs[0].be_norm_ref == pytest.approx(0.95) and rs[0].hp_p99_ref == (30.0, 90.0)
    assert rs[1].be_norm_ref is None and rs[1].hp_p99_ref is None and rs[1].hp_p99_sim == 60.0
    # model: |0.855/0.95 - 1| = 0.10, |0.88/0.8 - 1| = 0.10 -> 0.10 over 2; reference: 0 over 1
    assert pairs_table.mean_abs_error(rs, "be_norm_sim") == (pytest.approx(0.10), 2)
    assert pairs_table.mean_abs_error(rs, "be_norm_ref") == (pytest.approx(0.0), 1)


def test_cli_prints_the_device_and_reads_a_results_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    res = {"policies": {"mps": {"per_workload": [
        {"workload": "bert_inf+gpt2_train", "metrics": {"be_norm_throughput": 0.855, "hp_p99_ms": 35.0}}]}}}
    (tmp_path / "r.json").write_text(json.dumps(res))
    assert pairs_table.main([str(_csv(tmp_path)), "--sim", str(tmp_path / "r.json")]) == 0
    out = capsys.readouterr().out
    assert "| cell | BE share: GPU X |" in out
    assert "| mps bert_inf+gpt2_train | 0.950 |" in out and "| 0.855 | 40.0 |" in out
    assert "BE share, model against GPU X: mean |error| 10.0% over 1 cells, 1 within 15 %" in out


def test_a_missing_file_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert pairs_table.main([str(tmp_path / "nope.csv")]) == 2
    assert capsys.readouterr().err.strip().endswith("nope.csv: no such file")
