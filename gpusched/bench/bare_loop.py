"""The floor a simulator's speed is measured against: a bare heap event loop replaying a trace.

:func:`replay` pushes every job's arrival onto a ``heapq`` and pops events in time order; an arrival
pushes the job's completion (arrival + its run time alone: ``work_iters`` x the model's base
iteration time), a completion counts the job. No queue, no placement, no speeds: what is left is the
cost of the events themselves. ``gpusched-bench perf=true`` times it on the same jobs and on the
same core as each policy and prints the ratio.
"""

from __future__ import annotations

import heapq
import statistics
import time

from gpusched_env.catalog import base_iter_s
from gpusched_env.types import Job


def replay(jobs: list[Job]) -> tuple[int, float]:
    """Run the bare loop over ``jobs``; (jobs completed, time of the last event)."""
    heap: list[tuple[float, int, int]] = [(j.arrival_s, 0, i) for i, j in enumerate(jobs)]
    heapq.heapify(heap)
    runtime = [j.work_iters * base_iter_s(j.model) for j in jobs]
    done, now = 0, 0.0
    while heap:
        now, kind, i = heapq.heappop(heap)
        if kind == 0:
            heapq.heappush(heap, (now + runtime[i], 1, i))
        else:
            done += 1
    return done, now


def time_replay(jobs: list[Job], repeats: int = 3) -> tuple[float, float]:
    """Median (wall seconds, CPU seconds) of :func:`replay` over ``repeats`` runs."""
    walls, cpus = [], []
    for _ in range(max(1, repeats)):
        t0, c0 = time.perf_counter(), time.process_time()
        replay(jobs)
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    return statistics.median(walls), statistics.median(cpus)
