"""Queue orders: one sort key per scheduling discipline (Blox style: the order is just a key).

A key maps ``(view, job)`` to a tuple; smaller sorts first. Every key ends with
``(arrival_s, job_id)`` so ties are broken FIFO and the order is total and deterministic.

- :class:`FifoOrder` — arrival order.
- :class:`SjfOrder` — total work = ``work_iters`` x the model's base iteration time (catalogue,
  :mod:`gpusched_env.catalog`). This is **oracle** knowledge of the job length (documented choice;
  the simulator knows it, a real scheduler would not). Unknown models count 1 s per iteration.
- :class:`SrtfOrder` — remaining work = ``view.progress(id).remaining_iters`` x base iteration time
  (**oracle**, documented).
- :class:`LasOrder` — least attained service: ``view.attained_gpu_s(id)`` (GPU-seconds).
- :class:`TiresiasOrder` — discretised two-queue LAS (Tiresias' 2D-LAS with two queues): queue 0
  while attained GPU-seconds < ``threshold_gpu_s`` (default 3600 GPU-s, a documented choice,
  config parameter), queue 1 after; FIFO (arrival) within a queue.
- :class:`AgedMlfqOrder` — multi-level feedback queues on attained GPU-seconds (queue 0 below
  ``threshold_gpu_s``, queue k >= 1 up to ``threshold_gpu_s x factor^k``) and, inside a queue, LAS
  aged by the time since arrival: ``attained - aging x (now - arrival) x num_gpus`` (the only key
  here that moves while a job waits, so it is not ``pending_static``).

``static`` is True when the key depends only on the :class:`Job` (not on progress); schedulers use
it to cache the order between calls. ``pending_static`` is True when the key does not change while
the job waits in the queue (every key here: progress moves only while a job runs), so a scheduler
may key a job once each time it enters the queue. ``is_arrival_order`` is True when the order equals the backend's
pending order (arrival order), which lets FIFO read ``view.pending`` without sorting.
"""

from __future__ import annotations

from typing import Protocol

from gpusched_env.catalog import base_iter_s
from gpusched_env.rounds import ROUND_EPS_S
from gpusched_env.types import Job
from gpusched_env.view import ClusterView

Key = tuple[float, ...]

class OrderKey(Protocol):
    """A queue order: ``key(view, job)``; smaller first."""

    name: str
    static: bool
    pending_static: bool
    is_arrival_order: bool

    def __call__(self, view: ClusterView, job: Job) -> Key: ...


class FifoOrder:
    """First in, first out: ``(arrival_s, job_id)``."""

    name = "fifo"
    static = True
    pending_static = True
    is_arrival_order = True

    def __call__(self, view: ClusterView, job: Job) -> Key:
        return (job.arrival_s, job.job_id)


class SjfOrder:
    """Shortest job first by total work ``work_iters x base_iter_s`` (oracle job length)."""

    name = "sjf"
    static = True
    pending_static = True
    is_arrival_order = False

    def __call__(self, view: ClusterView, job: Job) -> Key:
        return (job.work_iters * base_iter_s(job.model), job.arrival_s, job.job_id)


class SrtfOrder:
    """Shortest remaining time first: ``remaining_iters x base_iter_s`` (oracle remaining work)."""

    name = "srtf"
    static = False
    pending_static = True
    is_arrival_order = False

    def __call__(self, view: ClusterView, job: Job) -> Key:
        rem = view.progress(job.job_id).remaining_iters
        return (rem * base_iter_s(job.model), job.arrival_s, job.job_id)


class LasOrder:
    """Least attained service: attained GPU-seconds, then FIFO."""

    name = "las"
    static = False
    pending_static = True
    is_arrival_order = False

    def __call__(self, view: ClusterView, job: Job) -> Key:
        return (view.attained_gpu_s(job.job_id), job.arrival_s, job.job_id)


class LeasedOrder:
    """``inner``'s order, except that a running job in its first ``lease_s`` seconds since it was
    (re)started comes first, so a preemptive round never takes its GPUs inside that lease (Tiresias's
    lease, as a minimum quantum; 1 ms of slack, as :class:`~gpusched_env.rounds.RoundClock`). Against two
    jobs of equal attained service taking each other's GPUs every round."""

    is_arrival_order = False
    static = False

    def __init__(self, inner: OrderKey, lease_s: float) -> None:
        self.inner, self.lease_s = inner, float(lease_s)
        self.name = inner.name
        self.pending_static = getattr(inner, "pending_static", inner.static)  # a pending job holds no lease

    def __call__(self, view: ClusterView, job: Job) -> Key:
        a = view.running.get(job.job_id)
        leased = a is not None and view.now - a.since_s < self.lease_s - ROUND_EPS_S
        return (0.0 if leased else 1.0, *self.inner(view, job))


class TiresiasOrder:
    """Two-queue discretised LAS: queue 0 below ``threshold_gpu_s`` attained GPU-s, FIFO inside."""

    name = "tiresias"
    static = False
    pending_static = True
    is_arrival_order = False

    def __init__(self, threshold_gpu_s: float = 3600.0) -> None:
        if threshold_gpu_s <= 0:
            raise ValueError(f"tiresias.threshold_gpu_s must be > 0, got {threshold_gpu_s}")
        self.threshold_gpu_s = float(threshold_gpu_s)

    def __call__(self, view: ClusterView, job: Job) -> Key:
        attained = view.attained_gpu_s(job.job_id)
        queue = 0.0 if attained < self.threshold_gpu_s else 1.0
        return (queue, job.arrival_s, job.job_id)


class AgedMlfqOrder:
    """Queues on attained GPU-s at ``threshold_gpu_s x factor^k``; aged LAS inside (see module doc)."""

    name = "mlfq_aged"
    static = False
    pending_static = False
    is_arrival_order = False

    def __init__(self, threshold_gpu_s: float = 3600.0, factor: float = 4.0, aging: float = 0.1) -> None:
        if not threshold_gpu_s > 0:
            raise ValueError(f"mlfq_aged.threshold_gpu_s must be > 0, got {threshold_gpu_s}")
        if not factor > 1:
            raise ValueError(f"mlfq_aged.factor must be > 1, got {factor}")
        if not aging >= 0:
            raise ValueError(f"mlfq_aged.aging must be >= 0 (GPU-s of credit per GPU per second), got {aging}")
        self.threshold_gpu_s = float(threshold_gpu_s)
        self.factor = float(factor)
        self.aging = float(aging)

    def queue(self, attained_gpu_s: float) -> int:
        """The queue of a job with this attained service: 0 below the threshold, then one per factor."""
        q, bound = 0, self.threshold_gpu_s
        while attained_gpu_s >= bound:
            q += 1
            bound *= self.factor
        return q

    def __call__(self, view: ClusterView, job: Job) -> Key:
        attained = view.attained_gpu_s(job.job_id)
        aged = attained - self.aging * (view.now - job.arrival_s) * job.num_gpus
        return (float(self.queue(attained)), aged, job.arrival_s, job.job_id)
