"""RealBackend: a policy's decisions carried out by real job processes on real devices.

Implements the Backend protocol of :mod:`gpusched_env.policy` with the same :class:`ClusterState`
(allocation + validation) as the simulator, so a policy cannot tell the two apart except by time.
Decision points: a job arrival (``arrival_s * time_scale`` wall seconds after start), a job
completion (its process exited after its last iteration) or a round tick. Preemption = checkpoint
(SIGUSR1), then SIGTERM; migration = preemption + resume on the new devices. When a run stalls, how
starts and preemptions count, the deadline check and the result are the simulator's rules
(:mod:`gpusched_env.run_rules`); :meth:`RealBackend.outcome` says whether every tracked job finished.

Everything lands in the run folder: ``jobs/<id>/`` (spec, progress, checkpoint, log),
``telemetry.csv``, ``commands.jsonl``, ``mps/``. :meth:`close` (also on error or signal) stops every
job process, stops the MPS daemon this backend started, and leaves :meth:`result` readable.
"""

from __future__ import annotations

import csv
import dataclasses
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np

from gpusched.real.devices import TELEMETRY_FIELDS, Devices
from gpusched.real.launcher import JobHandle, NodeAgent
from gpusched.real.models import ModelSize
from gpusched.real.mps import MPS_CONTEXT_MB, MpsDaemon
from gpusched.real.worker import EXIT_DONE, WorkerSpec
from gpusched_env.allocation import ClusterState, readonly
from gpusched_env.invariants import InvariantChecker
from gpusched_env.metrics import RunResult, Timeline
from gpusched_env.policy import Backend
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
    unfinished_tracked,
)
from gpusched_env.topology import Topology
from gpusched_env.types import Decision, Job, JobRecord
from gpusched_env.view import ClusterView, JobProgress


@dataclass(frozen=True)
class RealConfig:
    """Backend knobs (``real.*`` in conf/real/config.yaml)."""

    poll_s: float = 0.05
    telemetry_s: float = 0.5
    time_scale: float = 1.0  # wall seconds per scenario second (arrivals)
    stop_grace_s: float = 5.0
    ckpt_timeout_s: float = 30.0
    max_wall_s: float = 3600.0  # the run stops here, ``incomplete`` if tracked jobs are left
    max_failures: int = 2
    mps: bool = True
    # device memory an MPS client needs beyond its job's own mem_gb, added to its pinned-memory limit;
    # MPS_CONTEXT_MB (gpusched/real/mps.py) says where the default was measured
    mps_context_mb: float = MPS_CONTEXT_MB
    report_every_s: float = 0.2
    lr: float = 0.01

    def __post_init__(self) -> None:
        for k in ("poll_s", "telemetry_s", "time_scale", "max_wall_s"):
            if getattr(self, k) <= 0:
                raise ValueError(f"real.{k} must be > 0, got {getattr(self, k)}")
        if not self.mps_context_mb >= 0:
            raise ValueError(f"real.mps_context_mb must be >= 0 (MB), got {self.mps_context_mb}")


@dataclass
class _JobState:
    record: JobRecord
    seed: int
    handle: JobHandle | None = None
    done_iters: int = 0
    rate: float = 0.0
    last: tuple[float, int] | None = None  # (time, iter) of the previous progress record
    attained_gpu_s: float = 0.0
    launches: int = 0
    failures: int = 0
    ready: bool = False
    startup_s: list[float] = field(default_factory=list)


