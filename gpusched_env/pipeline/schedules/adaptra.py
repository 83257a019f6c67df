"""Adaptra (Wu et al., arXiv 2504.19232): the warm-up + B > F > W list scheduler with the
delay-aware warm-up rule (:func:`~gpusched_env.pipeline.warmup.adaptra_warmup`), planned for the
link delays and stage times it believes in, with CPU-delegated sends. The runner re-plans when
the delay picture changes and applies the new plan from the next iteration.
"""

from __future__ import annotations

from functools import lru_cache

from gpusched_env.pipeline import greedy
from gpusched_env.pipeline.model import PipelineModel
from gpusched_env.pipeline.ops import Orders
from gpusched_env.pipeline.warmup import adaptra_warmup

COMM = "cpu"


def orders(belief: PipelineModel) -> Orders:
    """Orders planned for ``belief`` (the delays and slowdowns observed so far)."""
    return _plan(belief.with_conditions(comm="cpu", split_backward=True))


@lru_cache(maxsize=256)
def _plan(belief: PipelineModel) -> Orders:
    f_ms = belief.durations()[0]
    return greedy.plan(belief, adaptra_warmup(f_ms, belief.link_delay_ms))[0]
