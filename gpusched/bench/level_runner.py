"""``gpusched-bench`` for scenarios of the levels below the cluster (``level: device`` or
``level: pipeline`` in the scenario file): every (policy, seed, workload) goes through that level's
:class:`~gpusched_env.levels.LevelBench`, and the results are written and printed exactly as for a
cluster scenario (results.json, results.csv, tables, *paper vs sim*, the level's plots). The policy
``agent`` (with ``agent_path=FILE``) is a model trained by ``gpusched-train`` on this level's env and
scenario, run through the env on the same runs (:mod:`gpusched.agents.level_agents`)."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from gpusched.bench.report import print_report, results_csv, results_document, write_atomic, write_json_atomic
from gpusched.bench.runner import Task, TaskResult, aggregate, ignore_sigint, paper_values, stop_pool
from gpusched_env.config_util import ConfigError
from gpusched_env.levels import (
    LevelBench,
    LevelRun,
    LevelScenario,
    level_bench,
    level_of,
    load_level_scenario,
)
from gpusched_env.vocabulary import current_names

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


Done = tuple[Task, LevelRun, float]


class BenchInterrupted(Exception):
    """Ctrl-C (or SIGTERM) stopped the bench after the finished runs were written."""


def _run_one(level: str, scn: LevelScenario, task: Task, agent_path: str | None = None) -> Done:
    t0 = time.perf_counter()
    if task.policy == AGENT:
        from gpusched.agents.level_agents import cached_level_agent, run_level_agent

        assert agent_path is not None  # checked by check_level
        run = run_level_agent(cached_level_agent(agent_path, level, scn), scn, task.seed, task.workload)
    else:
        run = level_bench(level).run(scn, task.policy, task.seed, task.workload)
    return task, run, time.perf_counter() - t0


def check_agent(level: str, scn: LevelScenario, agent_path: str | None) -> None:
    """Policy ``agent`` needs ``agent_path``, a model of this level's env and this scenario (ConfigError)."""
    if not agent_path:
        raise ConfigError("policies: policy 'agent' needs agent_path=FILE (a model.zip from gpusched-train)")
    from gpusched.agents.level_agents import cached_level_agent

    cached_level_agent(agent_path, level, scn)


def describe_level_agent(agent_path: str) -> dict[str, Any]:
    """What results.json says about a level agent: its file and what its model.zip says it was trained on."""
    from gpusched.agents.adapter import read_meta

    meta = read_meta(agent_path)
    return {"path": str(agent_path), "env_id": meta.get("env_id"), "algo": meta.get("algo"),
            "scenario": meta.get("scenario"), "seed": meta.get("seed"), "num_timesteps": meta.get("num_timesteps")}


@dataclass
class LevelPlan:
    """A checked device- or pipeline-level bench: everything the runs need, nothing run yet."""

    level: str
    lb: LevelBench
    scn: LevelScenario
    policies: list[str]
    seeds: list[int]
    tasks: list[Task]


def check_level(raw: dict[str, Any], policies: list[str] | None, seeds: list[int], workloads: list[int] | None,
                agent_path: str | None = None) -> LevelPlan:
    """Every input of a level bench checked before any run (a ConfigError names the bad key): the
    scenario (its loader checks values), policies, seeds, workloads, the agent's model, and the
    level's own ``check`` of the chosen policies on the scenario where it has one."""
    level = level_of(raw)
    lb, scn = load_level_scenario(raw)
    policies = current_names(policies, "policies") if policies else list(scn.default_policies) or list(lb.POLICIES)
    unknown = [p for p in policies if p not in lb.POLICIES and p != AGENT]
    if unknown:
        raise ConfigError(f"policies: {unknown} are not {level}-level policies; allowed: "
                          f"{', '.join(lb.POLICIES)}, {AGENT} (with agent_path)")
    bad = [s for s in seeds if s < 0]
    if bad:
        raise ConfigError(f"seeds: must be integers >= 0, got {bad}")
    if AGENT in policies:
        check_agent(level, scn, agent_path)
    n = len(scn.workload_names)
    chosen = list(range(n)) if workloads is None else list(workloads)
    if any(not 0 <= w < n for w in chosen):
        raise ConfigError(f"workloads: indices must be in 0..{n - 1} for {scn.name}, got {chosen}")
    check = getattr(lb, "check", None)
    if check is not None:
        check(scn, [p for p in policies if p != AGENT])
    return LevelPlan(level, lb, scn, policies, seeds, [Task(p, s, w) for p in policies for s in seeds for w in chosen])


