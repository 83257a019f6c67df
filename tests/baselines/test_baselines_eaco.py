"""EaCO: deadline-checked co-location, observe-and-undo, high-priority exclusivity."""

from __future__ import annotations

import numpy as np
from bl_helpers import Progress, job, make_state, make_view, run_on, step

from gpusched.baselines import get_policy
from gpusched.baselines.eaco import EaCO
from gpusched_env.types import Migrate, Preempt, Start

UTIL = np.array([0.5, 0.0])


def one_running(deadline: float | None, work: float = 1000.0):
    """GPU 0 runs job 0 alone at 10 it/s; GPU 1 is free; job 1 waits."""
    s = make_state(1, 2)
    s.submit(job(0, 1, 0.0, mem=4.0, work=work, deadline=deadline))
    run_on(s, 0, (0,))
    s.submit(job(1, 1, 0.0, mem=4.0))
    prog = Progress(s, ips={0: 10.0})
    return s, prog


def test_eaco_colocates_when_deadlines_hold():
    s, prog = one_running(deadline=1000.0)  # alone finish 100 s; x1.03 -> 103 s
    out = step(get_policy("eaco"), s, make_view(s, 0.0, progress=prog, util=UTIL))
    assert out == [Start(1, (0,))]  # consolidate on the busy GPU, leave GPU 1 idle


def test_eaco_refuses_colocation_that_breaks_a_deadline():
    s, prog = one_running(deadline=101.0)  # alone 100 s fits; with the 2-job slowdown 103 s does not
    out = step(get_policy("eaco"), s, make_view(s, 0.0, progress=prog, util=UTIL))
    assert out == [Start(1, (1,))]  # exclusive instead


def test_eaco_alpha_zero_never_trades_time_for_energy():
    s, prog = one_running(deadline=None)
    out = step(get_policy("eaco", alpha=0.0), s, make_view(s, 0.0, progress=prog, util=UTIL))
    assert out == [Start(1, (1,))]


def test_eaco_skips_gpus_over_thresholds():
    s, prog = one_running(deadline=None)
    out = step(get_policy("eaco"), s, make_view(s, 0.0, progress=prog, util=np.array([0.85, 0.0])))
    assert out == [Start(1, (1,))]  # GPU 0 at 85 % >= util_thr 0.8


def _colocated_then_observed(block_gpu1: bool):
    # t=0: job 0 has 38000 iterations left at 10 it/s alone: 3800 s, x1.03 = 3914 s <= deadline 4500.
    s = make_state(1, 2)
    s.submit(job(0, 1, 0.0, mem=4.0, work=38000.0, deadline=4500.0))
    run_on(s, 0, (0,))
    if block_gpu1:
        s.submit(job(2, 1, 0.0, mem=4.0, prio=1))
        run_on(s, 2, (1,))
    s.submit(job(1, 1, 0.0, mem=4.0))
    prog = Progress(s, ips={0: 10.0})
    pol = EaCO(epoch_s=3600.0)
    assert step(pol, s, make_view(s, 0.0, progress=prog, util=UTIL)) == [Start(1, (0,))]
    # Before the epoch ends nothing happens.
    prog.ips.update({0: 5.0, 1: 5.0})
    assert step(pol, s, make_view(s, 1800.0, progress=prog, util=UTIL)) == []
    # t=3600: 8000 iterations left, observed 5 it/s -> 5200 s > 4500; alone (10 it/s) 4400 s would fit.
    prog.done[0] = 30000.0
    out = step(pol, s, make_view(s, 3600.0, progress=prog, util=UTIL))
    return pol, out


def test_eaco_undoes_colocation_that_turns_out_to_miss_a_deadline():
    pol, out = _colocated_then_observed(block_gpu1=False)
    assert out == [Migrate(1, (1,))]  # back to an exclusive GPU, from its checkpoint
    # history at degree 2: job 0 observed 10 it/s alone / 5 it/s co-located = 2.0; the newcomer never
    # ran alone: catalogue speed (1 / 0.1754 s) / 5 it/s
    assert pol.history[("resnet50", 2)] == [2.0 + (1 / 0.1754) / 5.0, 2.0]


def test_eaco_undo_preempts_when_nowhere_else():
    _, out = _colocated_then_observed(block_gpu1=True)  # GPU 1 holds a high-priority job
    assert out == [Preempt(1)]


def test_eaco_high_priority_gets_exclusive_gpus():
    s = make_state(1, 2)
    s.submit(job(0, 1, 0.0, mem=4.0))
    run_on(s, 0, (0,))
    s.submit(job(1, 1, 0.0, mem=4.0, prio=1))
    s.submit(job(2, 1, 0.0, mem=4.0, model="alexnet"))  # catalogue utilisation 4.7 %
    s.submit(job(3, 1, 0.0, mem=4.0, model="alexnet"))
    out = step(get_policy("eaco"), s, make_view(s, 0.0, util=UTIL))
    # job 1 (high priority) -> free GPU 1; jobs 2, 3 co-locate on GPU 0, never with job 1
    assert out == [Start(1, (1,)), Start(2, (0,)), Start(3, (0,))]
    s.submit(job(4, 1, 1.0, mem=4.0))
    out = step(get_policy("eaco"), s, make_view(s, 1.0, util=np.array([0.85, 0.2])))
    assert out == []  # GPU 0 over util_thr 0.8, GPU 1 holds a high-priority job, nothing free
