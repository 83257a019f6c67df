"""run_policy drives a run with fewer collector passes (gpusched_env.policy.quiet_gc) and restores
the collector's settings afterwards, also when the run raises."""

from __future__ import annotations

import gc

import pytest

from gpusched_env.policy import RUN_GC_GEN0, run_policy
from gpusched_env.types import Decision
from gpusched_env.view import ClusterView


class _Backend:
    """Three decision points; records the collector's settings at each."""

    def __init__(self, fail: bool = False) -> None:
        self.left, self.fail, self.seen = 3, fail, []

    def start(self, round_s: float | None, events: bool) -> None:
        pass

    def advance(self) -> bool:
        self.seen.append((gc.get_threshold()[0], gc.get_freeze_count() > 0))
        if self.fail and self.left == 1:
            raise RuntimeError("boom")
        self.left -= 1
        return self.left > 0

    def view(self) -> ClusterView:
        return None  # type: ignore[return-value]

    def apply(self, decisions: list[Decision]) -> None:
        pass


class _Policy:
    name, round_s, events = "none", None, True

    def decide(self, view: ClusterView) -> list[Decision]:
        return []


@pytest.mark.parametrize("fail", [False, True])
def test_run_policy_quiets_and_restores_the_collector(fail):
    before = gc.get_threshold()
    assert before[0] != RUN_GC_GEN0
    b = _Backend(fail)
    if fail:
        with pytest.raises(RuntimeError):
            run_policy(b, _Policy())  # type: ignore[arg-type]
    else:
        run_policy(b, _Policy())  # type: ignore[arg-type]
    assert b.seen == [(RUN_GC_GEN0, True)] * 3
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0
