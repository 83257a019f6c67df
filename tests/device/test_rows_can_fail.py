"""Every paper-vs-sim row of the device scenarios can fail: a plausible wrong model moves it out of
its tolerance (the issue's targets: a factor of 1.5 on Tally's and TGS's p99 overheads, Tally's system
throughput >= 80 % of TGS's, DARIS's throughput within 25 %). Each test runs the row's computation on
one pair or taskset, the one named, so it stays fast; the scenario rows average over all of them."""

from __future__ import annotations

from dataclasses import replace

import pytest
import yaml

from gpusched_env.config_util import CONF_DIR
from gpusched_env.device import engine
from gpusched_env.device.daris.scenario import DarisScenario, run_taskset
from gpusched_env.device.daris.scheduler import DarisConfig
from gpusched_env.device.gpus import device_gpu
from gpusched_env.device.mechanism import RUN, ClientView, Grant
from gpusched_env.device.mechanisms.tally import Tally
from gpusched_env.device.pairs import PairSetup, clients, pair_metrics, run_pair, standalone
from gpusched_env.device.service import ServiceSpec

PAIR = PairSetup("A100", "bert_inf", "resnet50_train", ServiceSpec(load=0.5), 5.0)
TALLY_P99, TGS_P99 = 0.072, 1.889  # CALIBRATION.md (Tally)
# TGS as tally_pairs runs it (Tally's port of TGS's rate control)
TGS = yaml.safe_load((CONF_DIR / "scenario" / "tally_pairs.yaml").read_text())["mechanisms"]["tgs"]


class TallyWithoutPreemption(Tally):
    """Wrong model: a running BE kernel keeps its blocks when HP arrives (as under MPS priority)."""

    def plan(self, t: float, cl: list[ClientView]) -> tuple[list[Grant], float]:  # type: ignore[override]
        grants, wake = super().plan(t, cl)
        return [Grant(True, g.cap, g.level, g.slow) if c.spec.role == "be" and c.phase == RUN else g
                for c, g in zip(cl, grants, strict=True)], wake


def _overhead(m: dict[str, float]) -> float:
    return m["hp_service_p99_ratio"] - 1.0


def test_tally_p99_row_fails_without_preemption() -> None:
    right, _ = run_pair(PAIR, "tally", 0)
    hp, be = clients(PAIR, 0)
    st = engine.simulate(device_gpu("A100"), [hp, be], TallyWithoutPreemption(), PAIR.duration_s)
    wrong, _ = pair_metrics([st], *standalone(PAIR, 0), device_gpu("A100"), False)
    assert _overhead(right) <= 1.5 * TALLY_P99  # within the factor-1.5 band (or below it)
    assert _overhead(wrong) > 1.5 * TALLY_P99  # BE blocks in HP's way: out of it


def test_tgs_p99_row_fails_without_block_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    right, _ = run_pair(PAIR, "tgs", 0, TGS)
    assert TGS_P99 / 1.5 <= _overhead(right) <= TGS_P99 * 1.5
    # TGS's own limit manager (one step per 5 s report): BE held while it profiles HP (>= 25 s)
    blocking, _ = run_pair(PAIR, "tgs", 0, {**TGS, "spin": False})
    assert _overhead(blocking) < TGS_P99 / 1.5
    orig = engine.rate
    monkeypatch.setattr(engine, "rate", lambda share, mem, busy, count, dur, over, wait, slow=1.0:
                        orig(share, mem, busy, count, dur, over, 0.0, slow))
    wrong, _ = run_pair(PAIR, "tgs", 0, TGS)  # the model before: HP's kernels never wait for BE's blocks
    assert _overhead(wrong) < TGS_P99 / 1.5


def test_tally_vs_tgs_system_throughput_row_fails_with_the_idle_thresholds_swapped() -> None:
    tgs, _ = run_pair(PAIR, "tgs", 0, TGS)
    right, _ = run_pair(PAIR, "tally", 0)
    wrong, _ = run_pair(PAIR, "tally", 0, {"idle_s": 0.1})  # BE waits 100 ms of HP idleness, not 0.1 ms
    assert right["system_throughput"] / tgs["system_throughput"] - 1 >= -0.2
    assert wrong["system_throughput"] / tgs["system_throughput"] - 1 < -0.2


def test_daris_rows_fail_with_one_context() -> None:
    scn = DarisScenario("t", tasksets=["resnet"], duration_s=1.0)
    batching = run_taskset(scn, "batching", 0, 0)["throughput_jobs_s"]
    right = run_taskset(scn, "daris", 0, 0)
    wrong = run_taskset(replace(scn, daris=DarisConfig(1, 1, 1.0)), "daris", 0, 0)
    # +15 % over batching (paper), within 25 %: (1 + sim) / 1.15 in [0.75, 1.25]
    assert 0.75 <= right["throughput_jobs_s"] / batching / 1.15 <= 1.25
    assert wrong["throughput_jobs_s"] / batching / 1.15 < 0.75
