"""Run a console script's ``main`` in this process, as a test does for one-line errors."""

from __future__ import annotations

import sys
from collections.abc import Callable

import pytest


def run_main(main: Callable[[], object], prog: str, argv: list[str], capsys: pytest.CaptureFixture[str],
             monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    """``prog argv`` through ``main`` in this process: (exit code, stderr)."""
    monkeypatch.setattr(sys, "argv", [prog, *argv])
    monkeypatch.setenv("HYDRA_FULL_ERROR", "1")
    try:
        main()
        code = 0
    except SystemExit as e:
        code = int(e.code or 0)
    return code, capsys.readouterr().err
