"""Every paper-vs-sim row of the pipeline scenarios can fail: a plausible wrong model moves it out of
its tolerance. adaptra_14b: the two slow-link rows must lie inside the published 1.2-3.5x range
(0.167-0.714 as improvement), the NIC-failure row between the artifact log's 1.21x and the paper's
1.41x (0.21-0.41; the model now lands 0.006 below, pinned). pipemorph_a10: each schedule's iteration time within 15 % of the measured one."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpusched_env.paper import PaperClaim, claim_from_ratios
from gpusched_env.pipeline import bench, pipemorph
from gpusched_env.pipeline.report import load_named
from gpusched_env.pipeline.run import RunSettings, run_workload
from gpusched_env.pipeline.schedules import Schedule, get

RANGE = (1 - 1 / 1.2, 1 - 1 / 3.5)  # CALIBRATION.md (Adaptra): 1.2-3.5x faster, as improvement
NIC_BAND = (0.21, 0.41)  # artifact log 26.19 / 21.67 - 1 and the paper's 1.41x - 1


def _row(claim: PaperClaim, st: RunSettings, policy: Schedule) -> float:
    scn = load_named("adaptra_14b")
    ratios = []
    for wname in claim.workloads:
        w = scn.workload_names.index(wname)
        m = [run_workload(st, s, scn.workloads[w], bench.workload_rng(0, w, len(scn.workloads))).metrics(24)
             for s in (policy, get(claim.baseline))]
        ratios.append(m[0][claim.metric] / m[1][claim.metric])
    return claim_from_ratios(claim.kind, claim.aggregate, ratios)


@pytest.mark.parametrize("row", [0, 1])
def test_slow_link_rows_fail_if_cpu_delegated_sends_block_the_sender(row):
    scn = load_named("adaptra_14b")
    claim, st = scn.paper[row], bench.settings(scn)
    right = _row(claim, st, get("adaptra"))
    wrong = _row(claim, st, replace(get("adaptra"), comm="gpu"))  # sends held on the GPU stream
    assert RANGE[0] <= right <= RANGE[1]
    assert not RANGE[0] <= wrong <= RANGE[1]


def test_nic_failure_row_fails_if_a_restart_is_free():
    # The model's row is 0.204, just under the artifact log's 0.21 (an honest miss since ZB's sends
    # run on per-peer streams and the healthy-ZB overhead fit grew by 10.8 ms, docs/PIPELINE.md): it
    # is pinned here, not moved into the band. A free restart drops it far below the band.
    scn = load_named("adaptra_14b")
    claim, st = scn.paper[2], bench.settings(scn)
    right = _row(claim, st, get("adaptra"))
    assert right == pytest.approx(0.204, abs=0.005)
    assert NIC_BAND[0] - right < 0.01
    assert _row(claim, replace(st, restart_ms=0.0), get("adaptra")) < NIC_BAND[0] - 0.2


def test_pipemorph_1f1b_rows_fail_without_the_injectors_reading():
    scn = load_named("pipemorph_a10")
    only = dict.fromkeys(["1f1b"], pipemorph.MEASURED_MS["1f1b"])

    def errors(s) -> list[float]:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(pipemorph, "MEASURED_MS", only)
            sim = pipemorph.simulate(s)["1f1b"]
        healthy, delayed = only["1f1b"]
        return [sim[d] / m - 1 for d, m in [(0, healthy), *delayed.items()]]

    assert all(abs(e) <= pipemorph.TOLERANCE for e in errors(scn))
    wrong = errors(replace(scn, job=replace(scn.job, injector_group_ranks=False)))
    assert sum(abs(e) > pipemorph.TOLERANCE for e in wrong) >= 4  # 40-120 ms: 21-32 % too fast
