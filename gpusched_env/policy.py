"""The two seams of gpusched: the policy interface and the backend protocol.

A policy never imports a backend and a backend never imports a policy; :func:`run_policy` joins them.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from gpusched_env.types import Decision
from gpusched_env.view import ClusterView


@runtime_checkable
class Policy(Protocol):
    """A scheduler. ``decide`` is called at every decision point with a read-only view.

    ``round_s``: if set, the backend also calls ``decide`` every ``round_s`` seconds (round-based
    policies such as PAL, LAS, Tiresias); events (arrivals, completions, failures) still call it
    unless ``events`` is False.
    """

    name: str
    round_s: float | None
    events: bool

    def decide(self, view: ClusterView) -> list[Decision]: ...


class Backend(Protocol):
    """Something that runs jobs: the simulator or the real cluster."""

    def start(self, round_s: float | None, events: bool) -> None:
        """Prepare the run; the first decision point is at the first arrival."""

    def advance(self) -> bool:
        """Run to the next decision point; False when the run is over."""

    def view(self) -> ClusterView: ...

    def apply(self, decisions: list[Decision]) -> None:
        """Validate and carry out a batch of decisions (raises InvalidDecision)."""


def run_policy(backend: Backend, policy: Policy) -> None:
    """Drive ``backend`` with ``policy`` until the run ends."""
    backend.start(policy.round_s, policy.events)
    while backend.advance():
        decisions = policy.decide(backend.view())
        if decisions:
            backend.apply(decisions)
