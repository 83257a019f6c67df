"""The one round rule of every round-based scheduler: the round-based heuristics
(:class:`gpusched.baselines.scheduler.QueueScheduler`), ``gpusched/Cluster-v1``'s round points and the agent
adapter all ask a :class:`RoundClock`, so their rounds coincide."""

from __future__ import annotations

ROUND_EPS_S = 1e-3
"""A call is a round when at least ``round_s`` minus this has passed since the last round (so a call
scheduled exactly ``round_s`` later is a round despite float rounding)."""


class RoundClock:
    """The first call is a round, then the first call at least ``round_s`` (minus 1 ms) after the last
    round. Every candidate decision point must be shown to it (a round-based heuristic is called at
    every one). ``round_s=None``: every call is a round."""

    def __init__(self, round_s: float | None) -> None:
        self.round_s = None if round_s is None else float(round_s)
        self.last: float | None = None

    def tick(self, now: float) -> bool:
        """Whether the call at ``now`` is a round (and if so, remember it as the last one)."""
        r = self.round_s
        if r is None or self.last is None or now >= self.last + r - ROUND_EPS_S:
            self.last = now
            return True
        return False
