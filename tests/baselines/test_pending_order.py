"""The queue order kept between calls equals a fresh sort of the queue at every call."""

from __future__ import annotations

import numpy as np
import pytest
from bl_helpers import Progress, job, make_state, make_view

from gpusched.baselines.ordering import LasOrder, SjfOrder, SrtfOrder, TiresiasOrder
from gpusched.baselines.scheduler import _PendingOrder
from gpusched_env.types import Preempt, Start


@pytest.mark.parametrize("order", [SjfOrder(), SrtfOrder(), LasOrder(), TiresiasOrder(300.0)], ids=lambda o: o.name)
def test_kept_order_matches_a_fresh_sort(order):
    r = np.random.default_rng(np.random.SeedSequence(5))
    s = make_state(2, 4, max_jobs=1)
    prog = Progress(s)
    cache = _PendingOrder(order)
    jid, t, checked = 0, 0.0, 0
    for _ in range(80):
        t += 60.0
        for _ in range(int(r.integers(0, 3))):
            s.submit(job(jid, int(r.choice([1, 2])), t, work=float(r.integers(10, 1000))))
            jid += 1
        for j in list(s.running):  # running jobs gain service and progress; some finish or are preempted
            prog.attained[j] = prog.attained.get(j, 0.0) + 60.0 * s.jobs[j].num_gpus
            prog.done[j] = min(s.jobs[j].work_iters, prog.done.get(j, 0.0) + 50.0)
            u = r.random()
            if u < 0.2:
                s.finish(j)
            elif u < 0.4:
                s.apply([Preempt(j)], t)
        view = make_view(s, t, progress=prog)
        got = [j.job_id for j in cache.iter_pending(view)]
        assert got == [j.job_id for j in sorted(view.pending, key=lambda j: order(view, j))]
        checked += len(got)
        free = [g for g in range(8) if s.free_mask[g]]
        for j in list(view.pending)[:2]:  # start a couple of queued jobs where they fit
            if j.num_gpus <= len(free):
                s.apply([Start(j.job_id, tuple(free[: j.num_gpus]))], t)
                free = free[j.num_gpus:]
    assert checked > 100  # the queue was not trivially short


def test_enqueued_lists_every_entry_to_the_queue():
    s = make_state(1, 2)
    s.submit(job(0))
    s.submit(job(1))
    s.apply([Start(0, (0,))], 0.0)
    s.apply([Preempt(0)], 1.0)
    assert list(make_view(s).enqueued) == [0, 1, 0]
