"""Time slicing: hand-over when the active context runs out of work, turns as a cycle average,
a request waiting for the running context's slice (hand-computed)."""

from __future__ import annotations

import numpy as np
import pytest

from gpusched_env.device.engine import DeviceSim
from gpusched_env.device.gpus import device_gpu
from gpusched_env.device.kernels import KernelSeq
from gpusched_env.device.mechanism import READY, BaseMechanism, ClientSpec, ClientView, Grant
from gpusched_env.device.mechanisms import make_mechanism
from gpusched_env.device.mechanisms.time_slicing import time_shares

GPU = device_gpu("H100")
MS = 1e-3


def one(dur: float, busy: float = 1.0, sm: float = 1.0, count: int = 1) -> KernelSeq:
    """One kernel group: ``count`` kernels, busy ``busy`` of its span, 40 µs blocks."""
    return KernelSeq(np.array([dur]), np.array([sm]), np.zeros(1), np.array([min(dur, 40e-6)]), np.zeros(1),
                     np.array([float(count)]), np.array([busy]))


def test_time_shares_hand_computed() -> None:
    # busy 0.4 and 1.0, slice 1 ms, switch 0.1 ms: the busy one is saturated (turn 1 ms); the cycle
    # L = (1 + 2 x 0.1) / (1 - 0.4) = 2 ms; the other's turn 0.4 x 2 = 0.8 ms <= 1 ms fits
    assert time_shares([0.4, 1.0], 1 * MS, 0.1 * MS) == [pytest.approx(0.4), pytest.approx(0.5)]
    # both saturated: each 1 / (2 x 1.1)
    assert time_shares([1.0, 0.9], 1 * MS, 0.1 * MS) == [pytest.approx(1 / 2.2)] * 2
    # neither saturated and no switch cost: each gets its busy share
    assert time_shares([0.3, 0.5], 1 * MS, 0.0) == [pytest.approx(0.3), pytest.approx(0.5)]
    # three: 0.2 fits, 0.9 and 1.0 saturate: L = (2 x 1 + 3 x 0.1) / (1 - 0.2) = 2.875 ms; 0.2 x L = 0.575 <= 1
    assert time_shares([0.9, 0.2, 1.0], 1 * MS, 0.1 * MS) == [pytest.approx(1 / 2.875), pytest.approx(0.2),
                                                               pytest.approx(1 / 2.875)]


def _pair(arrivals: list[float]) -> DeviceSim:
    # 10 kernels in HP's group: they never wait for BE's blocks (the contexts take turns)
    hp = ClientSpec("hp", "hp", one(2 * MS, busy=0.4, sm=0.4, count=10), np.array(arrivals), priority=1)
    be = ClientSpec("be", "be", one(10 * MS))
    return DeviceSim(GPU, [hp, be], make_mechanism("time_slicing", {"slice_s": 1 * MS, "switch_s": 0.1 * MS}))


def test_request_waits_for_the_running_slice_then_runs_host_bound_beside_it() -> None:
    sim = _pair([2.3 * MS])
    sim.run(6 * MS)
    hp, be = sim.clients
    # BE alone since 0: slices end at 1, 2, 3 ms; the request (2.3 ms) waits to 3 ms, then the switch
    # (0.1 ms); its group (busy 0.4) gets its share 0.4 of the time: host-bound, done at 3.1 + 2 = 5.1 ms
    assert hp.stats.latencies_s == [pytest.approx(2.8 * MS)]
    # BE: full speed to 3 ms, then half the time (the cycle of a saturated context beside busy 0.4,
    # slice 1, switch 0.1: 1 / 2) to 5.1 ms, then full again: 3 + 2.1 x 0.5 + 0.9 = 4.95 ms done
    assert be.remaining == pytest.approx(10 * MS - 4.95 * MS)


