"""1F1B (PipeDream-Flush / Megatron-LM): S-1-s warm-up forwards on stage s, then one forward and
one backward alternately, then the remaining backwards. The backward is not split: W runs right
after its B. Sends are GPU-driven (NCCL), as in Megatron (CALIBRATION.md, Adaptra baselines).
"""

from __future__ import annotations

from gpusched_env.pipeline.model import PipelineModel
from gpusched_env.pipeline.ops import B, F, Orders, W, op

COMM = "gpu"


def stage_order(stage: int, stages: int, microbatches: int) -> tuple[int, ...]:
    """1F1B order of one stage."""
    M = microbatches
    warm = min(stages - 1 - stage, M)
    seq = [op(F, m, M) for m in range(warm)]
    for i in range(M - warm):
        seq += [op(F, warm + i, M), op(B, i, M), op(W, i, M)]
    for i in range(M - warm, M):
        seq += [op(B, i, M), op(W, i, M)]
    return tuple(seq)


def orders(model: PipelineModel) -> Orders:
    """1F1B orders; stage s holds at most S - s micro-batches, so activation_limit must allow that."""
    S, M = model.stages, model.microbatches
    if model.activation_limit < min(S, M):
        raise ValueError(f"1f1b holds up to {min(S, M)} micro-batches on stage 0: activation_limit must be >= "
                         f"{min(S, M)}, got {model.activation_limit}")
    return tuple(stage_order(s, S, M) for s in range(S))
