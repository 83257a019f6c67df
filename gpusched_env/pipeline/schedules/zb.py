"""ZeroBubble (Qi et al., ICLR'24), as the Adaptra authors run it: B and W split, the warm-up +
B > F > W list scheduler with the default warm-up 2(S-1-s)+1, planned once for a healthy pipeline
(no link delay, no slowdown) and then run unchanged. Sends are GPU-driven (NCCL), one isend / irecv
per message on per-peer streams (:mod:`gpusched_env.pipeline.streams`).
"""

from __future__ import annotations

from functools import lru_cache

from gpusched_env.pipeline import greedy
from gpusched_env.pipeline.model import PipelineModel
from gpusched_env.pipeline.ops import Orders
from gpusched_env.pipeline.warmup import zb_warmup

COMM = "gpu"


def orders(model: PipelineModel) -> Orders:
    """The healthy-pipeline ZB orders of ``model``'s job (its delays and slowdowns are ignored)."""
    healthy = model.with_conditions(link_delay_ms=(0.0,) * (model.stages - 1), slowdown=(1.0,) * model.stages,
                                    comm="cpu", split_backward=True)
    return _plan(healthy)


@lru_cache(maxsize=64)
def _plan(healthy: PipelineModel) -> Orders:
    return greedy.plan(healthy, zb_warmup(healthy.stages))[0]
