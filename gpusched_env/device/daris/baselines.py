"""DARIS's baselines on the stage model: plain MPS, input batching, GSlice.

- ``mps``: every task is an MPS client (one process, FIFO, one job at a time) sharing all SMs; jobs
  run whole (no stages, no priorities, no admission).
- ``batching``: one stream on the whole GPU; one FIFO queue per model; when the GPU is free the model
  with the oldest waiting job runs a batch of up to 10 of its queued jobs (DEVICE.md: batching up to
  10, the measured batch throughputs); no priorities, no admission.
- ``gslice``: GSlice's fixed spatial MPS partitions, one per model, SMs in proportion to the model's
  offered load (Σ rate × alone time), even and at least 2 (choice: GSlice's self-tuning is replaced by
  this fixed split, DEVICE.md); inside a partition, batching as above. With one model it is batching.
"""

from __future__ import annotations

from collections import deque

from gpusched_env.device.daris.models import MAX_BATCH
from gpusched_env.device.daris.sim import Job, Partition, StageSim, Work


class PlainMps:
    """Policy ``mps``: plain MPS on the stage model (not the kernel-level mechanism
    :class:`gpusched_env.device.mechanisms.mps.Mps`)."""

    name = "mps"

    def reset(self, sim: StageSim) -> list[Partition]:
        self.sim = sim
        self.fifo: list[deque[Job]] = [deque() for _ in sim.tasks]
        self.busy = [False] * len(sim.tasks)
        return [Partition(sim.N, len(sim.tasks))]

    def on_release(self, t: float, job: Job) -> None:
        self.fifo[job.task].append(job)

    def on_stage_done(self, t: float, job: Job, work: Work) -> None:
        raise AssertionError("mps runs whole jobs")

    def on_job_done(self, t: float, job: Job, work: Work) -> None:
        self.busy[job.task] = False

    def dispatch(self, t: float) -> None:
        for i, q in enumerate(self.fifo):
            if q and not self.busy[i]:
                job, m = q.popleft(), self.sim.tasks[i].model
                self.busy[i] = True
                self.sim.launch(0, [job], m.job_s * job.jitter, m.serial, True)


class Batching:
    name = "batching"

    def reset(self, sim: StageSim) -> list[Partition]:
        self.sim = sim
        self.names = list(dict.fromkeys(t.model.name for t in sim.tasks))
        self.fifo: dict[str, deque[Job]] = {n: deque() for n in self.names}
        self.part_of = self._partitions()
        n_parts = max(self.part_of.values()) + 1
        return [Partition(s, 1) for s in self._sms(n_parts)]

    def _partitions(self) -> dict[str, int]:
        return {n: 0 for n in self.names}

    def _sms(self, n_parts: int) -> list[int]:
        return [self.sim.N]

    def on_release(self, t: float, job: Job) -> None:
        self.fifo[self.sim.tasks[job.task].model.name].append(job)

    def on_stage_done(self, t: float, job: Job, work: Work) -> None:
        raise AssertionError("batching runs whole jobs")

    def on_job_done(self, t: float, job: Job, work: Work) -> None:
        return None

    def dispatch(self, t: float) -> None:
        for p in range(len(self.sim.parts)):
            if self.sim.free(p) == 0:
                continue
            queued = [n for n in self.names if self.part_of[n] == p and self.fifo[n]]
            if not queued:
                continue
            name = min(queued, key=lambda n: self.fifo[n][0].release)
            q = self.fifo[name]
            jobs = [q.popleft() for _ in range(min(MAX_BATCH, len(q)))]
            m = self.sim.tasks[jobs[0].task].model
            b = len(jobs)
            work = m.batch_s(b) * sum(j.jitter for j in jobs) / b
            self.sim.launch(p, jobs, work, m.serial, True)


class GSlice(Batching):
    name = "gslice"

    def _partitions(self) -> dict[str, int]:
        return {n: k for k, n in enumerate(self.names)}

    def _sms(self, n_parts: int) -> list[int]:
        load = [sum(t.model.job_s / t.period_s for t in self.sim.tasks if t.model.name == n) for n in self.names]
        total = sum(load)
        sms = [max(2, 2 * round(self.sim.N * x / total / 2)) for x in load]
        while sum(sms) > self.sim.N:  # rounding overshoot: take from the largest
            sms[sms.index(max(sms))] -= 2
        return sms
