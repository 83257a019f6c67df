"""The run rules every backend shares: stall detection, how starts, preemptions and migrations count
on a job's record, the deadline check, and how a run's result and status are assembled.

One implementation for the simulator and the real backend, so that the two cannot disagree about
when a run is deadlocked, what a restart is, or whether a run is complete.

How a backend uses it (``gpusched/real/backend.py`` does all of this)::

    stall = StallCounter()                      # one per run
    # at every decision point, before the policy is asked:
    if stall.at_point(RunSnapshot(running, pending, arrivals_done, all_up)):
        deadlocked = True; end the run          # the policy started nothing `limit` times in a row
    # when the backend has no further decision point to offer (simulator: empty event queue;
    # real: no round ticks) the run ends; it ended deadlocked if dead_end(snapshot).
    # after applying a batch (gpusched_env.allocation.Applied):
    stall.on_applied(applied)                   # anything started, moved or stopped: not stalled
    for jid in applied.preempted: count_preempted(records[jid])   # also a job requeued by a failure
    for jid in applied.migrated:  count_migrated(records[jid])
    for jid in applied.migrated + applied.started: count_started(records[jid], now)  # -> restarted?
    # when a job completes:
    count_finished(records[jid], now)           # finish_s and deadline_met
    # at the end:
    result = assemble_result(records, n_gpus, end_s, energy_j, busy_gpu_s, idle_floor_j, timeline, extra)
    outcome = run_outcome(result.records, deadlocked)   # status + unfinished tracked job ids

Snapshot fields in the simulator: ``running=len(self.runs)``, ``pending=len(self.state.pending)``,
``arrivals_done=self._arrivals_done``, ``all_up=self.state.all_up``. (Its ``_stalled`` also reset
the counter only once every tracked job had arrived; here any arrival still to come resets it.)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpusched_env.allocation import Applied
from gpusched_env.metrics import RunResult, Timeline
from gpusched_env.types import Job, JobRecord

STALL_LIMIT = 3
"""Decision points in a row at which nothing runs, nothing more arrives and the policy starts
nothing, after which the run is declared deadlocked (the simulator's rule)."""

DEADLINE_TOL_S = 1e-9

RUN_STATUSES: tuple[str, ...] = ("complete", "deadlocked", "incomplete")


@dataclass(frozen=True, slots=True)
class RunSnapshot:
    """What stall detection needs to know about a run at one instant.

    running: jobs holding GPUs. pending: jobs in the queue. arrivals_done: every job (tracked or not)
    has been submitted. all_up: every GPU is up (a GPU that is down will come back: not a stall).
    """

    running: int
    pending: int
    arrivals_done: bool
    all_up: bool = True

    @property
    def stalled(self) -> bool:
        """Nothing runs, jobs wait, and no arrival can change that."""
        return self.running == 0 and self.pending > 0 and self.arrivals_done


@dataclass(slots=True)
class StallCounter:
    """Counts consecutive stalled decision points; see the module docstring for its use."""

    limit: int = STALL_LIMIT
    points: int = 0

    def __post_init__(self) -> None:
        if self.limit < 1:
            raise ValueError(f"StallCounter.limit must be >= 1, got {self.limit}")

    def at_point(self, s: RunSnapshot) -> bool:
        """Count one decision point; True when the run is deadlocked (``limit`` exceeded)."""
        if not s.stalled:
            self.points = 0
            return False
        if s.all_up:
            self.points += 1
        return self.points > self.limit

    def on_applied(self, applied: Applied) -> None:
        """A batch that started, moved or stopped a job ends any stall."""
        if not applied.touched_gpus_empty:
            self.points = 0


def dead_end(s: RunSnapshot) -> bool:
    """True when a run that has no further decision point ends deadlocked (jobs wait for nothing)."""
    return s.stalled and s.all_up


def count_started(rec: JobRecord, now: float) -> bool:
    """Record a start (or resume) at ``now``; True when it is a restart (counted in ``restarts``)."""
    restarted = rec.first_start_s is not None
    if restarted:
        rec.restarts += 1
    else:
        rec.first_start_s = now
    return restarted


def count_preempted(rec: JobRecord) -> None:
    """A running job was taken off its GPUs and requeued (by the policy or by a failure)."""
    rec.preemptions += 1


def count_migrated(rec: JobRecord) -> None:
    """A running job moved to other GPUs (its restart is counted by :func:`count_started`)."""
    rec.migrations += 1


def deadline_met(job: Job, finish_s: float) -> bool | None:
    """Whether ``job`` finishing at ``finish_s`` met its deadline; None when it has none."""
    if job.deadline_s is None:
        return None
    return finish_s <= job.deadline_s + DEADLINE_TOL_S


def count_finished(rec: JobRecord, now: float) -> None:
    """Record completion at ``now`` and whether the deadline was met."""
    rec.finish_s = now
    rec.deadline_met = deadline_met(rec.job, now)


def unfinished_tracked(records: Sequence[JobRecord]) -> tuple[int, ...]:
    """Ids of the tracked jobs without a finish time, ascending."""
    return tuple(sorted(r.job.job_id for r in records if r.job.tracked and r.finish_s is None))


@dataclass(frozen=True, slots=True)
class RunOutcome:
    """How a run ended. status: ``complete`` (every tracked job finished), ``deadlocked`` (stopped by
    the stall rule or a dead end) or ``incomplete`` (stopped otherwise, e.g. a time limit);
    unfinished: the tracked job ids that did not finish."""

    status: str
    unfinished: tuple[int, ...]

    def __post_init__(self) -> None:
        if self.status not in RUN_STATUSES:
            raise ValueError(f"RunOutcome.status must be one of {RUN_STATUSES}, got {self.status!r}")
        if (self.status == "complete") != (not self.unfinished):
            raise ValueError(f"RunOutcome: status {self.status!r} with unfinished jobs {list(self.unfinished)}")

    @property
    def complete(self) -> bool:
        return self.status == "complete"

    def describe(self) -> str:
        """One line: ``complete``, or the status and the unfinished job ids."""
        return describe(self.status, self.unfinished)


def describe(status: str, unfinished: Sequence[int]) -> str:
    """One line: ``status``, followed by the unfinished job ids (the first 20) when there are any."""
    if not unfinished:
        return status
    ids = ", ".join(map(str, unfinished[:20])) + (", ..." if len(unfinished) > 20 else "")
    return f"{status}: {len(unfinished)} tracked job(s) unfinished (ids {ids})"


def run_outcome(records: Sequence[JobRecord], deadlocked: bool) -> RunOutcome:
    """The outcome of a run whose records are ``records``; ``deadlocked``: the backend's flag."""
    unfinished = unfinished_tracked(records)
    if not unfinished:
        return RunOutcome("complete", ())
    return RunOutcome("deadlocked" if deadlocked else "incomplete", unfinished)


def assemble_result(
    records: Sequence[JobRecord], n_gpus: int, end_s: float, energy_j: float, busy_gpu_s: float,
    idle_floor_j: float, timeline: Timeline | None = None, extra: dict[str, float] | None = None,
) -> RunResult:
    """The :class:`RunResult` of a run that ended at ``end_s`` (backend clock).

    makespan: first arrival (of any job) to the last tracked completion (0 when none finished);
    span: first arrival to ``end_s``.
    """
    first = min((r.job.arrival_s for r in records), default=0.0)
    finishes = [r.finish_s for r in records if r.job.tracked and r.finish_s is not None]
    makespan = max(0.0, max(finishes) - first) if finishes else 0.0
    return RunResult(
        records=list(records), n_gpus=n_gpus, makespan_s=makespan, energy_j=energy_j, busy_gpu_s=busy_gpu_s,
        idle_floor_j=idle_floor_j, timeline=timeline, extra=dict(extra or {}), span_s=max(0.0, end_s - first),
    )
