"""Job specs (one-line errors naming file and key) and the SQLite queue (private, concurrent-safe)."""

from __future__ import annotations

import multiprocessing as mp
import os
import stat
from pathlib import Path

import pytest

from gpusched.real.service.queue import JobQueue
from gpusched.real.service.spec import DEFAULT_PERF_CLASS, JobSpec, SpecError, load_spec, parse_spec


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "job.yaml"
    p.write_text(text)
    return p


def test_spec_loads_every_key(tmp_path: Path) -> None:
    p = _write(tmp_path, "command: [python, train.py, --lr, 0.1]\ngpus: 2\nname: a\nmodel: resnet50\n"
               "expected_duration_s: 60\npriority: 3\nenv: {B: 1, A: x}\nworkdir: sub\nmax_restarts: 1\n")
    s = load_spec(p)
    assert s.command == ("python", "train.py", "--lr", "0.1")
    assert (s.gpus, s.name, s.model, s.expected_duration_s, s.priority, s.max_restarts) == (2, "a", "resnet50", 60.0, 3, 1)
    assert s.env == (("A", "x"), ("B", "1"))
    assert s.workdir == str(tmp_path.resolve() / "sub")
    assert s.perf_class == "A" and not s.shell
    assert JobSpec.from_json(s.to_json()) == s


def test_unknown_model_gets_the_default_class() -> None:
    s = parse_spec({"command": ["true"], "gpus": 1, "model": "my-own-net"}, "x")
    assert s.perf_class == DEFAULT_PERF_CLASS == "A"
    assert parse_spec({"command": ["true"], "gpus": 1, "model": "vgg19"}, "x").perf_class == "C"


def test_shell_string_needs_shell_true(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"job.yaml: command: expected a list of strings \(a single string needs shell: true\)"):
        load_spec(_write(tmp_path, "command: sleep 1\ngpus: 1\n"))
    s = load_spec(_write(tmp_path, "command: sleep 1 && echo hi\ngpus: 1\nshell: true\n"))
    assert s.command == ("sleep 1 && echo hi",) and s.shell


@pytest.mark.parametrize("text, msg", [
    ("gpus: 1\n", "command: missing"),
    ("command: [a]\ngpus: 0\n", "gpus: expected an integer >= 1, got 0"),
    ("command: [a]\ngpus: 1\nenv: {1BAD: x}\n", "env: '1BAD' is not a valid variable name"),
    ("command: [a]\ngpus: 1\nenv: {GPUSCHED_JOB_ID: 3}\n", "env: GPUSCHED_JOB_ID is set by the service"),
    ("command: [a]\ngpus: 1\ncolour: red\n", "unknown key 'colour'"),
    ("command: [a]\ngpus: 1\nmax_restarts: -1\n", "max_restarts: expected an integer >= 0"),
    ("command: [a]\ngpus: 1\nexpected_duration_s: 0\n", "expected_duration_s: expected a number of seconds > 0"),
    ("command: [a\n", "line 2 not valid YAML"),
    ("- a\n", "a job spec is a mapping"),
])
def test_spec_errors_are_one_line_naming_file_and_key(tmp_path: Path, text: str, msg: str) -> None:
    with pytest.raises(SpecError) as e:
        load_spec(_write(tmp_path, text))
    assert str(e.value).startswith(str(tmp_path / "job.yaml") + ":")
    assert msg in str(e.value) and "\n" not in str(e.value)


def test_queue_is_private_and_records_history(tmp_path: Path) -> None:
    d = tmp_path / "svc"
    q = JobQueue(d)
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(q.path).st_mode) == 0o600
    assert q.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    spec = parse_spec({"command": ["true"], "gpus": 1}, "x")
    a, b = q.submit(spec), q.submit(spec)
    assert (a, b) == (1, 2)
    assert q.cancel(a) == "cancelled"
    q.update(b, "running", "started", launches=1, gpu_ids=(0,))
    assert q.cancel(b) == "cancelling"
    assert [(j, s) for j, _, s, _ in q.history()] == [(1, "pending"), (2, "pending"), (1, "cancelled"), (2, "running")]
    row = q.get(b)
    assert row is not None and row.state == "running" and row.gpu_ids == (0,) and row.cancel
    for f in d.iterdir():
        assert stat.S_IMODE(os.stat(f).st_mode) & 0o077 == 0, f


def _submit_many(out_dir: str, n: int) -> None:
    q = JobQueue(out_dir)
    spec = parse_spec({"command": ["true"], "gpus": 1}, "x")
    for _ in range(n):
        q.submit(spec)
    q.close()


def test_concurrent_submit_from_four_processes_loses_nothing(tmp_path: Path) -> None:
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_submit_many, args=(str(tmp_path), 50)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    q = JobQueue(tmp_path)
    rows = q.jobs()
    assert len(rows) == 200 and [r.id for r in rows] == list(range(1, 201))
    assert len(q.history()) == 200
