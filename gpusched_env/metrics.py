"""Run results and the metrics every backend reports (definitions in docs/CLUSTER.md, "Metrics")."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpusched_env.types import JobRecord

J_PER_KWH = 3.6e6


@dataclass
class Timeline:
    """Cluster state after each change: time (s), busy GPUs, cluster power (W)."""

    t: list[float] = field(default_factory=list)
    busy_gpus: list[int] = field(default_factory=list)
    power_w: list[float] = field(default_factory=list)

    def add(self, t: float, busy: int, power: float) -> None:
        if self.t and self.t[-1] == t:
            self.busy_gpus[-1], self.power_w[-1] = busy, power
        else:
            self.t.append(t)
            self.busy_gpus.append(busy)
            self.power_w.append(power)


@dataclass
class RunResult:
    """Everything one (scenario, policy, seed) run produced, from any backend."""

    records: list[JobRecord]
    n_gpus: int
    makespan_s: float
    energy_j: float
    busy_gpu_s: float
    idle_floor_j: float = 0.0
    timeline: Timeline | None = None
    extra: dict[str, float] = field(default_factory=dict)
    span_s: float | None = None  # first arrival to the end of the run; None = makespan_s (a run that
    # stopped with tracked jobs unfinished, e.g. a stall, lasts longer than its last completion)

    @property
    def tracked(self) -> list[JobRecord]:
        return [r for r in self.records if r.job.tracked]


def compute_metrics(result: RunResult) -> dict[str, float]:
    """The standard metrics of one run (tracked jobs only for job-level figures).

    avg/p50/p95/p99_jct_s: job completion time (finish - arrival) of the finished jobs.
    avg_jct_all_s: the mean over every tracked job, an unfinished one charged up to the end of the
    run (a lower bound of its JCT; equal to avg_jct_s when all finished). avg_queue_s: first start -
    arrival. makespan_s: time from the first arrival to the last completion. utilization: busy
    GPU-seconds / (n_gpus x span), a GPU being busy while it holds at least one job; the span is
    the makespan, or the whole run when it stopped with tracked jobs unfinished.
    energy_kwh: cluster energy (GPUs + node baseline) over the run. jobs_finished, preemptions,
    restarts, migrations: counts. deadline_miss_rate: share of jobs with a deadline that missed it.
    """
    done = [r for r in result.tracked if r.finish_s is not None]
    span = result.makespan_s if result.span_s is None else max(result.span_s, result.makespan_s)
    jct = np.array([r.jct_s for r in done], dtype=float)
    queue = np.array([r.queue_s for r in done if r.first_start_s is not None], dtype=float)
    m: dict[str, float] = {
        "avg_jct_s": float(jct.mean()) if jct.size else float("nan"),
        "avg_jct_all_s": _avg_jct_all(result, span),
        "p50_jct_s": float(np.percentile(jct, 50)) if jct.size else float("nan"),
        "p95_jct_s": float(np.percentile(jct, 95)) if jct.size else float("nan"),
        "p99_jct_s": float(np.percentile(jct, 99)) if jct.size else float("nan"),
        "avg_queue_s": float(queue.mean()) if queue.size else float("nan"),
        "makespan_s": float(result.makespan_s),
        "utilization": float(result.busy_gpu_s / (result.n_gpus * span)) if span > 0 else 0.0,
        "energy_kwh": float(result.energy_j / J_PER_KWH),
        "job_energy_kwh": float(sum(r.energy_j for r in done) / J_PER_KWH),
        "jobs_finished": float(len(done)),
        "preemptions": float(sum(r.preemptions for r in result.tracked)),
        "restarts": float(sum(r.restarts for r in result.tracked)),
        "migrations": float(sum(r.migrations for r in result.tracked)),
    }
    with_deadline = [r for r in done if r.job.deadline_s is not None]
    if with_deadline:
        m["deadline_miss_rate"] = float(np.mean([not r.deadline_met for r in with_deadline]))
    m.update(result.extra)
    return m


def _avg_jct_all(result: RunResult, span: float) -> float:
    """Mean JCT over all tracked jobs, those unfinished charged up to the end of the run."""
    tracked = result.tracked
    if not tracked:
        return float("nan")
    end = min(r.job.arrival_s for r in result.records) + span
    return float(np.mean([r.jct_s if r.finish_s is not None else max(0.0, end - r.job.arrival_s) for r in tracked]))


def results_document(
    scenario: str, seeds: list[int], policies: dict[str, Any], paper: list[dict[str, Any]] | None = None,
    n_workloads: int | None = None,
) -> dict[str, Any]:
    """The results.json document (schema: docs/NAMES.md). ``paper`` holds the first claim; every claim
    is listed under ``paper.claims``. ``n_workloads``: how many workloads the scenario has; a claim
    about all of them computed on fewer is marked (:func:`gpusched_env.paper.mark_subsets`)."""
    from gpusched_env.paper import mark_subsets

    doc: dict[str, Any] = {"scenario": scenario, "seeds": list(seeds), "policies": policies}
    if paper:
        if n_workloads is not None:
            paper = mark_subsets(paper, policies, n_workloads)
        doc["paper"] = {**paper[0], "claims": paper}
    return doc
