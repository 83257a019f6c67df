"""Warm-up forward counts per stage: ZeroBubble's default and Adaptra's delay-aware rule."""

from __future__ import annotations

import math


def adaptra_warmup(f_ms: tuple[float, ...] | list[float], link_delay_ms: tuple[float, ...]) -> tuple[int, ...]:
    """Adaptra's rule (CALIBRATION.md): w[S-1] = 1, w[i] = w[i+1] + ceil(c_i / F_i) + 2,
    with c_i the extra delay of link (i, i+1) and F_i stage i's forward time."""
    S = len(f_ms)
    w = [1] * S
    for i in range(S - 2, -1, -1):
        c = link_delay_ms[i]
        extra = math.ceil(c / f_ms[i]) if c > 0 and f_ms[i] > 0 else 0
        w[i] = w[i + 1] + extra + 2
    return tuple(w)


def zb_warmup(stages: int) -> tuple[int, ...]:
    """ZeroBubble's default: the same rule with no delay, 2(S-1-i) + 1 (about 2S, down by 2 per stage)."""
    return tuple(2 * (stages - 1 - i) + 1 for i in range(stages))
