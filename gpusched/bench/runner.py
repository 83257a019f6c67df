"""Run policies × seeds × workloads of a scenario and collect their metrics (library side of
``gpusched-bench``). Each task is independent and deterministic, so tasks run in worker processes.
A task runs on a backend looked up by name (:mod:`gpusched_env.backends`: ``sim``, the default, or
``real``), so this module builds no simulator itself."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gpusched.agents.policies import make_policy
from gpusched_env.backends import RunBackend, make_backend
from gpusched_env.cluster.build import Workload, shared_cache, with_run_time
from gpusched_env.cluster.build import simulate as simulate  # re-exported for older callers (docs/MOVED.md)
from gpusched_env.cluster.watch import RunLimits, RunProgress
from gpusched_env.config_util import ConfigError
from gpusched_env.metrics import compute_metrics
from gpusched_env.scenario import Scenario


@dataclass(frozen=True)
class Task:
    policy: str
    seed: int
    workload: int  # index into the scenario's workloads


@dataclass(frozen=True)
class BackendSpec:
    """Which backend runs the tasks (:data:`gpusched_env.backends.BACKENDS`), its options, and the
    folder under which a backend that writes files gets one folder per run (``POLICY-seedS-wW``)."""

    name: str = "sim"
    options: str = "{}"  # JSON of the backend's options (hashable: one backend per process per spec)
    runs_dir: str | None = None

    def run_dir(self, task: Task) -> Path | None:
        return None if self.runs_dir is None else Path(self.runs_dir) / f"{task.policy}-seed{task.seed}-w{task.workload}"


SIM = BackendSpec()
_BACKENDS: dict[BackendSpec, RunBackend] = {}  # this process's backends (a real one loads its config once)


def backend_of(spec: BackendSpec) -> RunBackend:
    """The backend of ``spec``, made once per process."""
    if spec not in _BACKENDS:
        _BACKENDS[spec] = make_backend(spec.name, json.loads(spec.options))
    return _BACKENDS[spec]


@dataclass
class TaskResult:
    task: Task
    workload_name: str
    metrics: dict[str, float]
    jcts: list[float] = field(default_factory=list)
    timeline: tuple[list[float], list[int], list[float]] | None = None
    wall_s: float = 0.0
    events_jobs: int = 0


def cached_workloads(scn: Scenario, seed: int) -> list[Workload]:
    """Every workload of ``seed`` through this process's cache (built before forking, workers inherit
    them)."""
    return shared_cache(scn).all(seed)


_PROGRESS: Any = None  # worker processes: the queue their runs' progress goes to (see _iter_results)


def _init_worker(progress: Any) -> None:
    """Worker initializer: Ctrl-C is the parent's to handle; progress goes to ``progress``."""
    global _PROGRESS
    ignore_sigint()
    if progress is not None:
        progress.cancel_join_thread()  # progress not yet sent may be dropped: never blocks the exit
    _PROGRESS = progress


def run_task(
    scn: Scenario, task: Task, agent_path: str | None, check: bool, keep_series: bool,
    limits: RunLimits | None = None, report: Callable[[Task, RunProgress], None] | None = None,
    backend: BackendSpec = SIM,
) -> TaskResult:
    t0 = time.perf_counter()
    policy = make_policy(task.policy, scn, task.seed, agent_path, workload=task.workload)
    queue = _PROGRESS
    on: Callable[[RunProgress], None] | None = None
    if report is not None:
        def on(p: RunProgress) -> None:
            report(task, p)
    elif queue is not None:
        def on(p: RunProgress) -> None:
            queue.put((task, p))
    name, result = backend_of(backend).run(scn, policy, task.seed, task.workload, backend.run_dir(task),
                                           check=check, limits=limits, report=on)
    wall = time.perf_counter() - t0
    tl = None
    if keep_series and result.timeline is not None:
        tl = _downsample(result.timeline.t, result.timeline.busy_gpus, result.timeline.power_w)
    jcts = [r.jct_s for r in result.tracked if r.finish_s is not None] if keep_series else []
    return TaskResult(task, name, with_run_time(compute_metrics(result), result), jcts, tl, wall, len(result.records))


def _downsample(t: list[float], busy: list[int], power: list[float], n: int = 2000):
    if len(t) <= n:
        return list(t), list(busy), list(power)
    idx = np.linspace(0, len(t) - 1, n).astype(int)
    return [t[i] for i in idx], [busy[i] for i in idx], [power[i] for i in idx]


def tasks_for(
    scn: Scenario, policies: list[str], seeds: list[int], workloads: list[int] | None = None
) -> list[Task]:
    """Every (policy, seed, workload) run; ``workloads``: indices of the scenario's workloads to use
    (default all), e.g. held-out PAL workloads 5-8 = [4, 5, 6, 7]."""
    n = len(scn.workload_names)
    chosen = list(range(n)) if workloads is None else list(workloads)
    bad = [w for w in chosen if not 0 <= w < n]
    if bad:
        raise ConfigError(f"workloads: indices {bad} out of range; {scn.name} has {n} workload(s) (0..{n - 1})")
    return [Task(p, s, w) for p in policies for s in seeds for w in chosen]


