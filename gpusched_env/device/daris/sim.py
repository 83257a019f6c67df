"""Stage-level discrete-event model of one GPU running periodic DNN jobs (DARIS and its baselines).

The GPU's SMs are cut into partitions (MPS contexts or GSlice shares), each with a number of slots
(streams). A scheduler launches *work* (one stage of a job, a whole job, or a batch of jobs) onto a
partition slot. Speeds (choices, documented in docs/DEVICE_MODEL.md): the work of a partition's k
running items shares its n SMs (n / k each); when the busy partitions hold more SMs than the GPU
has (oversubscription), every one is scaled by N / Σ n; an item on n SMs runs at the SGPRS curve's
``speed(n)``. No cap on the GPU's total throughput: what it delivers follows the partitions, their
slots and the scheduler's admission. Between events nothing changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from gpusched_env.device.daris.models import speed
from gpusched_env.device.daris.taskset import Task, releases

INF = float("inf")
EPS = 1e-12


@dataclass(slots=True)
class Job:
    """One released job (mutable while it runs)."""

    task: int
    release: float
    deadline: float  # absolute
    jitter: float = 1.0  # its duration factor
    stage: int = 0  # next stage to run
    ctx: int = 0  # partition it runs in
    vdl: float = 0.0  # absolute virtual deadline of its current stage (DARIS)
    delayed: bool = False  # its previous stage ended after that stage's virtual deadline
    admitted: bool = True


@dataclass(slots=True)
class Work:
    """Work running on a partition slot: ``left`` seconds of whole-GPU alone time."""

    jobs: list[Job]
    part: int
    left: float
    serial: float
    whole: bool  # the jobs finish with it (else one stage of one job)
    start: float = 0.0
    rate: float = 0.0


@dataclass(frozen=True, slots=True)
class Partition:
    sms: int
    slots: int


@dataclass
class ClassStats:
    released: int = 0
    admitted: int = 0
    completed: int = 0
    late: int = 0  # completed after the deadline, or past the deadline unfinished at the end
    due: int = 0  # admitted jobs whose deadline is within the run
    response_s: list[float] = field(default_factory=list)


class StageScheduler(Protocol):
    name: str

    def reset(self, sim: StageSim) -> list[Partition]:
        """Start of a run; returns the GPU's partitions."""

    def on_release(self, t: float, job: Job) -> None:
        """A job was released (set ``job.admitted = False`` to skip it)."""

    def on_stage_done(self, t: float, job: Job, work: Work) -> None:
        """One stage of an unfinished job ended."""

    def on_job_done(self, t: float, job: Job, work: Work) -> None:
        """A job finished."""

    def dispatch(self, t: float) -> None:
        """Launch work onto free slots (``sim.launch``)."""


class StageSim:
    """One GPU, its periodic tasks and a stage scheduler; :meth:`advance` + :meth:`dispatch` by event."""

    def __init__(self, tasks: Sequence[Task], sched: StageScheduler, horizon_s: float, total_sms: int,
                 seed: np.random.SeedSequence, jitter: float = 0.05) -> None:
        if not horizon_s > 0:
            raise ValueError(f"duration_s must be in (0, inf), got {horizon_s}")
        if not 0.0 <= jitter < 1.0:
            raise ValueError(f"jitter must be in [0, 1), got {jitter}")
        self.tasks, self.sched, self.horizon, self.N = list(tasks), sched, horizon_s, total_sms
        self.rel = releases(self.tasks, horizon_s)
        self.jit = np.random.default_rng(seed).uniform(1.0 - jitter, 1.0 + jitter, len(self.rel)).tolist()
        self.t, self.ri = 0.0, 0
        self.running: list[Any] = []
        self.stats = {True: ClassStats(), False: ClassStats()}
        self._pending: dict[int, Job] = {}  # admitted jobs due within the run, not yet finished
        self.parts = sched.reset(self)
        if len(self.parts) > total_sms:
            raise ValueError(f"partitions must be at most the GPU's {total_sms} SMs in number, got {len(self.parts)}")
        self.busy = [0] * len(self.parts)
        self.done = False

    # -- the event loop -------------------------------------------------------------------------
    def run(self) -> StageSim:
        while self.advance():
            self.sched.dispatch(self.t)
        return self

    def next_time(self) -> float:
        t = self.rel[self.ri][0] if self.ri < len(self.rel) else INF
        for w in self.running:
            if w.rate > 0:
                t = min(t, self.t + w.left / w.rate)
        return min(t, self.horizon)

    def advance(self) -> bool:
        """Move to the next event and handle it; False once the horizon is reached."""
        if self.done:
            return False
        tn = self.next_time()
        dt = tn - self.t
        for w in self.running:
            w.left -= w.rate * dt
        self.t = tn
        if tn >= self.horizon:
            self._close()
            return False
        finished = [w for w in self.running if w.left <= EPS]
        if finished:
            self.running = [w for w in self.running if w.left > EPS]
            for w in finished:
                self.busy[w.part] -= 1
                self._finish(w)
            self._rerate()
        while self.ri < len(self.rel) and self.rel[self.ri][0] <= tn + EPS:
            self._release(*self.rel[self.ri], self.jit[self.ri])
            self.ri += 1
        return True

    def launch(self, part: int, jobs: list[Job], work_s: float, serial: float, whole: bool) -> None:
        """Start work on a free slot of partition ``part``."""
        if self.busy[part] >= self.parts[part].slots:
            raise ValueError(f"partition {part} has no free slot ({self.parts[part].slots} slots)")
        self.busy[part] += 1
        self.running.append(Work(jobs, part, work_s, serial, whole, self.t))
        self._rerate()

    def free(self, part: int) -> int:
        return self.parts[part].slots - self.busy[part]

    def overdue(self) -> int:
        """Admitted jobs due within the run, past their deadline now and still unfinished (each will
        count as ``late`` when it finishes or at the run's end)."""
        return sum(1 for job in self._pending.values() if self.t > job.deadline + EPS)

    # -- internals ------------------------------------------------------------------------------
    def _release(self, t: float, i: int, jit: float) -> None:
        tk = self.tasks[i]
        job = Job(i, t, t + tk.deadline_s, jit)
        st = self.stats[tk.high]
        st.released += 1
        self.sched.on_release(t, job)
        if job.admitted:
            st.admitted += 1
            if job.deadline <= self.horizon + EPS:
                st.due += 1
                self._pending[id(job)] = job

    def _finish(self, w: Work) -> None:
        for job in w.jobs:
            job.stage = self.tasks[job.task].model.stages if w.whole else job.stage + 1
            if job.stage < self.tasks[job.task].model.stages:
                self.sched.on_stage_done(self.t, job, w)
                continue
            st = self.stats[self.tasks[job.task].high]
            st.completed += 1
            st.response_s.append(self.t - job.release)
            if self._pending.pop(id(job), None) is not None and self.t > job.deadline + EPS:
                st.late += 1
            self.sched.on_job_done(self.t, job, w)

    def _close(self) -> None:
        self.done = True
        for job in self._pending.values():  # due in the run, never finished: missed
            self.stats[self.tasks[job.task].high].late += 1
        self._pending = {}

    def _rerate(self) -> None:
        if not self.running:
            return
        k = [0] * len(self.parts)
        for w in self.running:
            k[w.part] += 1
        held = sum(p.sms for p, n in zip(self.parts, k, strict=True) if n)
        f = min(1.0, self.N / held)
        for w in self.running:
            w.rate = speed(self.parts[w.part].sms * f / k[w.part], self.N, w.serial)
