"""gpusched_env.atomic: a write lands whole or not at all, with the mode open() would give."""

from __future__ import annotations

import json
import os

import pytest

from gpusched_env.atomic import atomic_path, file_mode, write_json_atomic


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "results.json"
    target.write_text("old")
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("crash")
    assert target.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["results.json"]


def test_a_finished_write_replaces_the_file_readable_as_any_new_file(tmp_path):
    target = tmp_path / "sub" / "r.json"  # parent folders are created
    write_json_atomic(target, {"a": float("nan"), "b": [1.5, float("inf")]})
    assert json.loads(target.read_text()) == {"a": None, "b": [1.5, None]}
    assert os.stat(target).st_mode & 0o777 == file_mode()
    assert [p.name for p in target.parent.iterdir()] == ["r.json"]
