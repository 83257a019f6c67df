"""Headroom: how far a policy's job completion times are from what no policy can beat, and where the
difference goes.

Each job's **alone time** is its run time from arrival with no wait, on the fastest GPUs of the
cluster that can hold it (for a job that fits on one node: the fastest on one node; else the fastest
anywhere, paying the model's locality cost for spanning nodes), plus the model's start cost. With
fixed variability factors and no stragglers, drift or failures (``synthetic_philly``, ``pal_philly``)
no policy can finish a job sooner, so the mean alone time is a lower bound of the average JCT. A
policy's JCT minus the alone time is split into three parts that add up exactly:

- **first wait**: arrival to first start;
- **extra time on GPUs**: time holding GPUs beyond the alone time (slower or spread GPUs, co-location,
  restart costs after preemption or migration);
- **later waits**: time back in the queue after a preemption.

::

    python -m gpusched.studies.headroom --scenario synthetic_philly --policies las,tiresias,srtf --seeds 0,1,2
    python -m gpusched.studies.headroom --scenario pal_philly --workloads 4,5,6,7 --policies las,agent --agent-path M.zip
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gpusched.agents.policies import make_policy
from gpusched.bench.report import compact
from gpusched_env.cluster.build import build_simulator
from gpusched_env.cluster.simulator import Simulator
from gpusched_env.config_util import ConfigError, int_list
from gpusched_env.metrics import RunResult
from gpusched_env.policy import run_policy
from gpusched_env.scenario import Scenario, load_scenario
from gpusched_env.types import Job

SIZE_CLASSES = ("1 GPU", "within a node", "across nodes")
"""Job size classes of the breakdown: one GPU; more than one, at most a node's GPUs; more."""


def alone_times(sim: Simulator, jobs: Sequence[Job]) -> dict[int, float]:
    """Each job's alone time (module docstring) under the simulator's variability draw and model."""
    topo, speed = sim.topology, sim.speed
    slow = np.asarray(speed.factors) / np.asarray(speed.speed)[:, None]
    nodes = [np.asarray(topo.node_gpus(n)) for n in range(topo.n_nodes)]
    out: dict[int, float] = {}
    for job in jobs:
        if job.pipeline is not None:
            raise ConfigError(f"headroom: job {job.job_id} is a pipeline job; alone times cover data-parallel jobs")
        col = slow[:, job.class_index]
        g = job.num_gpus
        sets = [n[np.argsort(col[n], kind="stable")[:g]] for n in nodes if len(n) >= g]
        if not sets:
            sets = [np.argsort(col, kind="stable")[:g]]
        best = np.inf
        for gpus in sets:
            mult, comm_s = speed.placement_cost(job, tuple(int(x) for x in gpus))
            best = min(best, sim.spec(job.model).base_iter_s * float(col[gpus].max()) * mult + comm_s)
        out[job.job_id] = job.work_iters * best + sim.model.start_cost_s
    return out


def size_class(job: Job, node_gpus: int) -> str:
    if job.num_gpus == 1:
        return SIZE_CLASSES[0]
    return SIZE_CLASSES[1] if job.num_gpus <= node_gpus else SIZE_CLASSES[2]


@dataclass(frozen=True)
class JobSplit:
    """One finished job's JCT, split (seconds): ``jct = alone + first_wait + extra_on_gpus + later_wait``."""

    size: str
    jct: float
    alone: float
    first_wait: float
    extra_on_gpus: float
    later_wait: float


def split_jobs(result: RunResult, alone: dict[int, float], node_gpus: int) -> list[JobSplit]:
    """The split of every tracked job; an unfinished one is an error (its JCT is unknown)."""
    out = []
    for rec in result.tracked:
        job = rec.job
        if rec.finish_s is None or rec.first_start_s is None:
            raise ConfigError(f"headroom: job {job.job_id} did not finish; its JCT cannot be split")
        on_gpus = rec.gpu_seconds / job.num_gpus
        first = rec.first_start_s - job.arrival_s
        a = alone[job.job_id]
        out.append(JobSplit(size_class(job, node_gpus), rec.jct_s, a, first, on_gpus - a, rec.jct_s - first - on_gpus))
    return out


@dataclass(frozen=True)
class Headroom:
    """Means per job over every run of one policy (seconds), and the excess per size class."""

    policy: str
    runs: int
    jobs: int
    jct: float
    alone: float
    first_wait: float
    extra_on_gpus: float
    later_wait: float
    excess_by_size: dict[str, float]
    """Each size class's share of the total excess (JCT − alone time), summing to 1."""
    jobs_by_size: dict[str, int]
    split_by_size: dict[str, tuple[float, float, float]]
    """Each size class's (first wait, extra on GPUs, later waits), means over its own jobs."""

    @property
    def excess_pct(self) -> float:
        return 100.0 * (self.jct / self.alone - 1.0)


