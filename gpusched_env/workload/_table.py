"""Vectorised row validation for the CSV loaders.

A :class:`Checker` reads a CSV as text, then each check marks its bad rows at once (no row loops).
In strict mode the earliest bad line of the file is raised as a :class:`TraceError` by
:meth:`Checker.done`; otherwise bad rows are counted in the :class:`LoadReport` by reason. Line
numbers are file lines: the header is line 1, so data row ``i`` (0-based) is line ``i + 2``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from gpusched_env.catalog import model_spec
from gpusched_env.workload.errors import LoadReport, TraceError


def read_csv(path: str | Path, required: Sequence[str]) -> pd.DataFrame:
    """Read ``path`` with every cell as text; TraceError naming the file and column if one is missing.

    Blank lines are dropped; the index keeps each row's position in the file (line = index + 2).
    """
    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False, skip_blank_lines=False)
    except pd.errors.EmptyDataError:
        raise TraceError(str(path), 1, "header", f"empty file; expected a header with {', '.join(required)}",
                         "") from None
    except (pd.errors.ParserError, UnicodeDecodeError) as e:
        raise TraceError(str(path), 1, "file", f"not a readable CSV ({str(e).strip().splitlines()[0]})",
                         "") from None
    for col in required:
        if col not in df.columns:
            raise TraceError(str(path), 1, col, f"missing column (columns: {', '.join(df.columns)})", col)
    blank = (df == "").all(axis=1)
    return df[~blank.to_numpy()]


class Checker:
    """Marks bad rows of ``df``; ``ok`` is the mask of rows still good."""

    def __init__(self, df: pd.DataFrame, source: str, *, strict: bool, report: LoadReport) -> None:
        self.df = df
        self.source = source
        self.strict = strict
        self.report = report
        self.ok = np.ones(len(df), dtype=bool)
        self._error: TraceError | None = None
        report.rows_read = len(df)

    def line(self, i: int) -> int:
        """File line of row position ``i``."""
        return int(self.df.index[i]) + 2

    def reject(self, bad: np.ndarray, col: str, problem: str) -> None:
        """Rows in ``bad`` (still good so far) are errors: raised in strict mode, else counted."""
        new = np.asarray(bad, dtype=bool) & self.ok
        if not new.any():
            return
        i = int(np.flatnonzero(new)[0])
        line = self.line(i)
        if self._error is None or line < self._error.line:
            self._error = TraceError(self.source, line, col, problem, self.df[col].iat[i])
        self.report.skip(f"{col}: {problem}", int(new.sum()))
        self.ok &= ~new

    def skip(self, mask: np.ndarray, reason: str) -> None:
        """Rows in ``mask`` are a documented kind the loader leaves out (also in strict mode)."""
        new = np.asarray(mask, dtype=bool) & self.ok
        self.report.skip(reason, int(new.sum()))
        self.ok &= ~new

    def numeric(
        self,
        col: str,
        *,
        positive: bool = False,
        non_negative: bool = False,
        integer: bool = False,
        optional: bool = False,
        max_value: float | None = None,
        max_name: str = "",
    ) -> np.ndarray:
        """Column ``col`` as float64; empty cells are NaN when ``optional``, else errors."""
        raw = self.df[col].astype(str).str.strip()
        vals = pd.to_numeric(raw, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
        empty = (raw == "").to_numpy()
        if not optional:
            self.reject(empty, col, "missing value")
        self.reject(~empty & ~np.isfinite(vals), col, "not a finite number")
        if integer:
            self.reject(np.isfinite(vals) & (vals != np.floor(vals)), col, "not a whole number")
        if positive:
            self.reject(vals <= 0, col, "must be > 0")
        if non_negative:
            self.reject(vals < 0, col, "must be >= 0")
        if max_value is not None:
            self.reject(vals > max_value, col, f"exceeds {max_name or 'maximum'}={max_value:g}")
        return vals

    def models(self, col: str) -> np.ndarray:
        """Column ``col`` mapped to catalogue model names (object array); unknown names are errors."""
        raw = self.df[col].astype(str).str.strip()
        names: dict[str, str] = {}
        for name in raw.unique():
            try:
                names[name] = model_spec(name).name
            except KeyError:
                names[name] = ""
        mapped = raw.map(names).to_numpy(dtype=object)
        self.reject(mapped == "", col, "unknown model")
        return mapped

    def done(self) -> np.ndarray:
        """Raise the earliest error in strict mode; else return the indices of the good rows."""
        if self.strict and self._error is not None:
            raise self._error
        return np.flatnonzero(self.ok)
