"""Response latency (arrival -> completion) and service latency (first kernel issued -> completion)."""

from __future__ import annotations

import numpy as np
import pytest

from gpusched_env.device.engine import simulate
from gpusched_env.device.gpus import device_gpu
from gpusched_env.device.kernels import KernelSeq
from gpusched_env.device.mechanism import ClientSpec
from gpusched_env.device.mechanisms import make_mechanism
from gpusched_env.device.pairs import pair_metrics
from gpusched_env.device.stats import ClientStats, RunStats

GPU = device_gpu("A100")


def two_kernels() -> KernelSeq:
    """A request of two 1-ms full-GPU kernels, both issued at its start."""
    return KernelSeq(np.full(2, 1e-3), np.ones(2), np.zeros(2), np.full(2, 1e-3), np.zeros(2))


def test_two_requests_response_vs_service() -> None:
    # request 1 arrives at 0 and runs 0-2 ms; request 2 arrives at 0.5 ms, queues, runs 2-4 ms
    hp = ClientSpec("hp", "hp", two_kernels(), np.array([0.0, 0.5e-3]), priority=1)
    st = simulate(GPU, [hp], make_mechanism("exclusive"), 0.01).client("hp")
    assert st.latencies_s == [pytest.approx(2e-3), pytest.approx(3.5e-3)]
    assert st.service_s == [pytest.approx(2e-3), pytest.approx(2e-3)]


def _run(lat_ms: list[float], svc_ms: list[float], role: str = "hp") -> RunStats:
    c = ClientStats("hp", "hp", latencies_s=[x / 1e3 for x in lat_ms], service_s=[x / 1e3 for x in svc_ms])
    be = ClientStats("be", "be", iterations=10)
    return RunStats("A100", "x", elapsed_s=1.0, busy_s=1.0, clients=[c, be])


def test_pair_metrics_name_both_latencies() -> None:
    solo = _run([2.0, 3.5], [2.0, 2.0])
    shared = _run([3.0, 6.0], [2.5, 3.0])
    m, _ = pair_metrics([shared], solo, solo, GPU, exclusive=False)
    # numpy's linear p99 of two values a < b is a + 0.99 (b - a)
    assert m["hp_p99_ms"] == pytest.approx(3.0 + 0.99 * 3.0)
    assert m["hp_p99_ratio"] == pytest.approx((3.0 + 0.99 * 3.0) / (2.0 + 0.99 * 1.5))
    assert m["hp_service_p99_ms"] == pytest.approx(2.5 + 0.99 * 0.5)
    assert m["hp_service_p99_ratio"] == pytest.approx((2.5 + 0.99 * 0.5) / 2.0)
    assert m["hp_mean_ms"] == pytest.approx(4.5)
    assert m["hp_mean_ratio"] == pytest.approx(4.5 / 2.75)
