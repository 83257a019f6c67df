"""A kernel group's members under an SM ceiling, and blocks held back by an MPS cap (hand-computed)."""

from __future__ import annotations

import numpy as np
import pytest

from gpusched_env.device.engine import simulate
from gpusched_env.device.gpus import device_gpu
from gpusched_env.device.kernels import KernelSeq, group
from gpusched_env.device.mechanism import ClientSpec
from gpusched_env.device.mechanisms import make_mechanism

GPU = device_gpu("H100")
MS = 1e-3


def two_members() -> KernelSeq:
    """One group of two 1-ms kernels, back to back: SM demands 1.0 and 0.2 (group mean 0.6)."""
    raw = KernelSeq(np.array([MS, MS]), np.array([1.0, 0.2]), np.zeros(2), np.array([40e-6, 40e-6]), np.zeros(2))
    g = group(raw, 2 * MS, 1.0)
    assert len(g) == 1 and g.sm[0] == pytest.approx(0.6) and g.count[0] == 2
    return g


def test_members_under_a_cap_each_keep_their_own_demand() -> None:
    # cap 0.5: the full-GPU member runs 1 / 0.5 = 2x longer (2 ms), the 0.2 one as alone (1 ms):
    # 3 ms per iteration, 333 in 1 s (the group mean 0.6 / 0.5 would give 2.4 ms, 416)
    st = simulate(GPU, [ClientSpec("be", "be", two_members(), sm_cap=0.5)], make_mechanism("mps"), 1.0)
    assert st.clients[0].iterations == 333


def test_members_served_second_get_what_the_co_runner_leaves() -> None:
    # beside a co-runner of demand 0.3 (one long kernel, served first: the smaller demand), the group
    # (mean 0.6) may hold up to 1 - 0.3 = 0.7: its full member runs 1 / 0.7 longer, 1.4286 + 1 ms per
    # iteration: 411 in 1 s (the group mean, 0.6 <= 0.7, would give no slowdown: 500)
    other = KernelSeq(np.array([10.0]), np.array([0.3]), np.zeros(1), np.array([40e-6]), np.zeros(1))
    st = simulate(GPU, [ClientSpec("a", "be", other), ClientSpec("be", "be", two_members())], make_mechanism("mps"), 1.0)
    assert st.clients[1].iterations == 411


def test_blocks_held_back_by_a_cap_never_delay_a_co_runner() -> None:
    # BE fills the GPU but is capped at half of it: its pending blocks cannot take the SMs HP's kernels
    # free, so HP's 11 kernels (demand 0.4, busy 1, 1 ms) never wait: latency 1 ms exactly (were BE
    # uncapped-pending: 10 later kernels x 0.5 x 0.5 x 40 us = 0.1 ms more)
    be = KernelSeq(np.array([10.0]), np.ones(1), np.zeros(1), np.array([40e-6]), np.zeros(1))
    hp_seq = KernelSeq(np.array([MS]), np.array([0.4]), np.zeros(1), np.array([40e-6]), np.zeros(1),
                       np.array([11.0]), np.ones(1))
    hp = ClientSpec("hp", "hp", hp_seq, np.array([0.5 * MS]), priority=1)
    st = simulate(GPU, [hp, ClientSpec("be", "be", be, sm_cap=0.5)], make_mechanism("mps"), 5 * MS)
    assert st.clients[0].latencies_s == [pytest.approx(MS)]
