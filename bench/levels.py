"""``gpusched-bench`` for scenarios of the levels below the cluster (``level: device`` or
``level: pipeline`` in the scenario file): every (policy, seed, workload) goes through that level's
:class:`~gpusched_env.levels.LevelBench`, and the results are written and printed exactly as for a
cluster scenario (results.json, results.csv, tables, *paper vs sim*, the level's plots). The policy
``agent`` (with ``agent_path=FILE``) is a model trained by ``gpusched-train`` on this level's env and
scenario, run through the env on the same runs (:mod:`agents.levels`)."""

from __future__ import annotations

import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from rich.console import Console

from bench.report import print_report, results_csv, results_document, write_atomic, write_json_atomic
from bench.runner import Task, TaskResult, aggregate, paper_values
from gpusched_env.config_util import ConfigError
from gpusched_env.levels import LevelRun, LevelScenario, level_bench, level_of, load_level_scenario

LEVEL_TABLE_COLUMNS = 7  # default printed columns (results.json and .csv have every metric)
HEADLINE = ("hp_p99_ratio", "hp_p99_ms", "be_norm_throughput", "be_norm_throughput_measured", "be_norm_error",
            "hp_p99_in_range", "system_throughput", "throughput_jobs_s", "hp_deadline_miss_rate",
            "lp_deadline_miss_rate", "iteration_time_ms", "throughput_samples_s")
"""Metrics shown first where a run has them (docs/NAMES.md's device and pipeline names)."""


def default_columns(metrics: list[str]) -> list[str]:
    """The headline metrics the run has, then its others, :data:`LEVEL_TABLE_COLUMNS` in all."""
    first = [m for m in HEADLINE if m in metrics]
    return (first + [m for m in metrics if m not in first])[:LEVEL_TABLE_COLUMNS]


AGENT = "agent"


def _run_one(level: str, scn: LevelScenario, task: Task, agent_path: str | None = None) -> tuple[Task, LevelRun, float]:
    t0 = time.perf_counter()
    if task.policy == AGENT:
        from agents.levels import cached_level_agent, run_level_agent

        assert agent_path is not None  # checked by run_level_bench
        run = run_level_agent(cached_level_agent(agent_path, level, scn), scn, task.seed, task.workload)
    else:
        run = level_bench(level).run(scn, task.policy, task.seed, task.workload)
    return task, run, time.perf_counter() - t0


def check_agent(level: str, scn: LevelScenario, agent_path: str | None) -> None:
    """Policy ``agent`` needs ``agent_path``, a model of this level's env and this scenario (ConfigError)."""
    if not agent_path:
        raise ConfigError("policies: policy 'agent' needs agent_path=FILE (a model.zip from gpusched-train)")
    from agents.levels import cached_level_agent

    cached_level_agent(agent_path, level, scn)


def run_level_bench(
    raw: dict[str, Any], policies: list[str] | None, seeds: list[int], workloads: list[int] | None,
    workers: int, out: Path, plots: bool, table_metrics: list[str] | None, console: Console,
    agent_path: str | None = None,
) -> dict[str, Any]:
    """Run, write and print a device- or pipeline-level scenario; returns the results document."""
    level = level_of(raw)
    lb, scn = load_level_scenario(raw)
    policies = policies or list(scn.default_policies) or list(lb.POLICIES)
    unknown = [p for p in policies if p not in lb.POLICIES and p != AGENT]
    if unknown:
        raise ConfigError(f"policies: {unknown} are not {level}-level policies; allowed: "
                          f"{', '.join(lb.POLICIES)}, {AGENT} (with agent_path)")
    if AGENT in policies:
        check_agent(level, scn, agent_path)
    n = len(scn.workload_names)
    chosen = list(range(n)) if workloads is None else list(workloads)
    if any(not 0 <= w < n for w in chosen):
        raise ConfigError(f"workloads: indices must be in 0..{n - 1} for {scn.name}, got {chosen}")
    tasks = [Task(p, s, w) for p in policies for s in seeds for w in chosen]
    console.print(f"[bold]{scn.name}[/] ({level} level): {len(policies)} policies × {len(seeds)} seeds × "
                  f"{len(chosen)} workload(s) = {len(tasks)} runs on {workers} process(es)")
    t0 = time.perf_counter()
    if workers > 1 and len(tasks) > 1:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            done = list(pool.map(_run_one, [level] * len(tasks), [scn] * len(tasks), tasks,
                                 [agent_path] * len(tasks)))
    else:
        done = [_run_one(level, scn, t, agent_path) for t in tasks]
    wall = time.perf_counter() - t0
    results = [TaskResult(t, scn.workload_names[t.workload], r.metrics, wall_s=w) for t, r, w in done]
    block = aggregate(scn, results, seeds)  # type: ignore[arg-type]
    doc = results_document(scn.name, seeds, block, paper_values(scn, block) or None)  # type: ignore[arg-type]
    doc["level"] = level
    doc["wall_s"] = round(wall, 2)
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / "results.json", doc)
    write_atomic(out / "results.csv", results_csv(doc))
    print_report(doc, console, table_metrics or default_columns(list(next(iter(block.values()))["metrics"])))
    written = ["results.json", "results.csv"]
    if plots:
        written += [p.name for p in lb.plot(scn, [(t.policy, t.seed, t.workload, r) for t, r, _ in done], out)]
    console.print(f"wrote {out}/{', '.join(written)} ({wall:.1f} s wall)")
    return doc
