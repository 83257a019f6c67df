"""``gpusched-real report``: the queue's history as the simulator's metrics (results.json schema)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

from gpusched.real.service.gpus import read_telemetry
from gpusched.real.service.queue import JobQueue
from gpusched.real.service.serve import job_of
from gpusched_env.atomic import write_json_atomic
from gpusched_env.metrics import RunResult, compute_metrics, results_document
from gpusched_env.types import JobRecord

SCENARIO = "lab_cluster"
_LAUNCH = re.compile(r"launch \d+ on GPUs \[([\d, ]*)\]")  # the running entry serve.py writes per launch


def busy_gpu_seconds(history: list[tuple[int, float, str, str]], now: float) -> float:
    """GPU-seconds during which a GPU held at least one job, as the simulator counts ``busy_gpu_s``: per GPU
    the union of the launches' intervals (a launch runs from its ``running`` entry to the job's next state),
    so jobs co-located on one GPU (MPS, time slicing) count it once. Launches still running end at ``now``."""
    opened: dict[int, tuple[float, list[int]]] = {}
    spans: dict[int, list[tuple[float, float]]] = {}
    for job, t, state, detail in sorted(history, key=lambda h: h[1]):
        if state == "note":
            continue
        if job in opened:
            t0, gpus = opened.pop(job)
            for g in gpus:
                spans.setdefault(g, []).append((t0, t))
        m = _LAUNCH.match(detail) if state == "running" else None
        if m:
            opened[job] = (t, [int(x) for x in m.group(1).split(",") if x.strip()])
    for t0, gpus in opened.values():
        for g in gpus:
            spans.setdefault(g, []).append((t0, max(t0, now)))
    busy = 0.0
    for ivs in spans.values():
        end = float("-inf")
        for a, b in sorted(ivs):
            if b > end:
                busy += b - max(a, end)
                end = b
    return busy


def report(out_dir: str | Path, seed: int = 0) -> dict[str, Any]:
    """Write ``out_dir/results.json`` (one policy entry) and return it. Times are seconds since the
    queue was created; cancelled jobs are left out. ``energy_kwh``: the GPU energy of the NVML samples
    in the service folder (:func:`gpusched.real.service.gpus.read_telemetry`; 0 without samples, e.g. CPU
    stand-ins); with samples, also ``nvml_utilization`` (NVML's mean SM utilisation of the GPUs
    sampled, beside the scheduler's ``utilization``), ``nvml_gpus`` and ``nvml_samples``."""
    q = JobQueue(out_dir)
    try:
        epoch, rows, history, now = q.epoch(), q.jobs(), q.history(), time.time()
        n_gpus = sum(int(n["n_devices"]) for n in json.loads(q.meta("nodes") or "[]"))
        policy = q.meta("policy") or "unknown"
    finally:
        q.close()
    records = []
    for r in rows:
        if r.state == "cancelled":
            continue
        running = max(0.0, now - r.started_t) if r.state == "running" and r.started_t else 0.0
        gpu_s = r.gpu_s + running * len(r.gpu_ids)
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
    tel = read_telemetry(out_dir)
    kept = {x.job.job_id for x in records}  # cancelled jobs are left out, their GPU time too
    busy = busy_gpu_seconds([h for h in history if h[0] in kept], now)
    m = compute_metrics(RunResult(records, max(n_gpus, 1), makespan, tel.energy_j if tel else 0.0, busy, span_s=span))
    if tel is not None:
        m.update(nvml_utilization=tel.util, nvml_gpus=float(tel.n_gpus), nvml_samples=float(tel.n_samples))
    for st in ("failed", "cancelled", "pending", "running"):
        m[f"jobs_{st}"] = float(sum(1 for r in rows if r.state == st))
    doc = results_document(SCENARIO, [seed], {policy: {"metrics": m, "per_seed": [{"seed": seed, "metrics": m}]}})
    write_json_atomic(Path(out_dir) / "results.json", doc)
    return doc


SHADOW_SCENARIO = "lab_cluster_slurm_shadow"
SHADOW_RESULTS = "shadow_results.json"


def slurm_shadow_report(out_dir: str | Path) -> dict[str, Any] | None:
    """Shadow mode on Slurm (:mod:`gpusched.real.service.slurm_shadow`): Slurm's run and the policy's replay
    of the same finished jobs, written to ``out_dir/shadow_results.json`` (two policy entries,
    ``slurm`` and the policy, plus ``jobs``: the Slurm job ids compared, and ``per_job``: each job's
    first start and finish on both sides, in seconds since the first submit). None when the service
    never shadowed Slurm here."""
    from gpusched.real.config import make_policy
    from gpusched.real.service.slurm_shadow import OBSERVED, compare, load_observed, replay_model

    if not (Path(out_dir) / OBSERVED).exists():
        return None
    from gpusched_env.config_util import ConfigError
    from gpusched_env.scenario import load_scenario

    q = JobQueue(out_dir)
    try:
        nodes = json.loads(q.meta("nodes") or "[]")
        cfg = json.loads(q.meta("shadow_config") or "{}")
    finally:
        q.close()
    if not nodes or not cfg:
        raise ConfigError(f"out_dir: {out_dir} has {OBSERVED} but no node list or shadow_config in its queue")
    scn = load_scenario(cfg["scenario"])
    seed = int(cfg["seed"])
    kw: dict[str, Any] = {} if cfg.get("round_s") is None or cfg["policy"] == "fifo" else {"round_s": cfg["round_s"]}
    policy = make_policy(cfg["policy"], scn, seed, cfg.get("agent_path"), kw)
    model = replay_model(scn.model_for(0).restart_cost_s)
    got = compare(load_observed(out_dir), [int(n["n_devices"]) for n in nodes], policy, model, seed,
                  scn.cluster.max_jobs_per_gpu)
    entries = {name: {"metrics": m, "per_seed": [{"seed": seed, "metrics": m}]}
               for name, m in (("slurm", got["slurm"]), (policy.name, got["policy"]))}
    doc = results_document(SHADOW_SCENARIO, [seed], entries)
    doc.update(jobs=got["jobs"], per_job=got["per_job"], nodes=[[n["name"], int(n["n_devices"])] for n in nodes])
    write_json_atomic(Path(out_dir) / SHADOW_RESULTS, doc)
    return doc
