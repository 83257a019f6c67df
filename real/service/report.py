"""``gpusched-real report``: the queue's history as the simulator's metrics (results.json schema)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from gpusched_env.atomic import write_json_atomic
from gpusched_env.metrics import RunResult, compute_metrics, results_document
from gpusched_env.types import JobRecord
from real.service.queue import JobQueue
from real.service.serve import job_of

SCENARIO = "lab_cluster"


def report(out_dir: str | Path, seed: int = 0) -> dict[str, Any]:
    """Write ``out_dir/results.json`` (one policy entry) and return it. Times are seconds since the
    queue was created; cancelled jobs are left out; energy is 0 (no power telemetry is recorded)."""
    q = JobQueue(out_dir)
    try:
        epoch, rows, now = q.epoch(), q.jobs(), time.time()
        n_gpus = sum(int(n["n_devices"]) for n in json.loads(q.meta("nodes") or "[]"))
        policy = q.meta("policy") or "unknown"
    finally:
        q.close()
    records = []
    busy = 0.0
    for r in rows:
        if r.state == "cancelled":
            continue
        running = max(0.0, now - r.started_t) if r.state == "running" and r.started_t else 0.0
        gpu_s = r.gpu_s + running * len(r.gpu_ids)
        busy += gpu_s
        records.append(JobRecord(
            job=job_of(r, epoch), first_start_s=None if r.first_start_t is None else r.first_start_t - epoch,
            finish_s=r.finish_t - epoch if r.state == "finished" and r.finish_t is not None else None,
            gpu_seconds=gpu_s, preemptions=r.preemptions, restarts=r.restarts, migrations=r.migrations))
    if records:
        first = min(x.job.arrival_s for x in records)
        finishes = [x.finish_s for x in records if x.finish_s is not None]
        makespan = max(finishes) - first if finishes else 0.0
        span = None if len(finishes) == len(records) else now - epoch - first
    else:
        makespan, span = 0.0, None
    m = compute_metrics(RunResult(records, max(n_gpus, 1), makespan, 0.0, busy, span_s=span))
    for st in ("failed", "cancelled", "pending", "running"):
        m[f"jobs_{st}"] = float(sum(1 for r in rows if r.state == st))
    doc = results_document(SCENARIO, [seed], {policy: {"metrics": m, "per_seed": [{"seed": seed, "metrics": m}]}})
    write_json_atomic(Path(out_dir) / "results.json", doc)
    return doc
