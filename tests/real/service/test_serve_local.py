"""The service loop on the local engine: policies run online, crashes, policy faults, cancel, report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpusched_env.types import Start
from gpusched_env.view import ClusterView
from real.service.queue import JobQueue
from real.service.report import report
from real.service.spec import parse_spec
from tests.real.service.helpers import done_lines, service, submit, ticks_spec

SIZES = [1, 2, 1, 4, 1, 2, 6, 1, 3, 1, 2, 1, 4, 1, 2, 1, 1, 2, 1, 3]  # 20 jobs; a 6-GPU job spans both nodes


@pytest.mark.parametrize("policy", ["fifo", "las"])
def test_twenty_mixed_jobs_all_finish_exactly_once(tmp_path: Path, policy: str) -> None:
    done = tmp_path / "done.txt"
    ids = submit(tmp_path, [ticks_spec(done, 1 + i % 6, g) for i, g in enumerate(SIZES)])
    svc = service(tmp_path, policy=policy, nodes=2, devices_per_node=4, round_s=1.0)
    svc.run()
    q = JobQueue(tmp_path)
    rows = q.jobs()
    assert [r.state for r in rows] == ["finished"] * 20
    lines = done_lines(done)
    finished = [int(x[0]) for x in lines if x[3] in ("-", "0")]  # single-node jobs and rank 0
    assert sorted(finished) == ids  # every job completed exactly once
    multi = [x for x in lines if int(x[0]) == ids[6]]
    assert sorted((x[3], x[4]) for x in multi) == [("0", "2"), ("1", "2")]  # one process per node, ranks 0 and 1
    for r in rows:  # every launch is in the history, and the launch count matches it
        launches = [d for _, _, s, d in q.history(r.id) if s == "running"]
        assert len(launches) == r.launches >= 1
    m = report(tmp_path)["policies"][policy]["metrics"]
    assert m["jobs_finished"] == 20 and 0 < m["utilization"] <= 1
    assert m["preemptions"] == sum(r.preemptions for r in rows)
    assert m["restarts"] == 0  # nothing crashed or was lost
    if policy == "fifo":
        assert m["preemptions"] == 0 and all(x[1] == "0" for x in lines)
    else:  # LAS preempted, and a preempted job resumed from its step counter, not from zero
        assert m["preemptions"] > 0
        assert any(int(x[1]) > 0 and int(x[2]) > 0 for x in lines)


def test_crash_is_restarted_with_backoff_then_failed_with_exit_code_and_log(tmp_path: Path) -> None:
    (j,) = submit(tmp_path, [parse_spec({"command": "echo attempt $GPUSCHED_RESTART_COUNT; exit 3", "shell": True,
                                         "gpus": 1, "max_restarts": 2}, "t")])
    service(tmp_path).run()
    q = JobQueue(tmp_path)
    row = q.get(j)
    assert row is not None and row.state == "failed" and row.exit_code == 3 and row.restarts == 2
    assert row.error is not None and "exit code 3 after 2 restart(s)" in row.error and "attempt 2" in row.error
    assert [s for _, _, s, _ in q.history(j)] == ["pending", "running", "pending", "running", "pending", "running", "failed"]


class _Raising:
    name, round_s, events = "raising", None, True

    def decide(self, view: ClusterView) -> list[Start]:
        raise RuntimeError("bug in the policy")


class _Invalid:
    name, round_s, events = "invalid", None, True

    def decide(self, view: ClusterView) -> list[Start]:
        return [Start(j, (99,)) for j in view.pending_ids]  # no GPU 99


@pytest.mark.parametrize("bad", [_Raising, _Invalid])
def test_a_faulty_policy_falls_back_to_fifo_for_the_round(tmp_path: Path, bad: type) -> None:
    done = tmp_path / "done.txt"
    submit(tmp_path, [ticks_spec(done, 1, 1) for _ in range(3)])
    svc = service(tmp_path)
    svc.policy = bad()
    svc.run()
    assert sorted(int(x[0]) for x in done_lines(done)) == [1, 2, 3]
    log = (tmp_path / "service.log").read_text()
    assert "FIFO decides this round" in log
    assert ("RuntimeError: bug in the policy" if bad is _Raising else "[gpu-exists]") in log


def test_cancel_pending_and_running(tmp_path: Path) -> None:
    done = tmp_path / "done.txt"
    a, b = submit(tmp_path, [ticks_spec(done, 100, 4), ticks_spec(done, 1, 4)])
    q = JobQueue(tmp_path)
    assert q.cancel(b) == "cancelled"
    svc = service(tmp_path, devices_per_node=4, max_wall_s=1.0, exit_when_idle=False)
    svc.run()  # starts a, stops after 1 s leaving it running
    assert q.get(a).state == "running"  # type: ignore[union-attr]
    assert q.cancel(a) == "cancelling"
    service(tmp_path).run()
    assert q.get(a).state == "cancelled" and done_lines(done) == []  # type: ignore[union-attr]


def test_shadow_mode_launches_nothing_and_logs_both_policies(tmp_path: Path) -> None:
    submit(tmp_path, [ticks_spec(tmp_path / "d", 1, g) for g in (4, 1, 2)])
    service(tmp_path, policy="sjf", mode="shadow", exit_when_idle=False, max_wall_s=0.5).run()
    q = JobQueue(tmp_path)
    assert [r.state for r in q.jobs()] == ["pending"] * 3
    first = json.loads((tmp_path / "shadow.jsonl").read_text().splitlines()[0])
    assert first["baseline"]["name"] == "fifo" and first["policy"]["name"] == "sjf"
    assert [d["job"] for d in first["baseline"]["decisions"]] == [1]  # fifo: the 4-GPU head of the queue
    assert first["policy"]["error"] is None and first["baseline"]["error"] is None
