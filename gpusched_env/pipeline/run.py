"""Run a schedule over a workload's iterations and summarise it in the scenario's metrics."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpusched_env.pipeline.dynamics import Workload, conditions
from gpusched_env.pipeline.execute import IterationResult, execute
from gpusched_env.pipeline.model import PipelineModel
from gpusched_env.pipeline.schedules import Schedule


@dataclass(frozen=True)
class RunSettings:
    """What a run needs besides the schedule and the workload (from ``scenario.job/dynamics``)."""

    model: PipelineModel  # the healthy job
    microbatch_size: int = 1
    restart_ms: float = 20_000.0
    host_path_delay_ms: float = 10.0
    jitter_cv: float = 0.0
    replan_ms: float = 0.0  # an adaptive schedule pays this in each iteration that runs a new plan


@dataclass(frozen=True)
class RunSummary:
    """Per-iteration times (ms, restarts included) and per-iteration results of a run."""

    iteration_ms: tuple[float, ...]
    results: tuple[IterationResult, ...]
    restarts: int

    def metrics(self, samples_per_iteration: int) -> dict[str, float]:
        """``iteration_time_ms`` (mean), ``throughput_samples_s``, bubble fractions, peak memory."""
        n, total_ms = len(self.iteration_ms), float(sum(self.iteration_ms))
        bubbles = np.mean([r.bubble_fraction for r in self.results], axis=0)
        out = {
            "iteration_time_ms": total_ms / n,
            "throughput_samples_s": n * samples_per_iteration / (total_ms / 1000.0),
            "bubble_fraction": float(bubbles.mean()),
            "peak_activations_microbatches": float(max(max(r.peak_activations) for r in self.results)),
            "restarts": float(self.restarts),
        }
        out.update({f"bubble_fraction_s{s}": float(b) for s, b in enumerate(bubbles)})
        return out


def jitter_scales(rng: np.random.Generator | None, cv: float, stages: int, microbatches: int):
    """Per-op time factors ``[kind][stage][mb]`` ~ max(0.5, N(1, cv)), or None when ``cv`` is 0."""
    if rng is None or cv <= 0:
        return None
    return np.maximum(0.5, rng.normal(1.0, cv, (3, stages, microbatches))).tolist()


def run_workload(settings: RunSettings, schedule: Schedule, wl: Workload,
                 rng: np.random.Generator | None = None) -> RunSummary:
    """Each iteration runs under that iteration's conditions. An adaptive schedule plans for the
    conditions it observed in the previous iteration (a healthy pipeline before the first); others
    plan once for the healthy job. GPU-driven sends turn a NIC failure into a restart."""
    base = schedule.model_for(settings.model)
    S, M = base.stages, base.microbatches
    host = settings.host_path_delay_ms if schedule.comm == "cpu" else None
    seen = (base.link_delay_ms, base.slowdown)
    planned = seen
    times, results, restarts = [], [], 0
    for i in range(wl.iterations):
        delay, slow = conditions(wl, i, S, host)
        belief = base.with_conditions(*seen) if schedule.adaptive else base
        actual = base.with_conditions(delay, slow)
        r = execute(actual, schedule.orders(belief), jitter_scales(rng, settings.jitter_cv, S, M))
        t = r.iteration_ms
        if schedule.adaptive and seen != planned:  # a new plan: its planning time is paid once
            t += settings.replan_ms
            planned = seen
        if wl.nic_failure is not None and host is None and i == wl.nic_failure.at:
            t += settings.restart_ms
            restarts += 1
        times.append(t)
        results.append(r)
        seen = (delay, slow)
    return RunSummary(tuple(times), tuple(results), restarts)
