"""The run rules both backends share: stall counting, record counting, deadline, outcome, result."""

from __future__ import annotations

import pytest

from gpusched_env.allocation import Applied
from gpusched_env.run_rules import (
    RunOutcome,
    RunSnapshot,
    StallCounter,
    assemble_result,
    count_finished,
    count_migrated,
    count_preempted,
    count_started,
    dead_end,
    run_outcome,
)
from gpusched_env.types import Job, JobRecord

STALLED = RunSnapshot(running=0, pending=5, arrivals_done=True)


def test_a_start_resets_the_stall_count() -> None:
    """One device, six queued jobs run one after another: every completion is a stalled point, but
    the policy starts the next job each time, so the run never deadlocks (issue 11, item 1)."""
    stall = StallCounter()
    for _ in range(6):
        assert not stall.at_point(STALLED)
        stall.on_applied(Applied(started=[0]))
    assert stall.points == 0


def test_a_policy_that_starts_nothing_deadlocks_after_the_limit() -> None:
    stall = StallCounter(limit=3)
    assert [stall.at_point(STALLED) for _ in range(4)] == [False, False, False, True]
    stall.on_applied(Applied())  # an empty batch changes nothing
    assert stall.points == 4
    assert not stall.at_point(RunSnapshot(running=1, pending=5, arrivals_done=True)) and stall.points == 0


def test_no_stall_while_arrivals_remain_or_a_gpu_is_down() -> None:
    stall = StallCounter(limit=1)
    assert not stall.at_point(RunSnapshot(0, 5, arrivals_done=False)) and stall.points == 0
    down = RunSnapshot(0, 5, arrivals_done=True, all_up=False)
    assert not any(stall.at_point(down) for _ in range(5)) and stall.points == 0
    assert dead_end(STALLED) and not dead_end(down) and not dead_end(RunSnapshot(0, 0, True))
    with pytest.raises(ValueError, match="StallCounter.limit"):
        StallCounter(limit=0)


def test_record_counting_and_deadline() -> None:
    rec = JobRecord(Job(7, 1.0, 1, 10.0, "resnet50", deadline_s=5.0))
    assert count_started(rec, 2.0) is False and rec.first_start_s == 2.0 and rec.restarts == 0
    count_preempted(rec)
    assert count_started(rec, 3.0) is True and rec.first_start_s == 2.0 and rec.restarts == 1
    count_migrated(rec)
    count_started(rec, 4.0)
    count_finished(rec, 5.0)
    assert (rec.preemptions, rec.migrations, rec.restarts, rec.finish_s, rec.deadline_met) == (1, 1, 2, 5.0, True)
    late = JobRecord(Job(8, 0.0, 1, 10.0, "resnet50", deadline_s=5.0))
    count_finished(late, 5.5)
    assert late.deadline_met is False
    none = JobRecord(Job(9, 0.0, 1, 10.0, "resnet50"))
    count_finished(none, 1.0)
    assert none.deadline_met is None


def _records() -> list[JobRecord]:
    recs = [JobRecord(Job(i, 1.0 + i, 1, 10.0, "resnet50")) for i in range(4)]
    recs.append(JobRecord(Job(4, 0.5, 1, 10.0, "resnet50", tracked=False)))  # background, never finishes
    for r, f in zip(recs[:2], (4.0, 9.0), strict=True):
        r.finish_s = f
    return recs


def test_outcome_names_the_unfinished_tracked_jobs() -> None:
    recs = _records()
    assert run_outcome(recs, deadlocked=True) == RunOutcome("deadlocked", (2, 3))
    out = run_outcome(recs, deadlocked=False)
    assert out.status == "incomplete" and not out.complete
    assert out.describe() == "incomplete: 2 tracked job(s) unfinished (ids 2, 3)"
    for r in recs[2:4]:
        r.finish_s = 10.0
    assert run_outcome(recs, deadlocked=False) == RunOutcome("complete", ())
    with pytest.raises(ValueError, match="RunOutcome"):
        RunOutcome("complete", (1,))
    with pytest.raises(ValueError, match="RunOutcome.status"):
        RunOutcome("done", ())


def test_assemble_result() -> None:
    res = assemble_result(_records(), n_gpus=2, end_s=12.0, energy_j=100.0, busy_gpu_s=8.0, idle_floor_j=5.0,
                          extra={"deadlocked": 1.0})
    assert res.makespan_s == 8.5 and res.span_s == 11.5  # first arrival 0.5 (untracked) to 9.0 / to 12.0
    assert [r.job.job_id for r in res.records] == [0, 1, 2, 3, 4] and res.extra == {"deadlocked": 1.0}
    assert (res.n_gpus, res.energy_j, res.busy_gpu_s, res.idle_floor_j) == (2, 100.0, 8.0, 5.0)
    empty = assemble_result([], 1, 0.0, 0.0, 0.0, 0.0)
    assert empty.makespan_s == 0.0 and empty.span_s == 0.0
