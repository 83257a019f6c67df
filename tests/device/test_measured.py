"""The measured-pairs reader: every mechanism name gpusched-real pairs writes, and the embedded summary."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpusched_env.data import DataMissing, data_path
from gpusched_env.device.measured import CSV, EMBEDDED, measured_cells, policy_name

HEADER = ("run,measure_s,mechanism,hp_model,be_model,hp_load,hp_solo_ms,hp_requests,hp_mean_ms,hp_p50_ms,hp_p99_ms,"
          "be_iter_per_s,be_solo_iter_per_s")


def write(tmp_path: Path, *rows: str) -> str:
    path = tmp_path / "pairs.csv"
    path.write_text("\n".join([HEADER, "1,8,exclusive,bert_inf,,0.5,6.0,600,9.0,8.0,30.0,,",
                               "1,8,exclusive,,gpt2_train,,,,,,,20.0,20.0", *rows]) + "\n")
    measured_cells.cache_clear()
    return str(path)  # absolute: the reader takes it as is


def test_every_thread_cap_is_read_under_its_own_policy_name(tmp_path: Path) -> None:
    path = write(tmp_path,
                 "1,8,mps_be30,bert_inf,gpt2_train,0.5,6.0,600,9.5,8.1,40.0,8.0,20.0",
                 "1,8,mps_be75,bert_inf,gpt2_train,0.5,6.0,600,9.9,8.2,50.0,15.0,20.0",
                 "1,8,mps_be5,bert_inf,gpt2_train,0.5,6.0,600,9.1,8.0,31.0,2.0,20.0",
                 "1,8,mps_prio,bert_inf,gpt2_train,0.5,6.0,600,9.2,8.0,35.0,19.0,20.0")
    cells = measured_cells(path)
    assert set(cells) == {(p, "bert_inf", "gpt2_train") for p in
                          ("exclusive", "mps_be30", "mps_be75", "mps_be5", "mps_priority")}
    assert cells[("mps_be30", "bert_inf", "gpt2_train")].be_norm == (0.4,)  # 8 / 20
    assert cells[("mps_be75", "bert_inf", "gpt2_train")].be_norm == (0.75,)  # 15 / 20
    assert cells[("mps_be75", "bert_inf", "gpt2_train")].hp_p99_ms == (50.0,)
    assert cells[("mps_be5", "bert_inf", "gpt2_train")].be_iter_per_s == (2.0,)
    assert cells[("exclusive", "bert_inf", "gpt2_train")].hp_p99_ms == (30.0,)


@pytest.mark.parametrize("bad", ["mps_be0", "mps_be100", "mps_be050", "mps_be", "fifo"])
def test_an_unknown_mechanism_is_a_one_line_error_naming_file_and_column(tmp_path: Path, bad: str) -> None:
    path = write(tmp_path, f"1,8,{bad},bert_inf,gpt2_train,0.5,6.0,600,9.5,8.1,40.0,8.0,20.0")
    with pytest.raises(ValueError, match=rf"pairs\.csv: column mechanism: unknown mechanism '{bad}'") as e:
        measured_cells(path)
    assert "\n" not in str(e.value)


def test_policy_names() -> None:
    """The colocation-h100 CSV's own names are translated; current names (gpusched-real pairs) pass as they are."""
    assert [policy_name(m) for m in ("exclusive", "timeslice", "mps", "mps_prio", "mps_be50", "mps_be1", "mps_be99")] == [
        "exclusive", "time_slicing", "mps", "mps_priority", "mps_be50", "mps_be1", "mps_be99"]
    assert [policy_name(m) for m in ("time_slicing", "mps_priority")] == ["time_slicing", "mps_priority"]
    with pytest.raises(ValueError, match="unknown mechanism 'time_slice'"):
        policy_name("time_slice")  # an old Sharing kind, never a CSV name


def test_embedded_summary_agrees_with_the_data_file() -> None:
    try:
        data_path(CSV)
    except DataMissing:
        pytest.skip("colocation-h100 data not downloaded")
    measured_cells.cache_clear()
    cells = measured_cells()
    assert set(cells) == set(EMBEDDED)
    for key, cell in cells.items():
        emb = EMBEDDED[key]
        assert emb.be_norm == pytest.approx(cell.be_norm, abs=5e-5), key
        assert emb.be_iter_per_s == pytest.approx(cell.be_iter_per_s, abs=5e-4), key
        assert emb.hp_p99_ms == pytest.approx(cell.hp_p99_ms, abs=5e-4), key
