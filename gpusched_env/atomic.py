"""Atomic file writes: every result, plot and model file is written to a temporary file beside its
destination and renamed into place, so a crash or Ctrl-C never leaves a half-written file."""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def file_mode() -> int:
    """0666 less the process umask: the mode ``open()`` would give a new file."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


@contextmanager
def atomic_path(path: str | Path, suffix: str = ".tmp") -> Iterator[Path]:
    """A temporary path beside ``path`` (ending in ``suffix``) for the caller to write; renamed to
    ``path`` when the block ends, removed if it raises. Parent folders are created."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=suffix)
    tmp = Path(name)
    try:
        os.fchmod(fd, file_mode())  # mkstemp makes 0600; results are as readable as any other file
        os.close(fd)
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_atomic(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename (never a half-written file)."""
    with atomic_path(path) as tmp, open(tmp, "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())


def write_json_atomic(path: str | Path, obj: Any) -> None:
    """``obj`` as indented JSON (NaN and inf written as null), atomically."""
    write_atomic(path, json.dumps(json_clean(obj), indent=2) + "\n")


def json_clean(obj: Any) -> Any:
    """NaN/inf are not JSON: write them as null."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: json_clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_clean(v) for v in obj]
    return obj
