"""The pipeline level's :class:`~gpusched_env.levels.LevelBench` (``gpusched-bench`` entry)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from gpusched_env.config_util import ConfigError
from gpusched_env.levels import LevelRun
from gpusched_env.pipeline import plot as plots
from gpusched_env.pipeline.config import PipelineScenario
from gpusched_env.pipeline.config import load as _load
from gpusched_env.pipeline.dynamics import conditions
from gpusched_env.pipeline.execute import execute
from gpusched_env.pipeline.run import RunSettings, run_workload
from gpusched_env.pipeline.schedules import SCHEDULES, get

POLICIES: tuple[str, ...] = tuple(SCHEDULES)


def load(raw: dict[str, Any], name: str) -> PipelineScenario:
    """The typed scenario from the YAML mapping; a bad or unknown key raises ConfigError naming it."""
    return _load(raw, name)


def _runs_under(scn: PipelineScenario, policy: str, limit: int) -> str | None:
    """Why ``policy``'s plan cannot run with ``activation_limit=limit`` on the healthy job or in the
    last iteration's conditions of any workload (None: it runs)."""
    sched = get(policy)
    base = sched.model_for(replace(scn.job, activation_limit=limit).model())
    host = scn.dynamics.host_path_delay_ms if sched.comm == "cpu" else None
    for wl in [None, *scn.workloads]:
        actual = base if wl is None else base.with_conditions(*conditions(wl, wl.iterations - 1, base.stages, host))
        try:
            execute(actual, sched.orders(actual if sched.adaptive else base))
        except (ValueError, RuntimeError) as e:
            return str(e)
    return None


def check(scn: PipelineScenario, policies: list[str]) -> None:
    """Each policy's plan runs on the scenario's job with its ``activation_limit`` (else a
    ConfigError naming the key and, per failing policy, the smallest limit with which it runs)."""
    limit = scn.job.activation_limit
    failing = {p: why for p in policies if (why := _runs_under(scn, p, limit))}
    if not failing:
        return
    needs = []
    for p in failing:
        need = next((k for k in range(limit + 1, scn.job.microbatches + 1) if not _runs_under(scn, p, k)), None)
        needs.append(f"{p} needs >= {need}" if need is not None else f"{p}: {failing[p]}")
    raise ConfigError(f"scenario.job.activation_limit: {limit} is too small: {'; '.join(needs)} "
                      f"(or leave those policies out)")


def settings(scn: PipelineScenario) -> RunSettings:
    """The run settings of a scenario (healthy job, restart cost, host path, jitter)."""
    d = scn.dynamics
    return RunSettings(model=scn.job.model(), microbatch_size=scn.job.microbatch_size,
                       restart_ms=d.restart_s * 1000.0, host_path_delay_ms=d.host_path_delay_ms,
                       jitter_cv=d.jitter_cv, replan_ms=d.replan_ms)


def workload_rng(seed: int, workload: int, n_workloads: int) -> np.random.Generator:
    """The run's generator: child ``workload`` of ``SeedSequence(seed)`` (same for every policy)."""
    return np.random.default_rng(np.random.SeedSequence(seed).spawn(n_workloads)[workload])


def run(scn: PipelineScenario, policy: str, seed: int, workload: int) -> LevelRun:
    """One deterministic run of ``policy`` on workload ``workload`` (index) of ``scn``."""
    if not 0 <= workload < len(scn.workloads):
        raise ValueError(f"workload must be in 0..{len(scn.workloads) - 1}, got {workload}")
    st = settings(scn)
    summary = run_workload(st, get(policy), scn.workloads[workload],
                           workload_rng(seed, workload, len(scn.workloads)))
    samples = st.model.microbatches * st.microbatch_size
    return LevelRun(metrics=summary.metrics(samples), series={"iteration_ms": list(summary.iteration_ms)})


def steady_timeline(scn: PipelineScenario, policy: str, workload: int):
    """One recorded iteration of ``policy`` in the last iteration's conditions of a workload
    (adaptive schedules planned for them), without jitter."""
    st, sched, wl = settings(scn), get(policy), scn.workloads[workload]
    base = sched.model_for(st.model)
    host = st.host_path_delay_ms if sched.comm == "cpu" else None
    actual = base.with_conditions(*conditions(wl, wl.iterations - 1, base.stages, host))
    return execute(actual, sched.orders(actual if sched.adaptive else base), record=True)


def plot(scn: PipelineScenario, runs: list[tuple[str, int, int, LevelRun]], out_dir: Path) -> list[Path]:
    """A timeline of one iteration of each schedule per workload run (policies that are not one of
    :data:`POLICIES`, e.g. a learned agent, have no fixed plan to draw), and iteration-time bars."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    policies = [p for p in dict.fromkeys(p for p, *_ in runs) if p in SCHEDULES]
    workloads = sorted({w for _, _, w, _ in runs})
    paths = []
    for w in workloads:
        name = scn.workloads[w].name
        panels = []
        for p in policies:
            r = steady_timeline(scn, p, w)
            panels.append((f"{p}: {r.iteration_ms:.0f} ms (incl. {scn.job.overhead_ms:.0f} ms overhead)",
                           r.timeline, scn.job.stages))
        paths.append(plots.timelines(panels, f"{scn.name} / {name}: last iteration",
                                     out_dir / f"timeline_{name}.png"))
    table: dict[str, dict[str, list[float]]] = {}
    for p, _, w, r in runs:
        table.setdefault(scn.workloads[w].name, {}).setdefault(p, []).append(r.metrics["iteration_time_ms"])
    means = {w: {p: float(np.mean(v)) for p, v in d.items()} for w, d in table.items()}
    paths.append(plots.iteration_bars(means, out_dir / "iteration_time.png"))
    return paths
