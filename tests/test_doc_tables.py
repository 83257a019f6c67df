"""The README's policy tables are the generator's output, and the generator reads the registries."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpusched.bench import doc_tables

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_policy_tables_are_current() -> None:
    block = doc_tables.block_of(README.read_text())
    assert block == doc_tables.render(), "README.md's policy tables are stale: run python -m gpusched.bench.doc_tables --write README.md"


def test_every_registered_policy_has_one_row_with_a_description() -> None:
    from gpusched.baselines import POLICY_NAMES
    from gpusched_env.device.daris.scenario import STAGE_POLICIES
    from gpusched_env.device.mechanisms import MECHANISMS
    from gpusched_env.pipeline.schedules import SCHEDULES

    levels = [
        (doc_tables.cluster_rows(), list(POLICY_NAMES)),
        (doc_tables.mechanism_rows(), list(MECHANISMS)),
        (doc_tables.stage_rows(), list(STAGE_POLICIES)),
        (doc_tables.schedule_rows(), list(SCHEDULES)),
    ]
    for rows, names in levels:
        assert sorted(r.name for r in rows) == sorted(names)
        assert all(r.family and r.description for r in rows), rows


def test_rows_name_the_module_that_implements_each_policy() -> None:
    by_name = {r.name: r for r in doc_tables.schedule_rows()}
    # zb_cpu re-exports zb's orders with another comm mode: its row must still point at zb_cpu.py
    assert by_name["zb_cpu"].module == "gpusched_env.pipeline.schedules.zb_cpu"
    assert by_name["zb"].module == "gpusched_env.pipeline.schedules.zb"
    assert by_name["gpipe"].family == "GPipe (Huang et al., 2019)"
    cluster = {r.name: r for r in doc_tables.cluster_rows()}
    assert cluster["pal"].module == "gpusched.baselines.pal"
    assert cluster["eaco"].family == "EaCO (Haghshenas & Hashemi, arXiv 2412.08294)"
    stage = {r.name: r for r in doc_tables.stage_rows()}
    assert stage["batching"].description == "one stream on the whole GPU"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("MPS (NVIDIA Multi-Process Service; DEVICE.md)", "MPS (NVIDIA Multi-Process Service)"),
        ("Tally (Zhao et al., ASPLOS'25; CALIBRATION.md, DEVICE.md)", "Tally (Zhao et al., ASPLOS'25)"),
        ("Time slicing, the default (DEVICE.md).", "Time slicing, the default"),
        ("PAL (Jain et al., SC'24) and PM-First, as CALIBRATION.md describes them", "PAL (Jain et al., SC'24) and PM-First"),
        ("the ``x`` rule (:func:`~a.b.warmup`)", "the `x` rule (`warmup`)"),
    ],
)
def test_cells_drop_note_references_and_use_markdown(text: str, expected: str) -> None:
    assert doc_tables._clean(text) == expected


def test_write_replaces_only_the_marked_block(tmp_path: Path) -> None:
    f = tmp_path / "R.md"
    f.write_text(f"intro\n{doc_tables.BEGIN}\nold\n{doc_tables.END}\noutro\n")
    assert doc_tables.main(["--write", str(f)]) == 0
    assert f.read_text() == f"intro\n{doc_tables.BEGIN}\n{doc_tables.render()}{doc_tables.END}\noutro\n"
    f.write_text("no markers\n")
    assert doc_tables.main(["--write", str(f)]) == 2
