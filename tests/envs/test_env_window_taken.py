"""The window after a start, continued from the last ranked scan (``DecisionBuilder._refresh_taken``),
equals the window rescanned (``incremental_window = False``) and its definition."""

from __future__ import annotations

from collections import Counter

import gymnasium as gym
import numpy as np
import pytest

import gpusched_env  # noqa: F401  (registers the envs)
from gpusched_env.envs import ClusterEnv
from gpusched_env.envs.observe import DecisionBuilder
from tests.envs.test_env_window_scan import _window_by_definition  # the window's definition


@pytest.mark.parametrize(("slots", "fifo"), [(16, 8), (8, 2)])
def test_window_continued_after_a_start_equals_the_rescan(slots: int, fifo: int) -> None:
    """pal_philly, two envs stepped with the same actions (starts from random slots, the FIFO part
    and the least-work part both), one continuing the scan after each start and one rescanning:
    the same window, mask and observation at every step, equal to the definition; both kinds of
    start and the one-at-a-time scan are seen."""
    envs = [gym.make("gpusched/Cluster-v0", scenario="pal_philly", queue_slots=slots, fifo_slots=fifo)
            for _ in range(2)]
    us = [e.unwrapped for e in envs]
    assert all(isinstance(u, ClusterEnv) for u in us)
    rng = np.random.default_rng(3)
    seen: Counter[str] = Counter()
    scan_on = DecisionBuilder._scan_on
    calls = [0]

    def counted(self: DecisionBuilder, *a: int) -> int:
        calls[0] += 1
        return scan_on(self, *a)  # type: ignore[arg-type]

    DecisionBuilder._scan_on = counted  # type: ignore[method-assign]
    try:
        for ep in range(2):
            infos = [e.reset(seed=ep, options={"workload": 4 + ep, "run_seed": 30 + ep})[1] for e in envs]
            for _ in range(500):
                b0, b1 = us[0].builder, us[1].builder
                assert b0 is not None and b1 is not None
                b1.incremental_window = False
                if us[0]._over:
                    break
                assert b0._win_ids == b1._win_ids == _window_by_definition(b0)
                assert (infos[0]["action_mask"] == infos[1]["action_mask"]).all()
                assert (b0.observe() == b1.observe()).all()
                valid = np.flatnonzero(infos[0]["action_mask"])
                a = int(valid[int(rng.random() * valid.size)])
                if a != b0.done_action and b0._scanned is not None:
                    slot = a // b0.n_opts
                    seen["fifo" if slot < b0.fifo_slots else "tail"] += 1
                outs = [e.step(a) for e in envs]
                assert outs[0][1] == outs[1][1] and outs[0][2] == outs[1][2]
                infos = [o[4] for o in outs]
    finally:
        DecisionBuilder._scan_on = scan_on  # type: ignore[method-assign]
    assert seen["fifo"] > 20 and seen["tail"] > 20 and calls[0] > 0, (seen, calls)


def test_count_table_maps_gpu_counts_up_to_the_free_count() -> None:
    """The fit-code table against its definition, and by hand: 3 free GPUs, code 1."""
    from gpusched_env.envs.observe import count_table

    assert count_table(1, 3)[:6] == bytes([1, 1, 1, 1, 0, 0]) and len(count_table(1, 3)) == 256
    for fit in (1, 3):
        for n_free in (0, 1, 7, 254, 255, 256, 1000):
            assert count_table(fit, n_free) == bytes([fit if g <= n_free else 0 for g in range(256)])
