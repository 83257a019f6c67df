"""Fixtures of the real-backend tests (helpers: realtest_helpers.py)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    d = tmp_path / "run"
    d.mkdir()
    return d


@pytest.fixture(scope="session")
def real_help() -> str:
    """``gpusched-real --help``, printed once in this process for the tests that read it (the CLI runs as
    a process in test_kill.py)."""
    from gpusched.real import cli
    from tests.cli_helpers import help_text

    return help_text(cli.main, "gpusched-real")
