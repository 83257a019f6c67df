"""The service's job queue: one SQLite file (WAL mode) in the service folder.

``jobs`` holds one row per job (its spec, state and the placement of its current launch);
``history`` holds every state change, in order. Every write is one ``BEGIN IMMEDIATE`` transaction,
so ``submit`` from many processes at once (with or without the service running) never loses a job.
The folder is created ``0700`` and the file ``0600``: only the user who runs the service reads it.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpusched.real.service.spec import JobSpec

DB_NAME = "queue.sqlite"
STATES = ("pending", "running", "finished", "failed", "cancelled")
ACTIVE = ("pending", "running")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  name TEXT NOT NULL, spec TEXT NOT NULL, gpus INTEGER NOT NULL,
  state TEXT NOT NULL, submit_t REAL NOT NULL,
  first_start_t REAL, finish_t REAL, ran_s REAL NOT NULL DEFAULT 0, gpu_s REAL NOT NULL DEFAULT 0,
  launches INTEGER NOT NULL DEFAULT 0, restarts INTEGER NOT NULL DEFAULT 0,
  preemptions INTEGER NOT NULL DEFAULT 0, migrations INTEGER NOT NULL DEFAULT 0,
  started_t REAL, gpu_ids TEXT, placement TEXT, not_before REAL NOT NULL DEFAULT 0,
  exit_code INTEGER, error TEXT, cancel INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS history (
  id INTEGER PRIMARY KEY AUTOINCREMENT, job_id INTEGER NOT NULL, t REAL NOT NULL,
  state TEXT NOT NULL, detail TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS jobs_state ON jobs(state);
CREATE INDEX IF NOT EXISTS history_job ON history(job_id);
"""


@dataclass(frozen=True)
class JobRow:
    """One row of ``jobs``. ``placement``: the parts of the current launch, one per node, each
    ``{"node": str, "local": [int], "launch": int}``; ``gpu_ids``: the global GPU ids."""

    id: int
    name: str
    spec: JobSpec
    state: str
    submit_t: float
    first_start_t: float | None
    finish_t: float | None
    ran_s: float
    gpu_s: float
    launches: int
    restarts: int
    preemptions: int
    migrations: int
    started_t: float | None
    gpu_ids: tuple[int, ...]
    placement: tuple[dict[str, Any], ...]
    not_before: float
    exit_code: int | None
    error: str | None
    cancel: bool


