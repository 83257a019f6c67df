"""Fixtures of the real-backend tests (helpers: realtest_helpers.py)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    d = tmp_path / "run"
    d.mkdir()
    return d