def test_a_queued_request_waits_a_fresh_slice_of_the_context_that_got_the_gpu() -> None:
    sim = _pair([2.3 * MS, 2.4 * MS])
    sim.run(10 * MS)
    # the first ends at 5.1 ms with its queue empty: BE gets the GPU and a fresh slice (to 6.1 ms);
    # the second then switches in (6.2 ms) and runs 2 ms: done at 8.2 ms, 5.8 ms after its arrival
    assert sim.clients[0].stats.latencies_s == [pytest.approx(2.8 * MS), pytest.approx(5.8 * MS)]


def test_alone_on_the_gpu_a_request_starts_at_once() -> None:
    hp = ClientSpec("hp", "hp", one(2 * MS, busy=0.4, sm=0.4), np.array([1 * MS]), priority=1)
    sim = DeviceSim(GPU, [hp], make_mechanism("time_slicing", {"slice_s": 1 * MS, "switch_s": 0.1 * MS}))
    sim.run(5 * MS)
    assert sim.clients[0].stats.latencies_s == [pytest.approx(2 * MS)]


class _PerKernel(BaseMechanism):
    """The same hardware rule event by event (a reference for per-kernel sequences): the active context
    runs alone until its slice ends or it has nothing queued or running, then the next one with work."""

    name = "time_slicing_per_kernel"

    def __init__(self, slice_s: float = 1.024e-3, switch_s: float = 25e-6) -> None:
        self.slice_s, self.switch_s = slice_s, switch_s

    def reset(self, clients, gpu) -> None:  # type: ignore[no-untyped-def]
        super().reset(clients, gpu)
        self.active, self.slice_end, self.switched_until = 0, self.slice_s, 0.0

    def plan(self, t: float, clients) -> tuple[list[Grant], float]:  # type: ignore[no-untyped-def]
        n, a = len(clients), self.active
        nxt = next(((a + k) % n for k in range(1, n) if clients[(a + k) % n].phase >= READY), -1)
        grants = [Grant(False)] * n
        if nxt < 0:
            if self.slice_end <= t:
                self.slice_end += self.slice_s * (1 + (t - self.slice_end) // self.slice_s)
            grants[a] = Grant(True)
            return grants, float("inf")
        if clients[a].phase < READY or t >= self.slice_end - 1e-15:
            self.active = a = nxt
            self.slice_end, self.switched_until = t + self.slice_s, t + self.switch_s
        grants[a] = Grant(True)
        return grants, self.slice_end

    def launch_delay(self, t: float, i: int, displaced, clients: list[ClientView]) -> float:  # type: ignore[no-untyped-def]
        return max(0.0, self.switched_until - t)


@pytest.mark.slow
def test_cycle_average_agrees_with_the_per_kernel_rule_on_an_h100_pair() -> None:
    """Grouped kernels under time slicing vs every kernel under the event-by-event rule (3 s, seed 0):
    HP mean latency ratio within 15 %, BE throughput within 10 % (measured: 1.269 vs 1.251, 0.762 vs 0.762)."""
    from gpusched_env.device import pairs
    from gpusched_env.device.engine import simulate
    from gpusched_env.device.pairs import Grouping, PairSetup
    from gpusched_env.device.service import ServiceSpec

    out = []
    for grouping, mech in ((Grouping(), make_mechanism("time_slicing")),
                           (Grouping(hp_groups=1e9, be_groups=1e9), _PerKernel())):
        setup = PairSetup("H100", "resnet50_inf", "resnet50_train", ServiceSpec(), 3.0, grouping)
        hp, be = pairs.clients(setup, 0)
        hs, bs = pairs.standalone(setup, 0)
        st = simulate(GPU, [hp, be], mech, 3.0)
        out.append(pairs.pair_metrics([st], hs, bs, GPU, False)[0])
    grouped, per_kernel = out
    assert grouped["hp_mean_ratio"] == pytest.approx(per_kernel["hp_mean_ratio"], rel=0.15)
    assert grouped["be_norm_throughput"] == pytest.approx(per_kernel["be_norm_throughput"], rel=0.10)
