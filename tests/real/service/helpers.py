"""Shared pieces of the service tests: resumable shell jobs that record their completion."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from gpusched.real.service.queue import JobQueue
from gpusched.real.service.serve import ServeConfig, Service
from gpusched.real.service.spec import JobSpec, parse_spec

# A resumable shell job: TICKS steps of 0.1 s, its step counter in the checkpoint folder. It follows the
# preemption protocol: on SIGTERM it finishes the step under way, saves it and exits 143. Each step it
# completes appends "id step rank" to DONE.steps, once the step is saved; on completion it appends
# "id restart-count first-step rank world-size" to DONE, once per rank: a launch whose checkpoint is
# already complete records nothing more (a `done.<rank>` file created with noclobber; a one-node
# launch is rank 0, as a job may be placed on one node at one launch and on two at another). The service may
# launch a completed job again, legitimately: a stop that reaches it after its last step but before it
# exits 0, or one that reaches rank 1 of a multi-node job while rank 0 has already finished (the ranks
# share the counter), leaves a launch that was stopped, so the job is queued again; its next launch
# finds the counter at TICKS and must not complete a second time.
# The stop signal reaches the job's whole process group, so it also kills a child the job runs at that
# moment: the counter is read with the `read` builtin (no child), and a `mv` killed before its rename is
# run again (the step is logged only once saved; logged but unsaved, the next launch would repeat it).
TICKS_JOB = (
    'trap "stop=1" TERM; stop=; c="$GPUSCHED_CHECKPOINT_DIR"; t="$c/n.$$"; '
    'n=0; [ -e "$c/n" ] && read n < "$c/n"; first=$n; '
    'while [ "$n" -lt {ticks} ] && [ -z "$stop" ]; do sleep 0.1; n=$((n+1)); '
    'echo $n > "$t"; {{ mv "$t" "$c/n" || [ ! -e "$t" ] || mv "$t" "$c/n"; }} && '
    'echo "$GPUSCHED_JOB_ID $n ${{RANK:--}}" >> {done}.steps; done; '
    '[ -n "$stop" ] && exit 143; '
    'if {{ set -C; true > "$c/done.${{RANK:-0}}"; }} 2>/dev/null; then '
    'echo "$GPUSCHED_JOB_ID $GPUSCHED_RESTART_COUNT $first ${{RANK:--}} ${{WORLD_SIZE:--}}" >> {done}; fi'
)


def ticks_spec(done: Path, ticks: int, gpus: int, hold: Path | None = None, **kw: object) -> JobSpec:
    """``hold``: while that file exists and holds a step number the job has reached, it waits (still
    following the preemption protocol) instead of doing its next step: the test decides when it stops."""
    cmd = TICKS_JOB.format(ticks=ticks, done=done)
    if hold is not None:
        cmd = cmd.replace("do sleep 0.1; n=$((n+1)); ", f'do sleep 0.1; h=; [ -e "{hold}" ] && read h < "{hold}"; '
                          '[ -n "$h" ] && [ "$n" -ge "$h" ] && continue; n=$((n+1)); ')
    return parse_spec({"command": cmd, "shell": True, "gpus": gpus, **kw}, "test")


def hold_at(hold: Path, step: int | None) -> None:
    """Make jobs started with ``hold`` wait once they reach ``step`` (None: never)."""
    tmp = hold.with_name(hold.name + ".tmp")
    tmp.write_text("" if step is None else f"{step}\n")
    tmp.replace(hold)


def done_lines(done: Path) -> list[list[str]]:
    return [x.split() for x in done.read_text().splitlines()] if done.exists() else []


def steps_done(done: Path) -> dict[int, list[int]]:
    """The steps each job completed, in the order they were done, for the jobs whose every step ran as
    a one-node process (the ranks of a multi-node job share one step counter)."""
    out: dict[int, list[int]] = {}
    multi: set[int] = set()
    for job, step, rank in done_lines(done.with_name(done.name + ".steps")):
        out.setdefault(int(job), []).append(int(step))
        if rank != "-":
            multi.add(int(job))
    return {j: s for j, s in out.items() if j not in multi}


def service(out: Path, **kw: object) -> Service:
    base: dict[str, object] = {"out_dir": str(out), "poll_s": 0.05, "grace_s": 2.0, "backoff_s": 0.1,
                               "exit_when_idle": True, "max_wall_s": 60.0}
    return Service(ServeConfig(**{**base, **kw}))  # type: ignore[arg-type]


def submit(out: Path, specs: list[JobSpec]) -> list[int]:
    q = JobQueue(out)
    ids = [q.submit(s) for s in specs]
    q.close()
    return ids


def wait_until(cond: Callable[[], object], what: str) -> None:
    """Wait for a state (not for a time): ``cond()`` true, within 30 s."""
    deadline = time.monotonic() + 30
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def proc_state(pid: int) -> str:
    """The state letter of process ``pid`` (R, S, T stopped, Z exited but not reaped; - gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "-"