def run_tasks(
    scn: Scenario,
    tasks: list[Task],
    *,
    workers: int = 1,
    agent_path: str | None = None,
    check: bool = False,
    keep_series: bool = True,
    on_done: Callable[[TaskResult], None] | None = None,
    limits: RunLimits | None = None,
    on_progress: Callable[[Task, RunProgress], None] | None = None,
    backend: BackendSpec = SIM,
) -> list[TaskResult]:
    """Run every task (in ``workers`` processes when > 1 and the backend allows it) through
    ``backend`` (default: the simulator); results come back in task order.
    ``limits`` stop a run that goes on too long (RunLimitExceeded); ``on_progress`` gets each
    running task's progress (simulated time, jobs finished) about twice a second.

    On Ctrl-C (KeyboardInterrupt) the workers are stopped and :class:`Interrupted` carries the
    results of the tasks that finished."""
    results: dict[Task, TaskResult] = {}
    try:
        if not backend_of(backend).parallel:
            workers = 1
        for r in _iter_results(scn, tasks, workers, agent_path, check, keep_series, limits, on_progress, backend):
            results[r.task] = r
            if on_done:
                on_done(r)
    except KeyboardInterrupt:
        raise Interrupted([results[t] for t in tasks if t in results]) from None
    return [results[t] for t in tasks]


class Interrupted(Exception):
    """The run was interrupted; ``done`` holds the results of the tasks that finished, in task order."""

    def __init__(self, done: list[TaskResult]) -> None:
        super().__init__(f"interrupted after {len(done)} finished run(s)")
        self.done = done


def ignore_sigint() -> None:
    """Worker initializer: Ctrl-C is the parent's to handle (it stops the workers); SIGTERM, which
    the parent stops them with, ends a worker quietly (not the parent's handler it forked with)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _iter_results(
    scn: Scenario, tasks: list[Task], workers: int, agent_path: str | None, check: bool, keep: bool,
    limits: RunLimits | None = None, on_progress: Callable[[Task, RunProgress], None] | None = None,
    backend: BackendSpec = SIM,
) -> Iterator[TaskResult]:
    if workers <= 1 or len(tasks) <= 1:
        for t in tasks:
            yield run_task(scn, t, agent_path, check, keep, limits, on_progress, backend)
        return
    import multiprocessing
    import queue

    from gpusched.baselines import prepare_policies

    # import what the policies need once, before the workers fork (saves each worker the import)
    prepare_policies(list(dict.fromkeys(t.policy for t in tasks)))
    ctx = multiprocessing.get_context()
    progress = ctx.Queue() if on_progress is not None else None
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_init_worker, initargs=(progress,))
    try:
        left = {pool.submit(run_task, scn, t, agent_path, check, keep, limits, None, backend) for t in tasks}
        while left:
            done, left = wait(left, timeout=0.25, return_when=FIRST_COMPLETED)
            while progress is not None and on_progress is not None:
                try:
                    task, p = progress.get_nowait()
                except queue.Empty:
                    break
                on_progress(task, p)
            for f in done:
                yield f.result()
    except BaseException:
        stop_pool(pool)
        raise
    pool.shutdown(wait=True)


def stop_pool(pool: ProcessPoolExecutor) -> None:
    """Stop a worker pool now: cancel what has not started and terminate the running workers."""
    procs = list(getattr(pool, "_processes", {}).values())  # no public way to stop running tasks
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in procs:
        proc.terminate()
    for proc in procs:
        proc.join(timeout=10)


def aggregate(scn: Scenario, results: list[TaskResult], seeds: list[int]) -> dict[str, Any]:
    """The ``policies`` block of results.json: mean over seeds and workloads, per seed, per workload."""
    out: dict[str, Any] = {}
    policies = list(dict.fromkeys(r.task.policy for r in results))
    for p in policies:
        mine = [r for r in results if r.task.policy == p]
        entry: dict[str, Any] = {"metrics": _mean([r.metrics for r in mine])}
        entry["per_seed"] = [
            {"seed": s, "metrics": _mean([r.metrics for r in mine if r.task.seed == s])} for s in seeds
        ]
        used = sorted({r.task.workload for r in mine})
        if len(scn.workload_names) > 1:
            entry["per_workload"] = [
                {"workload": scn.workload_names[w], "metrics": _mean([r.metrics for r in mine if r.task.workload == w])}
                for w in used
            ]
        out[p] = entry
    return out


def _mean(ms: list[dict[str, float]]) -> dict[str, float]:
    keys = list(dict.fromkeys(k for m in ms for k in m))
    return {k: float(np.mean([m[k] for m in ms if k in m])) for k in keys}


def paper_values(scn: Scenario, block: dict[str, Any]) -> list[dict[str, Any]]:
    """Each published claim of the scenario with its simulated counterpart (None if not computable)."""
    rows = []
    for c in scn.paper:
        sim = c.sim_value(block)
        rows.append({"claim": c.claim, "value": c.value, "sim_value": sim, "metric": c.metric, "policy": c.policy,
                     "baseline": c.baseline, "kind": c.kind, "aggregate": c.aggregate, "workloads": list(c.workloads),
                     "bound": c.bound, "meets_bound": None if sim is None else c.meets(sim), "source": c.source})
    return rows