_PARTS = ("first_wait", "extra_on_gpus", "later_wait")
"""The fields of :class:`JobSplit` that add up to the excess (JCT − alone time)."""


def summarise(policy: str, runs: list[list[JobSplit]]) -> Headroom:
    jobs = [j for run in runs for j in run]
    n = len(jobs)

    def mean(field: str) -> float:
        return sum(getattr(j, field) for j in jobs) / n

    total = sum(j.jct - j.alone for j in jobs)
    by = {s: sum(j.jct - j.alone for j in jobs if j.size == s) / total if total else 0.0 for s in SIZE_CLASSES}
    counts = {s: sum(1 for j in jobs if j.size == s) for s in SIZE_CLASSES}
    parts = {
        s: tuple(sum(getattr(j, f) for j in jobs if j.size == s) / max(counts[s], 1) for f in _PARTS)
        for s in SIZE_CLASSES
    }
    return Headroom(policy, len(runs), n, mean("jct"), mean("alone"), mean("first_wait"),
                    mean("extra_on_gpus"), mean("later_wait"), by, counts, parts)  # type: ignore[arg-type]


def measure(
    scn: Scenario, policy: str, seeds: Sequence[int], workloads: Sequence[int], agent_path: str | None = None
) -> Headroom:
    """Run ``policy`` on every (seed, workload) and summarise its headroom."""
    runs = []
    for seed in seeds:
        for w in workloads:
            _, jobs, sim = build_simulator(scn, seed, w)
            alone = alone_times(sim, jobs)  # from the state before the run
            run_policy(sim, make_policy(policy, scn, seed, agent_path, workload=w))
            runs.append(split_jobs(sim.result(), alone, sim.topology.max_gpus_per_node))
    return summarise(policy, runs)


def _s(x: float) -> str:
    """Seconds, compact; float noise around zero (a sum of splits) shows as 0."""
    return compact(0.0 if abs(x) < 1e-6 else x)


def format_table(rows: Sequence[Headroom], by_size: bool = False) -> str:
    """Plain-text table: means per job and each size class's share of the excess; ``by_size``: one
    more line per policy and size class with that class's own means."""
    head = (f"{'policy':<10}{'avg_jct_s':>10}{'alone_s':>9}{'excess':>10}{'first wait':>11}"
            f"{'extra on GPUs':>14}{'later waits':>12}   excess share by size: "
            + ", ".join(SIZE_CLASSES))
    lines = [head]
    for r in rows:
        share = " / ".join(f"{100 * r.excess_by_size[s]:.0f}%" for s in SIZE_CLASSES)
        lines.append(
            f"{r.policy:<10}{_s(r.jct):>10}{_s(r.alone):>9}{r.excess_pct:>+9.1f}%"
            f"{_s(r.first_wait):>11}{_s(r.extra_on_gpus):>14}{_s(r.later_wait):>12}   {share}"
        )
        if by_size:
            for size in SIZE_CLASSES:
                first, extra, later = r.split_by_size[size]
                lines.append(f"  {size:<35}{_s(first):>11}{_s(extra):>14}{_s(later):>12}"
                             f"   {r.jobs_by_size[size]} jobs")
    if rows:
        r = rows[0]
        counts = ", ".join(f"{s} {r.jobs_by_size[s]}" for s in SIZE_CLASSES)
        lines.append(f"jobs per policy: {r.jobs} over {r.runs} run(s) ({counts}); means per job, seconds")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m gpusched.studies.headroom", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="JCT = alone time + first wait + extra time on GPUs + later waits, per job (see the module docstring).",
    )
    ap.add_argument("--scenario", default="synthetic_philly", help="scenario name (default synthetic_philly)")
    ap.add_argument("--policies", default="las,tiresias,srtf", help="comma-separated policy names (default las,tiresias,srtf)")
    ap.add_argument("--seeds", default="0,1,2", help="evaluation seeds, comma-separated (default 0,1,2)")
    ap.add_argument("--workloads", default=None, help="workload indices, comma-separated (default all)")
    ap.add_argument("--agent-path", default=None, help="model.zip for the policy named 'agent'")
    ap.add_argument("--by-size", action="store_true", help="also each size class's own means, per policy")
    args = ap.parse_args(argv)
    try:
        scn = load_scenario(args.scenario)
        n = len(scn.workload_names)
        workloads = list(range(n)) if args.workloads is None else int_list(args.workloads, "--workloads")
        bad = [w for w in workloads if not 0 <= w < n]
        if bad:
            raise ConfigError(f"--workloads: indices {bad} out of range; {scn.name} has {n} workload(s) (0..{n - 1})")
        seeds = int_list(args.seeds, "--seeds")
        policies = [p.strip() for p in args.policies.split(",") if p.strip()]
        rows = [measure(scn, p, seeds, workloads, args.agent_path) for p in policies]
    except (ConfigError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"scenario {scn.name}, seeds {seeds}, workloads {workloads}")
    print(format_table(rows, args.by_size))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