class JobQueue:
    """The queue file of service folder ``out_dir`` (created private on first use)."""

    def __init__(self, out_dir: str | Path) -> None:
        self.dir = Path(out_dir)
        if not self.dir.exists():
            self.dir.mkdir(parents=True, mode=0o700)
        os.chmod(self.dir, 0o700)
        self.path = self.dir / DB_NAME
        if not self.path.exists():
            os.close(os.open(self.path, os.O_CREAT | os.O_WRONLY, 0o600))
        os.chmod(self.path, 0o600)
        self.db = sqlite3.connect(self.path, timeout=60.0, isolation_level=None, check_same_thread=False)
        self.db.row_factory = sqlite3.Row
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.executescript(_SCHEMA)  # idempotent; each statement commits on its own

    def close(self) -> None:
        self.db.close()

    @contextmanager
    def tx(self) -> Iterator[sqlite3.Connection]:
        """One write transaction (taken at once, so writers queue instead of failing)."""
        for attempt in range(50):
            try:
                self.db.execute("BEGIN IMMEDIATE")
                break
            except sqlite3.OperationalError as e:  # busy beyond the timeout: retry
                if "locked" not in str(e) or attempt == 49:
                    raise
                time.sleep(0.05)
        try:
            yield self.db
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    # -- meta ------------------------------------------------------------------------------
    def meta(self, key: str) -> str | None:
        r = self.db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return None if r is None else str(r[0])

    def set_meta(self, key: str, value: str) -> None:
        with self.tx() as db:
            db.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (key, value))

    def epoch(self) -> float:
        """Wall time the queue was created: time 0 of the policy's view and of the report."""
        with self.tx() as db:
            r = db.execute("SELECT value FROM meta WHERE key='epoch'").fetchone()
            if r is not None:
                return float(r[0])
            t = time.time()
            db.execute("INSERT INTO meta(key, value) VALUES ('epoch', ?)", (repr(t),))
            return t

    # -- jobs ------------------------------------------------------------------------------
    def submit(self, spec: JobSpec, now: float | None = None) -> int:
        t = time.time() if now is None else now
        with self.tx() as db:
            cur = db.execute(
                "INSERT INTO jobs(name, spec, gpus, state, submit_t) VALUES (?, ?, ?, 'pending', ?)",
                (spec.name, spec.to_json(), spec.gpus, t),
            )
            job_id = int(cur.lastrowid or 0)
            db.execute("INSERT INTO history(job_id, t, state, detail) VALUES (?, ?, 'pending', 'submitted')",
                       (job_id, t))
        return job_id

    def get(self, job_id: int) -> JobRow | None:
        r = self.db.execute("SELECT * FROM jobs WHERE id=?", (job_id,)).fetchone()
        return None if r is None else _row(r)

    def jobs(self, states: tuple[str, ...] = STATES) -> list[JobRow]:
        q = f"SELECT * FROM jobs WHERE state IN ({','.join('?' * len(states))}) ORDER BY id"
        return [_row(r) for r in self.db.execute(q, states).fetchall()]

    def update(self, job_id: int, state: str | None = None, detail: str = "", **cols: Any) -> None:
        """Set columns of one job; a new ``state`` is also appended to the history."""
        if "placement" in cols:
            cols["placement"] = json.dumps(list(cols["placement"]))
        if "gpu_ids" in cols:
            cols["gpu_ids"] = json.dumps(list(cols["gpu_ids"]))
        if state is not None:
            if state not in STATES:
                raise ValueError(f"unknown job state {state!r}")
            cols["state"] = state
        t = time.time()
        with self.tx() as db:
            if cols:
                sets = ", ".join(f"{k}=?" for k in cols)
                db.execute(f"UPDATE jobs SET {sets} WHERE id=?", (*cols.values(), job_id))
            if state is not None or detail:
                db.execute("INSERT INTO history(job_id, t, state, detail) VALUES (?, ?, ?, ?)",
                           (job_id, t, state or "note", detail))

    def cancel(self, job_id: int) -> str:
        """Cancel a job: a pending one at once, a running one by the service. Returns what happened."""
        with self.tx() as db:
            r = db.execute("SELECT state FROM jobs WHERE id=?", (job_id,)).fetchone()
            if r is None:
                return "unknown"
            if r[0] == "pending":
                t = time.time()
                db.execute("UPDATE jobs SET state='cancelled', finish_t=? WHERE id=?", (t, job_id))
                db.execute("INSERT INTO history(job_id, t, state, detail) VALUES (?, ?, 'cancelled', 'by user')",
                           (job_id, t))
                return "cancelled"
            if r[0] == "running":
                db.execute("UPDATE jobs SET cancel=1 WHERE id=?", (job_id,))
                return "cancelling"
            return str(r[0])

    def history(self, job_id: int | None = None) -> list[tuple[int, float, str, str]]:
        q = "SELECT job_id, t, state, detail FROM history" + (" WHERE job_id=?" if job_id is not None else "")
        rows = self.db.execute(q + " ORDER BY id", () if job_id is None else (job_id,)).fetchall()
        return [(int(r[0]), float(r[1]), str(r[2]), str(r[3])) for r in rows]

    def max_id(self) -> int:
        return int(self.db.execute("SELECT COALESCE(MAX(id), 0) FROM jobs").fetchone()[0])


def _row(r: sqlite3.Row) -> JobRow:
    return JobRow(
        id=int(r["id"]), name=str(r["name"]), spec=JobSpec.from_json(r["spec"]), state=str(r["state"]),
        submit_t=float(r["submit_t"]), first_start_t=r["first_start_t"], finish_t=r["finish_t"],
        ran_s=float(r["ran_s"]), gpu_s=float(r["gpu_s"]), launches=int(r["launches"]),
        restarts=int(r["restarts"]), preemptions=int(r["preemptions"]), migrations=int(r["migrations"]),
        started_t=r["started_t"], gpu_ids=tuple(json.loads(r["gpu_ids"] or "[]")),
        placement=tuple(json.loads(r["placement"] or "[]")), not_before=float(r["not_before"]),
        exit_code=r["exit_code"], error=r["error"], cancel=bool(r["cancel"]),
    )
