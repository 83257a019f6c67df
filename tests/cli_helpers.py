"""Run a console script's ``main`` in this process, as a test does for one-line errors."""

from __future__ import annotations

import contextlib
import io
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


def help_text(main: Callable[[], object], prog: str) -> str:
    """``prog --help`` through ``main`` in this process: what it prints to stdout (it must exit 0)."""
    out, argv = io.StringIO(), sys.argv
    sys.argv = [prog, "--help"]
    try:
        with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as e:
            main()
    finally:
        sys.argv = argv
    assert e.value.code in (0, None)
    return out.getvalue()
