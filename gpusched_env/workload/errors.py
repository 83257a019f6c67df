"""Load errors and reports shared by every trace loader."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpusched_env.types import Job


class TraceError(ValueError):
    """One bad row or column of a trace file, located by file, line (1 = header) and field."""

    def __init__(self, file: str, line: int, field: str, problem: str, value: Any) -> None:
        super().__init__(f"{file}:{line}: field '{field}': {problem} (got {value!r})")
        self.file = file
        self.line = line
        self.field = field
        self.problem = problem
        self.value = value


@dataclass
class LoadReport:
    """What a loader did with each row of its file; nothing is dropped without a count here.

    rows_read: data rows in the file. rows_skipped: rows not turned into jobs because they were bad
    (``strict=False``) or of a documented skipped kind (e.g. CPU-only pods); ``reasons`` counts them by
    reason. ``filtered`` counts rows left out on request (virtual cluster, time window, limit).
    """

    source: str
    rows_read: int = 0
    rows_skipped: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    filtered: dict[str, int] = field(default_factory=dict)

    @property
    def rows_kept(self) -> int:
        return self.rows_read - self.rows_skipped - sum(self.filtered.values())

    def skip(self, reason: str, n: int = 1) -> None:
        if n > 0:
            self.rows_skipped += n
            self.reasons[reason] = self.reasons.get(reason, 0) + n

    def filter(self, reason: str, n: int) -> None:
        if n > 0:
            self.filtered[reason] = self.filtered.get(reason, 0) + n

    def summary(self) -> str:
        parts = [f"{self.source}: {self.rows_kept} of {self.rows_read} rows loaded"]
        parts += [f"{n} skipped: {r}" for r, n in self.reasons.items()]
        parts += [f"{n} filtered: {r}" for r, n in self.filtered.items()]
        return "; ".join(parts)


@dataclass
class Workload:
    """Jobs loaded from a trace (sorted by arrival) and the report of how they were loaded."""

    jobs: list[Job]
    report: LoadReport
