"""The window carried from one candidate decision point to the next (``DecisionBuilder._carry``)
equals the window rescanned at every point (``carried_window = False``) and its definition, at
every candidate point: those passed over (no valid start) as well as those the agent sees; a
point's working copy made anew in the last one's objects (``WorkingState.reset``) equals a new one;
step's observation and info written out equal ``builder_obs`` and ``_info``'s."""

from __future__ import annotations

from collections import Counter
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import gpusched_env  # noqa: F401  (registers the envs)
from gpusched_env.envs import ClusterEnv
from gpusched_env.envs.observe import DecisionBuilder
from gpusched_env.envs.options import WorkingState
from gpusched_env.types import WHOLE_GPU, Start
from tests.envs.test_env_window_scan import _window_by_definition  # the window's definition


@pytest.mark.parametrize(("slots", "fifo"), [(16, 8), (8, 2)])
def test_window_carried_to_the_next_point_equals_the_rescan(slots: int, fifo: int) -> None:
    """pal_philly, two envs stepped with the same random actions, one carrying the window from
    point to point and one rescanning: at every aim (every candidate point) the same window, scan
    position and validity, equal to the definition; carried windows with and without new queue
    entries and with starts taken at the point before, and rescans, all seen."""
    envs = [gym.make("gpusched/Cluster-v0", scenario="pal_philly", queue_slots=slots, fifo_slots=fifo)
            for _ in range(2)]
    us = [e.unwrapped for e in envs]
    assert all(isinstance(u, ClusterEnv) for u in us)
    aims: dict[int, list[tuple[Any, ...]]] = {0: [], 1: []}
    seen: Counter[str] = Counter()
    aim, carry = DecisionBuilder.aim, DecisionBuilder._carry

    def recorded(self: DecisionBuilder, view: Any) -> DecisionBuilder:
        out = aim(self, view)
        side = 1 if self.cache is us[1]._jobs else 0  # (one job cache per env, across its runs)
        scanned = self._scanned
        aims[side].append((list(self._win_ids), None if scanned is None else (scanned[0], scanned[1], list(scanned[2])),
                           self.any_valid()))
        assert self._win_ids == _window_by_definition(self)
        fit, sizes = self._count_fit, [self.cache.gpus_l[i] for i in self._win_ids]
        assert fit and self._codes == bytes(fit if g <= self._n_free else 0 for g in sizes)  # (count-only codes)
        assert aims[side][-1][2] == any(g <= self._n_free for g in sizes)
        return out

    def counted(self: DecisionBuilder, last: Any, gone: set[int], enq: list[int], deq: list[int]) -> bool:
        n_new, n_gone = len(enq) - self._mark[2], len(gone)
        ok = carry(self, last, gone, enq, deq)
        seen[f"carried{'+new' if n_new else ''}{'+gone' if n_gone else ''}" if ok else "rescanned"] += 1
        return ok

    placed: list[tuple[int, ...]] = []
    take = WorkingState.take
    starts = invalid = 0

    def taken(self: WorkingState, job: Any, gpus: tuple[int, ...]) -> int:
        placed.append(gpus)  # (the GPUs a start takes in the working copy)
        return take(self, job, gpus)

    WorkingState.take = taken  # type: ignore[method-assign]
    DecisionBuilder.aim = recorded  # type: ignore[method-assign]
    DecisionBuilder._carry = counted  # type: ignore[method-assign]
    rng = np.random.default_rng(7)
    try:
        for ep in range(2):
            infos = [e.reset(seed=ep, options={"workload": 2 + ep, "run_seed": 40 + ep})[1] for e in envs]
            for _ in range(400):
                if us[0]._over:
                    break
                b1 = us[1]._point
                assert b1 is not None
                b1.carried_window = False
                b1.reuse_working_state = False
                us[1]._plain_out = False  # (step's observation and info through builder_obs and _info)
                b0 = us[0].builder
                assert b0 is not None
                valid = np.flatnonzero(infos[0]["action_mask"])
                a = int(valid[int(rng.random() * valid.size)])
                if rng.random() < 0.03 and not infos[0]["action_mask"].all():  # now and then an invalid one
                    a = int(np.flatnonzero(~infos[0]["action_mask"])[0])
                    invalid += 1
                decs, placed[:] = b0.decisions, []
                slot = a // b0.n_opts
                jid = b0._win_ids[slot] if a != b0.done_action and slot < len(b0._win_ids) else -1
                outs = [e.step(a) for e in envs]
                if jid >= 0 and not outs[0][4]["invalid_action"]:  # the start built field by field: as Start(job_id, gpus) with the placed GPUs
                    assert decs[-1] == Start(jid, placed[0]) and decs[-1].sharing is WHOLE_GPU
                    starts += 1
                assert outs[0][1] == outs[1][1] and outs[0][2] == outs[1][2]
                assert (outs[0][0] == outs[1][0]).all()
                infos = [o[4] for o in outs]
                assert (infos[0]["action_mask"] == infos[1]["action_mask"]).all()
                assert {k: v for k, v in infos[0].items() if k != "action_mask"} == {
                    k: v for k, v in infos[1].items() if k != "action_mask"}
                assert outs[0][3] == outs[1][3] and infos[0]["time_s"] == us[0].sim.env.now  # type: ignore[union-attr]
    finally:
        DecisionBuilder.aim = aim  # type: ignore[method-assign]
        DecisionBuilder._carry = carry  # type: ignore[method-assign]
        WorkingState.take = take  # type: ignore[method-assign]
    assert starts > 100 and invalid > 5, (starts, invalid)
    assert len(aims[0]) == len(aims[1]) > 300
    assert aims[0] == aims[1]
    passed_over = sum(not v for _, _, v in aims[0])
    assert passed_over > 50, passed_over
    assert seen["carried"] > 20 and seen["carried+new"] > 20 and seen["carried+gone"] > 20, seen
    assert seen["carried+new+gone"] > 0 and seen["rescanned"] > 0, seen


def test_working_state_reset_equals_a_new_one() -> None:
    """pal_philly at its first point: a working copy after two starts (memory and added utilisation
    read, so made) differs from a new one; reset, it equals a new one in every array, and the
    builder's next point reuses its objects."""
    from gpusched_env.envs.options import WorkingState
    from gpusched_env.placement import PlacementContext

    env = gym.make("gpusched/Cluster-v0", scenario="pal_philly")
    u = env.unwrapped
    assert isinstance(u, ClusterEnv)
    env.reset(seed=0, options={"workload": 0, "run_seed": 3})
    b = u.builder
    assert b is not None
    ws = b.ws
    free = np.flatnonzero(ws.ctx.free)
    for jid, gpus in ((b._win_ids[0], free[:2]), (b._win_ids[0], free[2:3])):  # (the same job twice)
        ws.take(b._jobs_of[jid], tuple(int(g) for g in gpus))
    arrays = ("ctx.free", "n_res", "mem_used", "added_util", "high_priority")

    def values(w: WorkingState) -> list[list[float]]:
        return [np.asarray(w.ctx.free if a == "ctx.free" else getattr(w, a), dtype=float).tolist() for a in arrays]

    new = values(WorkingState(PlacementContext(b.view)))
    taken = values(ws)
    assert taken[0] != new[0] and taken[1] != new[1] and taken[3] != new[3]
    assert sum(new[0]) - sum(taken[0]) == 3 and sum(taken[1]) - sum(new[1]) == 3
    ws.reset()
    assert values(ws) == new
    b.aim(b.view)
    assert b.ws is ws and values(ws) == new
