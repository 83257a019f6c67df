"""Interference in the GPU's units, one effect per test, each against a hand-computed expectation."""

from __future__ import annotations

import numpy as np
import pytest

from gpusched_env.device.engine import rate, simulate
from gpusched_env.device.gpus import device_gpu
from gpusched_env.device.kernels import KernelSeq
from gpusched_env.device.mechanism import ClientSpec
from gpusched_env.device.mechanisms import make_mechanism

GPU = device_gpu("H100")


def seq(dur: float, sm: float, mem: float, block: float | None = None, n: int = 1, count: float = 1.0,
        busy: float = 1.0) -> KernelSeq:
    return KernelSeq(np.full(n, dur), np.full(n, sm), np.full(n, mem), np.full(n, block or dur), np.zeros(n),
                     np.full(n, count), np.full(n, busy))


def train(name: str, s: KernelSeq) -> ClientSpec:
    return ClientSpec(name, "be", s, None)


def test_two_bandwidth_bound_kernels_together_run_slower_than_alone() -> None:
    # each fills half the SMs and, memory-bound, draws the GPU's peak DRAM bandwidth alone (3350 GB/s):
    # together 2 x peak, so each runs at half speed: 500 instead of 1000 kernels of 1 ms per second
    k = seq(1e-3, sm=0.5, mem=1.0)
    alone = simulate(GPU, [train("a", k)], make_mechanism("mps"), 1.0)
    both = simulate(GPU, [train("a", k), train("b", k)], make_mechanism("mps"), 1.0)
    assert alone.clients[0].iterations == pytest.approx(1000, abs=1)
    assert [c.iterations for c in both.clients] == [pytest.approx(500, abs=1)] * 2


def test_two_compute_bound_small_kernels_do_not_slow_each_other() -> None:
    k = seq(1e-3, sm=0.5, mem=0.0)  # half the SMs each, no DRAM demand: both fit
    both = simulate(GPU, [train("a", k), train("b", k)], make_mechanism("mps"), 1.0)
    assert [c.iterations for c in both.clients] == [pytest.approx(1000, abs=1)] * 2


def _hp_beside_long_blocks(mech: str, arrival: float, block: float, params: dict | None = None) -> float:
    be = train("be", seq(10e-3, sm=1.0, mem=0.0, block=block))
    hp = ClientSpec("hp", "hp", seq(1e-3, sm=1.0, mem=0.0), np.array([arrival]), priority=1)
    st = simulate(GPU, [hp, be], make_mechanism(mech, params), 5e-3)
    return st.client("hp").max_wait_s


def test_hp_kernel_beside_long_be_blocks_waits_for_the_block_under_way() -> None:
    # BE's 0.5-ms blocks run back to back from t = 0; HP arrives at 0.8 ms, in the block begun at
    # 0.5 ms: running blocks are never preempted under MPS priority, so HP waits 0.2 ms (<= one block)
    assert _hp_beside_long_blocks("mps_priority", 0.8e-3, 0.5e-3) == pytest.approx(0.2e-3)
    assert _hp_beside_long_blocks("mps", 0.8e-3, 0.5e-3) == pytest.approx(0.2e-3)


def test_tally_preemption_waits_for_the_unit_under_way() -> None:
    sliced = {"ptb_overhead": 0.5, "slice_launch_s": 0.0}  # slicing is the faster transform (free)
    ptb = {"ptb_overhead": 0.0, "slice_launch_s": 4e-6}  # PTB is (free)
    # BE starts once HP has been idle 0.1 ms (t = 0.1 ms); at 0.8 ms it has done 0.7 ms of work
    # blocks of 0.5 ms (> L_max): the block under way ends 0.3 ms later, either way
    assert _hp_beside_long_blocks("tally", 0.8e-3, 0.5e-3, sliced) == pytest.approx(0.3e-3)
    assert _hp_beside_long_blocks("tally", 0.8e-3, 0.5e-3, ptb) == pytest.approx(0.3e-3)
    # blocks of 10 µs (< L_max = 31.6 µs), sliced: slices of 31.6 µs, 0.7 ms = 22 slices + 4.8 µs -> waits 26.8 µs
    assert _hp_beside_long_blocks("tally", 0.8e-3, 10e-6, sliced) == pytest.approx(31.6e-6 - (0.7e-3 - 22 * 31.6e-6))
    # as persistent thread blocks: at 0.803 ms, 70 blocks + 3 µs done -> the block under way ends 7 µs later
    assert _hp_beside_long_blocks("tally", 0.803e-3, 10e-6, ptb) == pytest.approx(7e-6)


def test_tally_picks_the_faster_transform() -> None:
    from gpusched_env.device.mechanisms.tally import TallyConfig

    cfg = TallyConfig(slice_launch_s=4e-6, ptb_overhead=0.05)
    assert cfg.slow(10e-6) == pytest.approx(1 / 1.05)  # slicing: 4 / 31.6 = 12.7 % > PTB's 5 %
    assert cfg.slow(400e-6) == pytest.approx(1 / 1.01)  # one 400-µs block per slice: 1 % < 5 %


def test_group_kernels_wait_for_pending_blocks() -> None:
    # an HP group of 41 kernels over 1 ms, busy half of it, on 20 % of the SMs; BE holds the other 80 %
    # with 0.1-ms blocks still pending. MPS priority: only the HP kernels issued after a host gap (half
    # of the 40 later ones) find their SMs taken and wait 0.8 x 0.05 ms = 40 µs (20 µs on average);
    # the group lasts max(1, 0.5 + 40 x 0.02 / 1) = 1.3 x its span
    assert rate(1.0, 0.0, 0.5, 41.0, 1e-3, 1.0, 20e-6) == pytest.approx(1 / 1.3)
    assert rate(1.0, 0.0, 0.5, 21.0, 1e-3, 1.0, 20e-6) == 1.0  # 0.5 + 0.4 < 1: the host gaps absorb it
    be = train("be", seq(10e-3, sm=1.0, mem=0.0, block=0.1e-3))
    hp = ClientSpec("hp", "hp", seq(1e-3, sm=0.2, mem=0.0, count=41.0, busy=0.5), np.array([0.05e-3]), priority=1)
    prio = simulate(GPU, [hp, be], make_mechanism("mps_priority"), 5e-3)
    # HP displaces BE at 0.05 ms, waits for the block under way (0.05 ms), then runs 1.3 ms
    assert prio.client("hp").latencies_s == [pytest.approx(0.05e-3 + 1.3e-3)]
    # plain MPS: BE's pending blocks compete for every SM HP frees: all 40 later kernels wait 40 µs,
    # 0.5 + 40 x 0.04 = 2.1 x the span
    mps = simulate(GPU, [hp, be], make_mechanism("mps"), 5e-3)
    assert mps.client("hp").latencies_s == [pytest.approx(0.05e-3 + 2.1e-3)]
