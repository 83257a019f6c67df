"""ZeroBubble with CPU-delegated communication only (Adaptra's ablation baseline): the ZB orders,
sends through host memory, so a slow link delays the receiver but never blocks the sender."""

from __future__ import annotations

from gpusched_env.pipeline.schedules.zb import orders

COMM = "cpu"

__all__ = ["COMM", "orders"]