def _iter_done(plan: LevelPlan, workers: int, agent_path: str | None) -> Iterator[Done]:
    """Each run's result as it finishes (in ``workers`` processes when > 1); on any exception or
    Ctrl-C the workers are stopped before it propagates."""
    if workers <= 1 or len(plan.tasks) <= 1:
        for t in plan.tasks:
            yield _run_one(plan.level, plan.scn, t, agent_path)
        return
    pool = ProcessPoolExecutor(max_workers=workers, initializer=ignore_sigint)
    try:
        futures = [pool.submit(_run_one, plan.level, plan.scn, t, agent_path) for t in plan.tasks]
        for f in as_completed(futures):
            yield f.result()
    except BaseException:
        stop_pool(pool)
        raise
    pool.shutdown(wait=True)


class sigterm_as_interrupt:  # noqa: N801 (used as a context manager)
    """SIGTERM raises KeyboardInterrupt in this process while the runs go on (then restored)."""

    def __enter__(self) -> None:
        self._old = signal.getsignal(signal.SIGTERM)
        try:
            signal.signal(signal.SIGTERM, self._raise)
        except ValueError:  # not the main thread
            self._old = None

    @staticmethod
    def _raise(_sig: int, _frame: Any) -> None:
        raise KeyboardInterrupt

    def __exit__(self, *exc: object) -> None:
        if self._old is not None:
            signal.signal(signal.SIGTERM, self._old)


def run_all(plan: LevelPlan, workers: int, agent_path: str | None, console: Console,
            on_done: Callable[[Done], None] | None = None) -> tuple[list[Done], bool]:
    """Every run of ``plan`` under a progress bar; (finished runs in task order, interrupted?)."""
    got: dict[Task, Done] = {}
    interrupted = False
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=False) as bar:
        job = bar.add_task("simulating", total=len(plan.tasks))
        try:
            with sigterm_as_interrupt():
                for d in _iter_done(plan, workers, agent_path):
                    got[d[0]] = d
                    t = d[0]
                    bar.update(job, advance=1, description=f"{t.policy} seed {t.seed} {plan.scn.workload_names[t.workload]}")
                    if on_done is not None:
                        on_done(d)
        except KeyboardInterrupt:
            interrupted = True
    return [got[t] for t in plan.tasks if t in got], interrupted


def run_level_bench(
    raw: dict[str, Any], policies: list[str] | None, seeds: list[int], workloads: list[int] | None,
    workers: int, out: Path, plots: bool, table_metrics: list[str] | None, console: Console,
    agent_path: str | None = None, plan: LevelPlan | None = None,
) -> dict[str, Any]:
    """Run, write and print a device- or pipeline-level scenario; returns the results document.
    ``plan``: the result of :func:`check_level` on these inputs when the caller checked them already.
    Ctrl-C or SIGTERM: the finished runs are written (``"partial": true``) and BenchInterrupted raised."""
    plan = plan or check_level(raw, policies, seeds, workloads, agent_path)
    scn, level = plan.scn, plan.level
    n_wl = len({t.workload for t in plan.tasks})
    console.print(f"[bold]{scn.name}[/] ({level} level): {len(plan.policies)} policies × {len(seeds)} seeds × "
                  f"{n_wl} workload(s) = {len(plan.tasks)} runs on {workers} process(es)")
    t0 = time.perf_counter()
    done, interrupted = run_all(plan, workers, agent_path, console)
    wall = time.perf_counter() - t0
    results = [TaskResult(t, scn.workload_names[t.workload], r.metrics, wall_s=w) for t, r, w in done]
    ran_seeds = [s for s in seeds if any(t.seed == s for t, _, _ in done)]
    block = aggregate(scn, results, ran_seeds)  # type: ignore[arg-type]
    doc = results_document(scn.name, seeds, block, paper_values(scn, block) or None,  # type: ignore[arg-type]
                           len(scn.workload_names))
    doc["level"] = level
    doc["wall_s"] = round(wall, 2)
    if AGENT in plan.policies and agent_path:
        doc["agent"] = a = describe_level_agent(agent_path)
        console.print(f"agent: {a['path']} ({a['env_id']}, {a['algo']}, trained on {a['scenario']}, "
                      f"seed {a['seed']}, {a['num_timesteps']} steps)")
    if interrupted:
        doc.update(partial=True, runs_finished=len(done), runs_planned=len(plan.tasks))
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / "results.json", doc)
    write_atomic(out / "results.csv", results_csv(doc))
    if interrupted:
        raise BenchInterrupted(f"interrupted: wrote the {len(done)} of {len(plan.tasks)} runs that finished to "
                               f"{out / 'results.json'} (marked \"partial\": true)")
    print_report(doc, console, table_metrics or default_columns(list(next(iter(block.values()))["metrics"])))
    written = ["results.json", "results.csv"]
    plot_s = 0.0
    if plots:
        t1 = time.perf_counter()
        written += [p.name for p in plan.lb.plot(scn, [(t.policy, t.seed, t.workload, r) for t, r, _ in done], out)]
        plot_s = time.perf_counter() - t1
    timing = f"{wall:.1f} s wall" + (f", plots {plot_s:.1f} s" if plots else "")
    console.print(f"wrote {out}/{', '.join(written)} (runs {timing})")
    return doc