class RealBackend:
    """Runs ``jobs`` as processes on ``devices`` via ``agent``; see the module docstring."""

    def __init__(
        self,
        topology: Topology,
        jobs: list[Job],
        sizes: dict[str, ModelSize],
        devices: Devices,
        agent: NodeAgent,
        run_dir: Path,
        seed: int,
        cfg: RealConfig | None = None,
        mps: MpsDaemon | None = None,
        slowdown: np.ndarray | None = None,
        max_jobs_per_gpu: int = 4,
        checker: InvariantChecker | None = None,
    ) -> None:
        self.cfg = cfg or RealConfig()
        if topology.n_gpus != devices.n:
            raise ValueError(f"cluster has {topology.n_gpus} GPUs but real.devices gives {devices.n} devices")
        for j in jobs:
            if j.model not in sizes:
                raise ValueError(f"job {j.job_id}: model {j.model!r} has no entry in real.models")
        self.topology = topology
        self.devices = devices
        self.agent = agent
        self.run_dir = Path(run_dir)
        self.mps = mps if self.cfg.mps else None
        self.sizes = sizes
        scale = self.cfg.time_scale
        self.jobs = sorted((_scaled(j, scale) for j in jobs), key=lambda j: (j.arrival_s, j.job_id))
        seeds = np.random.SeedSequence(seed).spawn(len(self.jobs))
        self.js: dict[int, _JobState] = {
            j.job_id: _JobState(JobRecord(j), int(s.generate_state(1)[0])) for j, s in zip(self.jobs, seeds, strict=True)
        }
        self.state = ClusterState(topology, max_jobs_per_gpu)
        n = topology.n_gpus
        self.slowdown = np.ones((n, 4)) if slowdown is None else np.asarray(slowdown, dtype=float)
        if self.slowdown.shape != (n, 4):
            raise ValueError(f"real.profile_path: slowdown profile has shape {self.slowdown.shape}, expected ({n}, 4)")
        self.power_w = np.zeros(n)
        self.util = np.zeros(n)
        self.energy_j = np.zeros(n)
        self.timeline = Timeline()
        self.busy_gpu_s = 0.0
        self._next_arrival = 0
        self._t0: float | None = None
        self._wall0 = 0.0
        self._acc_t = 0.0
        self._now_view = 0.0
        self._next_sample = 0.0
        self._sample_t = 0.0
        self._round_s: float | None = None
        self._events = True
        self._next_round = float("inf")
        self._end_t: float | None = None
        self._csv_file: IO[str] | None = None
        self._csv: Any = None
        self.closed = False
        self.interrupted = False
        self.checker = checker
        self.deadlocked = False
        self.timed_out = False
        self.stall = StallCounter()

    # -- clock -------------------------------------------------------------------------------
    def now(self) -> float:
        assert self._t0 is not None, "RealBackend.start() was not called"
        return time.monotonic() - self._t0

    # -- Backend protocol --------------------------------------------------------------------
    def start(self, round_s: float | None, events: bool) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._round_s, self._events = round_s, events
        self._csv_file = open(self.run_dir / "telemetry.csv", "w", newline="")
        self._csv = csv.writer(self._csv_file)
        self._csv.writerow(TELEMETRY_FIELDS)
        self._csv_file.flush()
        if self.mps is not None:
            self.mps.start()
        self._t0 = time.monotonic()
        self._wall0 = time.time()
        self._next_round = round_s if round_s else float("inf")
        self._sample(0.0)

    def advance(self) -> bool:
        while True:
            now = self.now()
            self._account(now)
            changed = self._poll_jobs(now)
            arrived = self._admit(now)
            if now >= self._next_sample:
                self._sample(now)
            self._check(now)
            if self._next_arrival >= len(self.jobs) and not unfinished_tracked(self._records()):
                return self._end(now, deadlocked=False)
            if now > self.cfg.max_wall_s:
                self.timed_out = True
                return self._end(now, deadlocked=False)
            if self._tick(now) or (self._events and (changed or arrived)):
                if self.stall.at_point(self._snapshot()):
                    return self._end(now, deadlocked=True)  # the policy keeps starting nothing
                self._now_view = now
                return True
            if self._round_s is None and dead_end(self._snapshot()):
                return self._end(now, deadlocked=True)  # no tick and no event can come: nothing will start
            time.sleep(self.cfg.poll_s)

    def _tick(self, now: float) -> bool:
        """True when a round boundary has passed (and move to the next one)."""
        if now < self._next_round:
            return False
        assert self._round_s is not None
        while self._next_round <= now:
            self._next_round += self._round_s
        return True

    def _snapshot(self) -> RunSnapshot:
        return RunSnapshot(len(self.state.running), len(self.state.pending), self._next_arrival >= len(self.jobs),
                           self.state.all_up)

    def _end(self, now: float, deadlocked: bool) -> bool:
        self.deadlocked = deadlocked
        self._end_t = now
        self._sample(now)
        return False

    def view(self) -> ClusterView:
        return ClusterView(self.state, self._now_view, readonly(self.slowdown), self._progress, readonly(self.power_w),
                           readonly(self.util))

    def apply(self, decisions: list[Decision]) -> None:
        now = self.now()
        self._account(now)
        applied = self.state.apply(decisions, now)  # validates everything first; raises InvalidDecision
        self.stall.on_applied(applied)
        for jid in applied.preempted:
            self._stop(jid)
            count_preempted(self.js[jid].record)
        for jid in applied.migrated:
            self._stop(jid)
            count_migrated(self.js[jid].record)
        for jid in [*applied.migrated, *applied.started]:
            self._launch(jid, now)
        self._check(now)
        self.timeline.add(now, self._busy(), float(self.power_w.sum()))

    def _check(self, now: float) -> None:
        if self.checker is not None:
            self.checker.check(self.state, now, float(self.energy_j.sum()),
                               self.devices.idle_w * self.devices.n * self._sample_t)

    # -- jobs --------------------------------------------------------------------------------
    def _launch(self, jid: int, now: float) -> None:
        st = self.js[jid]
        job = st.record.job
        alloc = self.state.running[jid]
        env = self.devices.placement_env(alloc.gpus, alloc.sharing.sm_share)
        if self.mps is not None:
            env.update(self.mps.client_env(len(alloc.gpus), alloc.sharing.sm_share, job.mem_gb, job.priority))
        d = self.run_dir / "jobs" / str(jid)
        d.mkdir(parents=True, exist_ok=True)
        spec = WorkerSpec(
            job_id=jid, model=job.model, size=dataclasses.asdict(self.sizes[job.model]),
            total_iters=int(round(job.work_iters)), seed=st.seed, checkpoint=str(d / "ckpt.pt"),
            progress=str(d / "progress.jsonl"), lr=self.cfg.lr, report_every_s=self.cfg.report_every_s,
        )
        st.handle = self.agent.launch(spec, env, st.launches)
        count_started(st.record, now)
        st.launches += 1
        st.ready = False
        st.last = None
        st.rate = 0.0

    def _stop(self, jid: int) -> None:
        """Checkpoint (SIGUSR1, wait for the record), then SIGTERM and reap."""
        st = self.js[jid]
        h = st.handle
        assert h is not None
        if st.ready and self.agent.poll(h) is None:
            self.agent.signal(h, signal.SIGUSR1)
            deadline = time.monotonic() + self.cfg.ckpt_timeout_s
            while time.monotonic() < deadline and self.agent.poll(h) is None:
                if any(r["ev"] == "ckpt" for r in self._read(st)):
                    break
                time.sleep(0.02)
        self.agent.signal(h, signal.SIGTERM)
        if self.agent.wait(h, self.cfg.stop_grace_s) is None:
            self.agent.signal(h, signal.SIGKILL)
            self.agent.wait(h, 5.0)
        self._read(st)
        st.handle = None
        st.rate = 0.0

    def _read(self, st: _JobState) -> list[dict[str, Any]]:
        assert st.handle is not None
        recs = self.agent.progress(st.handle)
        for r in recs:
            t = float(r["t"]) - self._wall0
            if r["ev"] == "ready" and not st.ready:
                st.ready = True
                st.startup_s.append(float(r["t"]) - st.handle.spawn_t)
            it = int(r["iter"])
            if st.last is not None and t > st.last[0] and it > st.last[1]:
                st.rate = (it - st.last[1]) / (t - st.last[0])
            if r["ev"] in ("iter", "ready"):
                st.last = (t, it)
            st.done_iters = max(st.done_iters, it) if r["ev"] != "ready" else it
        return recs

    def _poll_jobs(self, now: float) -> bool:
        changed = False
        for jid in list(self.state.running):
            st = self.js[jid]
            if st.handle is None:
                continue
            self._read(st)
            rc = self.agent.poll(st.handle)
            if rc is None:
                continue
            self._read(st)
            changed = True
            job = st.record.job
            log = self.run_dir / "jobs" / str(jid) / "worker.log"
            st.handle = None
            st.rate = 0.0
            if rc == EXIT_DONE and st.done_iters >= int(round(job.work_iters)):
                self.state.finish(jid)
                count_finished(st.record, now)
                if self.checker is not None:
                    self.checker.on_finish(jid)
            else:
                st.failures += 1
                self.state.release(jid)
                if st.failures > self.cfg.max_failures:
                    raise RuntimeError(f"job {jid} exited with code {rc} {st.failures} times; see {log}")
                self.state.requeue(jid)
                count_preempted(st.record)  # taken off its devices and requeued, as a failure in the simulator
        if changed:
            self.timeline.add(now, self._busy(), float(self.power_w.sum()))
        return changed

    def _admit(self, now: float) -> bool:
        arrived = False
        while self._next_arrival < len(self.jobs) and self.jobs[self._next_arrival].arrival_s <= now:
            self.state.submit(self.jobs[self._next_arrival])
            self._next_arrival += 1
            arrived = True
        return arrived

    def _progress(self, jid: int) -> JobProgress:
        st = self.js[jid]
        total = st.record.job.work_iters
        return JobProgress(float(st.done_iters), max(0.0, total - st.done_iters), st.attained_gpu_s, st.rate,
                           st.record.restarts)

    # -- accounting and telemetry -----------------------------------------------------------
    def _busy(self) -> int:
        return int((self.state.n_resident > 0).sum())

    def _account(self, now: float) -> None:
        dt = now - self._acc_t
        if dt <= 0:
            return
        self._acc_t = now
        self.busy_gpu_s += self._busy() * dt
        for jid, alloc in self.state.running.items():
            st = self.js[jid]
            st.attained_gpu_s += len(alloc.gpus) * dt
            st.record.gpu_seconds += len(alloc.gpus) * dt

    def _sample(self, now: float) -> None:
        pids: dict[int, list[int]] = {}
        for jid, alloc in self.state.running.items():
            h = self.js[jid].handle
            if h is not None:
                for g in alloc.gpus:
                    pids.setdefault(g, []).append(h.pid)
        samples = self.devices.sample(now, pids)
        for s in samples:
            de = s.energy_j - self.energy_j[s.device]
            self.energy_j[s.device] = s.energy_j
            self.power_w[s.device] = s.power_w
            self.util[s.device] = s.util
            resident = self.state.resident[s.device]
            if de > 0 and resident:
                shares = [self.state.running[j].sharing.sm_share for j in resident]
                for j, sh in zip(resident, shares, strict=True):
                    self.js[j].record.energy_j += de * sh / sum(shares)
            if self._csv is not None:
                self._csv.writerow(s.row())
        if self._csv_file is not None:
            self._csv_file.flush()
        self._next_sample = now + self.cfg.telemetry_s
        self._sample_t = now

    # -- end ---------------------------------------------------------------------------------
    def close(self) -> None:
        """Stop every job process and the MPS daemon this backend started; idempotent."""
        if self.closed:
            return
        self.closed = True
        try:
            self.agent.stop_all(self.cfg.stop_grace_s)
        finally:
            try:
                if self._t0 is not None and self._csv is not None:
                    now = self.now()
                    self._account(now)
                    if self._end_t is None:
                        self.interrupted = True
                        self._end_t = now
                    self._sample(now)
            finally:
                if self._csv_file is not None:
                    self._csv_file.close()
                    self._csv = None
                try:
                    self.devices.close()
                finally:
                    if self.mps is not None:
                        self.mps.stop()

    def __enter__(self) -> RealBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _records(self) -> list[JobRecord]:
        return [self.js[j.job_id].record for j in self.jobs]

    def result(self) -> RunResult:
        """Records of every job (unfinished ones have no finish time), makespan, energy, busy time."""
        end = self._end_t if self._end_t is not None else (self.now() if self._t0 is not None else 0.0)
        startups = [s for st in self.js.values() for s in st.startup_s]
        extra = {
            "wall_s": float(end),
            "interrupted": float(self.interrupted),
            "deadlocked": float(self.deadlocked),
            "timed_out": float(self.timed_out),
            "avg_startup_s": float(np.mean(startups)) if startups else float("nan"),
        }
        return assemble_result(self._records(), self.topology.n_gpus, float(end), float(self.energy_j.sum()),
                               self.busy_gpu_s, self.devices.idle_w * self.topology.n_gpus * end, self.timeline,
                               extra)

    def outcome(self) -> RunOutcome:
        """``complete``, ``deadlocked`` or ``incomplete``, with the unfinished tracked job ids."""
        return run_outcome(self._records(), self.deadlocked)


def _scaled(job: Job, scale: float) -> Job:
    """``job`` on the wall clock: arrival and deadline times ``scale`` (wall seconds per scenario second)."""
    deadline = None if job.deadline_s is None else job.deadline_s * scale
    return dataclasses.replace(job, arrival_s=job.arrival_s * scale, deadline_s=deadline)


def _as_backend(b: RealBackend) -> Backend:
    """Never called: mypy checks here that RealBackend satisfies the Backend protocol."""
    return b
