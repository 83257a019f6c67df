"""Closed-form toy cases of the device engine and its mechanisms."""

from __future__ import annotations

import numpy as np
import pytest

from gpusched_env.device.engine import simulate
from gpusched_env.device.gpus import device_gpu
from gpusched_env.device.kernels import KernelSeq
from gpusched_env.device.mechanism import ClientSpec
from gpusched_env.device.mechanisms import make_mechanism

GPU = device_gpu("A100")


def seq(dur: float = 1e-3, sm: float = 1.0, mem: float = 0.0, block: float | None = None, n: int = 1) -> KernelSeq:
    return KernelSeq(np.full(n, dur), np.full(n, sm), np.full(n, mem), np.full(n, block or dur), np.zeros(n))


def train(name: str, s: KernelSeq, cap: float = 1.0, priority: int = 0, role: str = "be") -> ClientSpec:
    return ClientSpec(name, role, s, None, priority=priority, sm_cap=cap)


def test_exclusive_equals_standalone() -> None:
    st = simulate(GPU, [train("a", seq(2e-3, n=5))], make_mechanism("exclusive"), 1.0)
    assert st.clients[0].iterations == 100  # 1 s / (5 x 2 ms)
    assert st.busy_s == pytest.approx(1.0)


def test_two_identical_clients_under_time_slicing_each_get_half() -> None:
    mech = make_mechanism("time_slicing", {"switch_s": 0.0})
    st = simulate(GPU, [train("a", seq(1e-3, n=10)), train("b", seq(1e-3, n=10))], mech, 2.0)
    a, b = (c.iterations for c in st.clients)
    assert a + b == pytest.approx(200, abs=1)  # the GPU never idles: 2 s / 10 ms
    assert a == pytest.approx(100, abs=1) and b == pytest.approx(100, abs=1)


def test_switch_cost_is_paid_per_switch() -> None:
    mech = make_mechanism("time_slicing", {"switch_s": 0.1e-3, "slice_s": 1e-3})
    st = simulate(GPU, [train("a", seq(10e-3)), train("b", seq(10e-3))], mech, 2.0)
    # every 1 ms slice costs 0.1 ms of switching: each client progresses 0.9 ms per 2 ms
    assert sum(c.iterations for c in st.clients) == pytest.approx(2.0 * (1.0 / 1.1) / 10e-3, rel=0.02)


def test_mps_thread_cap_limits_share() -> None:
    """A client capped at 30 % of the threads runs a full-GPU kernel at 30 % of its speed (rate = a/s)."""
    st = simulate(GPU, [train("a", seq(1e-3), cap=0.3)], make_mechanism("mps"), 1.0)
    assert st.clients[0].iterations == pytest.approx(300, abs=1)
    both = simulate(GPU, [train("a", seq(1e-3), cap=0.3), train("b", seq(1e-3), cap=0.7)], make_mechanism("mps"), 1.0)
    assert [c.iterations for c in both.clients] == [pytest.approx(300, abs=1), pytest.approx(700, abs=1)]


def test_mps_shares_sms_max_min_fairly_and_bandwidth_slows_memory_bound_kernels() -> None:
    st = simulate(GPU, [train("a", seq(1e-3)), train("b", seq(1e-3))], make_mechanism("mps"), 1.0)
    assert [c.iterations for c in st.clients] == [pytest.approx(500, abs=2), pytest.approx(500, abs=2)]
    heavy = simulate(GPU, [train("a", seq(1e-3, sm=0.5, mem=1.0)), train("b", seq(1e-3, sm=0.4, mem=0.5)),
                           train("c", seq(1e-3, sm=0.1, mem=0.0))], make_mechanism("mps"), 1.0)
    # DRAM demand 1 + 0.5 + 0 = 1.5 x peak: a's time x 1.5, b's x (0.5 + 0.5 x 1.5) = 1.25, c's x 1
    assert [c.iterations for c in heavy.clients] == [pytest.approx(1000 / 1.5, abs=2), pytest.approx(800, abs=2),
                                                     pytest.approx(1000, abs=2)]


def test_mps_priority_serves_high_priority_first() -> None:
    st = simulate(GPU, [train("lo", seq(1e-3), priority=0), train("hi", seq(1e-3), priority=1, role="hp")],
                  make_mechanism("mps_priority"), 1.0)
    lo, hi = (c.iterations for c in st.clients)
    assert lo == 0 and hi == pytest.approx(1000, abs=1)


def test_tally_hp_kernel_never_waits_longer_than_lmax_plus_one_block() -> None:
    be = train("be", seq(2e-3, block=0.5e-3, n=4))
    arr = np.arange(0.0005, 1.0, 0.0071)  # requests land in the middle of BE kernels
    hp = ClientSpec("hp", "hp", seq(1e-3, sm=0.5, n=2), arr, priority=1)
    mech = make_mechanism("tally")
    st = simulate(GPU, [hp, be], mech, 1.0)
    hps = st.client("hp")
    assert len(hps.latencies_s) == len(arr) - 1 or len(hps.latencies_s) == len(arr)
    assert 0 < hps.max_wait_s <= 0.5e-3  # blocks longer than L_max: preempted at the end of the block under way
    assert st.client("be").iterations > 0


def test_tally_runs_be_only_after_hp_idleness() -> None:
    arr = np.arange(0.0, 1.0, 2e-3)  # HP busy 1 ms of every 2 ms
    hp = ClientSpec("hp", "hp", seq(1e-3, sm=0.2), arr, priority=1)
    be = train("be", seq(0.1e-3, block=0.02e-3))
    st = simulate(GPU, [hp, be], make_mechanism("tally", {"ptb_overhead": 0.0, "slice_launch_s": 0.0}), 1.0)
    # BE gets the 1 ms idle gaps minus the 0.1 ms idleness wait: 0.9 ms per 2 ms at 0.1 ms per iteration
    assert st.client("be").iterations == pytest.approx(500 * 9, rel=0.02)
    assert max(st.client("hp").latencies_s) == pytest.approx(1e-3, rel=0.02)


@pytest.mark.parametrize("mechanism", ["time_slicing", "mps", "mps_priority", "tgs", "tally"])
def test_run_is_step_in_a_loop(mechanism: str) -> None:
    """DeviceSim.run writes step's event loop out inline: both must give the same run, float for float."""
    from dataclasses import asdict

    from gpusched_env.device.engine import DeviceSim
    from gpusched_env.device.pairs import PairSetup, clients
    from gpusched_env.device.service import ServiceSpec

    pair = clients(PairSetup("A100", "bert_inf", "gpt2_large_train", ServiceSpec(load=0.5), 1.0), 0)
    ran = DeviceSim(GPU, pair, make_mechanism(mechanism)).run(1.0)
    sim = DeviceSim(GPU, pair, make_mechanism(mechanism))
    steps = 0
    while sim.step(1.0):
        steps += 1
    assert steps > 100  # a run of many events
    assert asdict(ran) == asdict(sim.finish())
