"""GPipe (Huang et al., 2019): every forward, then every backward (B with its W right after).

Sends are GPU-driven (NCCL), as in the baselines of Adaptra's evaluation (CALIBRATION.md).
"""

from __future__ import annotations

from gpusched_env.pipeline.model import PipelineModel
from gpusched_env.pipeline.ops import B, F, Orders, W, op

COMM = "gpu"


def orders(model: PipelineModel) -> Orders:
    """All M forwards, then B, W per micro-batch in order; needs activation_limit >= M."""
    M = model.microbatches
    if model.activation_limit < M:
        raise ValueError(f"gpipe holds all {M} micro-batches: activation_limit must be >= {M}, got {model.activation_limit}")
    one = tuple(op(F, m, M) for m in range(M)) + tuple(c for m in range(M) for c in (op(B, m, M), op(W, m, M)))
    return (one,) * model.stages
