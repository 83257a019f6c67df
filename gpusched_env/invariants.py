"""Invariants every backend must keep, checked at every event by :class:`InvariantChecker`.

Used by the simulator's tests and the real backend's tests alike: no GPU over-committed (jobs per
GPU and memory within capacity), bookkeeping consistent, time never goes back, every job finishes
exactly once, energy never below the idle floor.
"""

from __future__ import annotations

import numpy as np

from gpusched_env.allocation import ClusterState


class InvariantViolation(AssertionError):
    pass


class InvariantChecker:
    def __init__(self) -> None:
        self.last_t = float("-inf")
        self.finished: set[int] = set()
        self.checks = 0

    def check(self, state: ClusterState, now: float, energy_j: float, idle_floor_j: float) -> None:
        self.checks += 1
        if now < self.last_t:
            raise InvariantViolation(f"time went back from {self.last_t} to {now}")
        self.last_t = now
        topo = state.topology
        counted = [0] * topo.n_gpus
        mem = [0.0] * topo.n_gpus
        for jid, alloc in state.running.items():
            if jid in self.finished:
                raise InvariantViolation(f"job {jid} runs after it finished")
            job = state.jobs[jid]
            for g in alloc.gpus:
                counted[g] += 1
                mem[g] += job.mem_gb
                if not state.up[g]:
                    raise InvariantViolation(f"job {jid} runs on GPU {g}, which is down")
        for g in range(topo.n_gpus):
            if counted[g] != state.n_resident[g] or counted[g] != len(state.resident[g]):
                raise InvariantViolation(f"GPU {g}: bookkeeping says {state.n_resident[g]} jobs, found {counted[g]}")
            if counted[g] > state.max_jobs_per_gpu:
                raise InvariantViolation(f"GPU {g} over-committed: {counted[g]} jobs")
            if mem[g] > topo.gpu_mem_gb[g] + 1e-6:
                raise InvariantViolation(f"GPU {g} memory {mem[g]:.1f} GB > {topo.gpu_mem_gb[g]:.1f} GB")
        free = (state.n_resident == 0) & state.up
        if not np.array_equal(free, state.free_mask) or state.n_free != int(np.count_nonzero(free)):
            raise InvariantViolation(f"free GPUs: bookkeeping says {state.n_free}, found {int(np.count_nonzero(free))}")
        for job in state.pending:
            if job.job_id in state.running:
                raise InvariantViolation(f"job {job.job_id} is both queued and running")
        if energy_j + 1e-6 * max(1.0, idle_floor_j) < idle_floor_j:
            raise InvariantViolation(f"energy {energy_j:.1f} J below the idle floor {idle_floor_j:.1f} J")

    def on_finish(self, job_id: int) -> None:
        if job_id in self.finished:
            raise InvariantViolation(f"job {job_id} finished twice")
        self.finished.add(job_id)

    def check_all_finished(self, job_ids: list[int]) -> None:
        missing = sorted(set(job_ids) - self.finished)
        if missing:
            raise InvariantViolation(f"{len(missing)} job(s) never finished: {missing[:10]}")
