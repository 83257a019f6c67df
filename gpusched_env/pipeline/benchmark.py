"""``python -m gpusched_env.pipeline.benchmark``: wall-clock speed of the pipeline level (one core).

Reports medians of ``--repeats`` runs, in CPU time of this process (``time.process_time``): one
M = 384 iteration of each schedule (planning and ZB's stream issue order included, caches cleared first) on the adaptra_14b
job and links (message size, bandwidths, rendezvous, CPU delegates) with 30 ms on link 6, and the
whole adaptra_14b reproduction (all workloads x 5 policies x 3 seeds). Not a test: the targets are
50 ms and 30 s.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace

from gpusched_env.pipeline import bench, streams
from gpusched_env.pipeline.execute import execute
from gpusched_env.pipeline.model import link_delays
from gpusched_env.pipeline.report import load_named
from gpusched_env.pipeline.schedules import SCHEDULES, adaptra, zb


def one_iteration_ms(name: str, microbatches: int = 384, repeats: int = 5) -> float:
    """Median CPU ms of planning + executing one iteration (adaptra_14b's job, M micro-batches,
    30 ms on link 6)."""
    job = replace(load_named("adaptra_14b").job, microbatches=microbatches, activation_limit=microbatches)
    sched = SCHEDULES[name]
    model = sched.model_for(job.model()).with_conditions(link_delay_ms=link_delays(8, {6: 30.0}))
    times = []
    for _ in range(repeats):
        zb._plan.cache_clear()
        adaptra._plan.cache_clear()
        streams._issue_plan.cache_clear()  # ZB's issue order on the per-peer streams
        t0 = time.process_time()
        execute(model, sched.orders(model))
        times.append(1000 * (time.process_time() - t0))
    return statistics.median(times)


def reproduction_s(repeats: int = 3) -> float:
    """Median CPU s of every (workload, policy, seed 0..2) run of adaptra_14b."""
    times = []
    for _ in range(repeats):
        zb._plan.cache_clear()
        adaptra._plan.cache_clear()
        streams._issue_plan.cache_clear()
        t0 = time.process_time()
        scn = load_named("adaptra_14b")
        for w in range(len(scn.workloads)):
            for p in bench.POLICIES:
                for seed in (0, 1, 2):
                    bench.run(scn, p, seed, w)
        times.append(time.process_time() - t0)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args(argv)
    for name in SCHEDULES:
        print(f"one M=384 iteration, {name:8s}: {one_iteration_ms(name, repeats=a.repeats):6.1f} ms (target 50)")
    print(f"adaptra_14b reproduction (5 workloads x 5 policies x 3 seeds): {reproduction_s(a.repeats):.2f} s (target 30)")


if __name__ == "__main__":
    main()
