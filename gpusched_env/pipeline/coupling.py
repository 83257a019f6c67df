"""The pipeline level as one function the cluster level can call (issue 14, item 6)."""

from __future__ import annotations

from gpusched_env.pipeline.execute import execute
from gpusched_env.pipeline.model import PipelineModel
from gpusched_env.pipeline.schedules import get
from gpusched_env.pipeline.spec import PipelineSpec


def iteration_time_ms(spec: PipelineSpec, link_delay_ms: tuple[float, ...] | list[float] = (),
                      slowdown: tuple[float, ...] | list[float] = (), overhead_ms: float = 0.0,
                      adapted: bool = True) -> float:
    """Steady-state iteration time (ms) of a pipeline job under per-link delays (S-1 values, ms) and
    per-stage slowdowns (S values >= 1, e.g. from the cluster's straggler process).

    The schedule is ``spec.schedule``; an adaptive one (adaptra) is planned for these very conditions
    when ``adapted`` (it has seen them for an iteration), else for a healthy pipeline.
    """
    sched = get(spec.schedule)
    base = sched.model_for(PipelineModel(spec, overhead_ms=overhead_ms))
    actual = base.with_conditions(tuple(link_delay_ms) or None, tuple(slowdown) or None)
    belief = actual if sched.adaptive and adapted else base
    return execute(actual, sched.orders(belief)).iteration_ms
