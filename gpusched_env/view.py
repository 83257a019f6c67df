"""The read-only view of a cluster that every policy receives, from any backend."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import NamedTuple

import numpy as np

from gpusched_env.allocation import Allocation, ClusterState, readonly
from gpusched_env.topology import Topology
from gpusched_env.types import Job


class JobProgress(NamedTuple):
    """Dynamic state of one job, as the backend knows it now (a named tuple: made at every
    ``view.progress`` call, so it is cheap to build)."""

    done_iters: float
    remaining_iters: float  # oracle knowledge (SRTF uses it; documented)
    attained_gpu_s: float  # GPU-seconds of service so far (LAS, Tiresias)
    iters_per_s: float  # current measured speed; 0 when not running
    restarts: int


class ClusterView:
    """What a policy may read: time, topology, per-GPU load, queue, running jobs, progress.

    Arrays are read-only views of the backend's state (valid during one ``decide`` call).
    ``slowdown`` is the scheduler-visible per-GPU, per-class slowdown profile (n_gpus x 4),
    e.g. from a variability profiling run; the backend's true speeds may differ.
    """

    __slots__ = ("_state", "now", "slowdown", "_progress", "_power_w", "_util", "_attained")

    # Arrays passed in should already be read-only views (see :func:`readonly`): the view keeps them
    # as they are, so building a view costs no copies.

    def __init__(
        self,
        state: ClusterState,
        now: float,
        slowdown: np.ndarray,
        progress: Callable[[int], JobProgress],
        gpu_power_w: np.ndarray | None = None,
        gpu_util: np.ndarray | None = None,
        attained: Callable[[int], float] | None = None,
    ) -> None:
        self._state = state
        self.now = now
        self.slowdown = slowdown if not slowdown.flags.writeable else readonly(slowdown)
        self._progress = progress
        n = state.topology.n_gpus
        self._power_w = gpu_power_w if gpu_power_w is not None else readonly(np.zeros(n))
        self._util = gpu_util if gpu_util is not None else readonly(np.zeros(n))
        self._attained = attained  # optional fast path of progress(id).attained_gpu_s

    @property
    def topology(self) -> Topology:
        return self._state.topology

    @property
    def n_gpus(self) -> int:
        return self._state.topology.n_gpus

    @property
    def free(self) -> np.ndarray:
        """(n_gpus,) bool: up and holding no job."""
        try:  # (the state's read-only view once made: no call)
            return self._state._ro["free_mask"]
        except KeyError:
            return self._state.readonly("free_mask")

    @property
    def n_free(self) -> int:
        """GPUs up and holding no job."""
        return self._state.n_free

    @property
    def up(self) -> np.ndarray:
        try:
            return self._state._ro["up"]
        except KeyError:
            return self._state.readonly("up")

    @property
    def n_resident(self) -> np.ndarray:
        try:
            return self._state._ro["n_resident"]
        except KeyError:
            return self._state.readonly("n_resident")

    @property
    def mem_used_gb(self) -> np.ndarray:
        """(n_gpus,) memory held by resident jobs."""
        return self._state.readonly("mem_used")

    @property
    def mem_free_gb(self) -> np.ndarray:
        return self._state.topology.gpu_mem_gb - self._state.mem_used

    @property
    def share_used(self) -> np.ndarray:
        """(n_gpus,) sum of the requested GPU fractions of resident jobs."""
        return self._state.readonly("share_used")

    @property
    def gpu_util(self) -> np.ndarray:
        """(n_gpus,) current utilisation in [0, 1] (model or telemetry)."""
        return self._util

    @property
    def gpu_power_w(self) -> np.ndarray:
        return self._power_w

    @property
    def max_jobs_per_gpu(self) -> int:
        return self._state.max_jobs_per_gpu

    def resident(self, gpu: int) -> tuple[int, ...]:
        return tuple(self._state.resident[gpu])

    @property
    def pending(self) -> Sequence[Job]:
        """Queued jobs in arrival order (do not mutate)."""
        return self._state.pending

    @property
    def pending_ids(self) -> Sequence[int]:
        """Ids of the queued jobs, in the order of :attr:`pending` (do not mutate)."""
        return self._state.pending_ids

    @property
    def enqueued(self) -> Sequence[int]:
        """Ids of the jobs put in the queue so far, in the order they were (arrivals, preemptions,
        failure requeues; a job appears once per time it entered). Only ever grows, so a policy
        that remembers its length finds what entered the queue since (do not mutate)."""
        return self._state.enqueued

    @property
    def pending_gpus(self) -> int:
        """GPUs requested by all queued jobs together."""
        return self._state.pending_gpus

    @property
    def running(self) -> Mapping[int, Allocation]:
        return MappingProxyType(self._state.running)

    def job(self, job_id: int) -> Job:
        return self._state.jobs[job_id]

    def progress(self, job_id: int) -> JobProgress:
        return self._progress(job_id)

    def attained_gpu_s(self, job_id: int) -> float:
        """``progress(job_id).attained_gpu_s`` (the same value; cheaper where the backend provides it:
        LAS and Tiresias key every running job by it at every round)."""
        if self._attained is not None:
            return self._attained(job_id)
        return self._progress(job_id).attained_gpu_s
