"""TGS's rate control (pkusys/TGS ``update_rate_limit`` / ``limit_manager``; Tally's port): hand-computed
limits after each HP report, and the throttle on the engine: a heavy BE job beside an HP service."""

from __future__ import annotations

import numpy as np
import pytest

from gpusched_env.device.engine import simulate
from gpusched_env.device.gpus import device_gpu
from gpusched_env.device.kernels import KernelSeq
from gpusched_env.device.mechanism import ClientSpec
from gpusched_env.device.mechanisms import make_mechanism
from gpusched_env.device.mechanisms.tgs import CONG_AVOID, SLOW_START, TgsConfig, TgsControl

R = 100_000.0  # HP's blocks per 5 s report, at its max


def _running(cfg: TgsConfig) -> TgsControl:
    """A controller past profiling, its max rate and its window at R."""
    ctl = TgsControl(cfg, max_rate=R)
    ctl.profiling, ctl.window = False, [R] * 5
    return ctl


def test_rate_control_reacts_to_a_throughput_drop_and_recovers() -> None:
    ctl = _running(TgsConfig())
    steps = [(R, 20000, SLOW_START),  # first report: LIMIT_INITIALIZER
             (R, 30001, SLOW_START),  # within 3 %: x1.5 + 1
             (R, 45002, SLOW_START),
             (95_000, 30001, CONG_AVOID),  # 5 % below the max: / 1.5, congestion avoidance
             (95_000, 27601, CONG_AVOID),  # still 5 % off: - max(8 %, 1000) = -2400
             (90_000, 2539, SLOW_START),  # 10 % off: -2208, and >= 9 % off: / 10, slow start again
             (R, 3809, SLOW_START),  # recovered: x1.5 + 1
             (R, 5714, SLOW_START)]
    for k, (recv, limit, state) in enumerate(steps):
        assert ctl.report(recv) == limit, k
        assert ctl.state == state, k
        assert ctl.max_rate == R  # the max is the window's largest pair mean: still R


def test_a_lasting_drop_over_20_percent_restarts_profiling() -> None:
    ctl = _running(TgsConfig())
    limits = [ctl.report(70_000.0) for _ in range(5)]
    # 20000; /1.5 = 13333; -1066 -> 12267 then /10 = 1226; /1.5 = 817; 817 - 1000 < 0 -> 0
    assert limits == [20000, 13333, 1226, 817, 0]
    assert not ctl.profiling
    ctl.report(70_000.0)  # the window is all 70000 now: 30 % below the max -> profile again
    assert ctl.profiling and ctl.limit == 0
    assert ctl.max_rate == pytest.approx(70_000 * 1.025)


def test_twenty_reports_12_percent_off_lower_the_max() -> None:
    ctl = _running(TgsConfig())
    for _ in range(20):  # the first sets the initial limit; the next 19 count 13 % deviations
        ctl.report(87_000.0)
    assert ctl.max_rate == R and ctl.diff_count == 19
    ctl.report(87_000.0)
    assert ctl.max_rate == 0.8 * R and ctl.diff_count == 0 and ctl.state == SLOW_START


def test_tallys_port_spins_to_the_controllers_fixed_point() -> None:
    cfg = TgsConfig(spin=True, max_profile_reports=100, tick_s=0.0)
    ctl = _running(cfg)
    assert ctl.report(R) == 1 << 40  # slow start to its cap at once
    ctl = _running(cfg)
    assert ctl.report(95_000.0) == 0  # 5 % below the max: decreased to nothing before the next report
    ctl = _running(cfg)
    # 15 % below: 20 spins >= 12 % off lower the max to 80000, the window's 85000 becomes the max,
    # and slow start lifts the limit to its cap
    assert ctl.report(85_000.0) == 1 << 40
    assert ctl.max_rate == 85_000.0


def _seq(dur: float, block: float) -> KernelSeq:
    one = np.ones(1)
    return KernelSeq(np.array([dur]), one, np.zeros(1), np.array([block]), np.zeros(1))


def test_throttle_keeps_the_hp_queue_stable_beside_a_heavy_be_job() -> None:
    """HP: a 1 ms full-GPU request every 1.5 ms (load 0.67); BE: back-to-back 4 ms full-GPU kernels.
    Under MPS each gets half the SMs whenever both run, so HP needs >= 2 ms per request: at most
    10 s / 2 ms = 5000 of its 6667 requests end. TGS profiles HP for its first 5 reports (25 s) with BE's
    limit at 0: one BE kernel per 50 ms window (the kernel that crosses the limit still launches), so BE
    runs <= 8 ms of each 50 ms, HP catches up in between and every request ends."""
    gpu = device_gpu("A100")
    arrivals = np.arange(0.0, 10.0, 1.5e-3)
    hp = ClientSpec("hp", "hp", _seq(1e-3, 1e-6), arrivals, priority=1)
    be = ClientSpec("be", "be", _seq(4e-3, 10e-6), None)
    mps = simulate(gpu, [hp, be], make_mechanism("mps"), 10.0)
    assert len(mps.client("hp").latencies_s) <= 5000
    tgs = simulate(gpu, [hp, be], make_mechanism("tgs"), 10.0)
    hp_stats, be_stats = tgs.client("hp"), tgs.client("be")
    assert len(hp_stats.latencies_s) == len(arrivals)  # every request ends (the last at ~10.0 s - 0.5 ms)
    assert max(hp_stats.latencies_s) < 10e-3  # no queue builds up
    assert be_stats.waits == 200  # one BE kernel launched per 50 ms window, 10 s / 50 ms
    assert be_stats.iterations == 199  # the last one, launched in the last window, still runs at 10 s
