"""adaptra_14b through the LevelBench: loading, determinism, dynamics, coupling, plots."""

from __future__ import annotations

import pytest
import yaml

from gpusched_env.config_util import ConfigError
from gpusched_env.pipeline import bench
from gpusched_env.pipeline.coupling import iteration_time_ms
from gpusched_env.pipeline.report import CONF, claim_value, load_named
from gpusched_env.pipeline.spec import PipelineSpec


@pytest.fixture(scope="module")
def scn():
    return load_named("adaptra_14b")


def test_scenario_names_and_claims(scn):
    assert scn.workload_names == ["delay-10ms", "delay-30ms", "delay-60ms", "dynamic", "nic-failure"]
    assert bench.POLICIES == ("gpipe", "1f1b", "zb", "zb_cpu", "adaptra")
    assert scn.default_policies == list(bench.POLICIES)
    assert [c.metric for c in scn.paper] == ["iteration_time_ms", "iteration_time_ms", "throughput_samples_s"]
    assert scn.job.spec().f_ms == (8.9,) * 8


def test_run_is_deterministic_and_seeds_differ(scn):
    a, b = bench.run(scn, "adaptra", 3, 1), bench.run(scn, "adaptra", 3, 1)
    assert a.metrics == b.metrics and a.series == b.series
    assert bench.run(scn, "adaptra", 4, 1).metrics["iteration_time_ms"] != a.metrics["iteration_time_ms"]
    assert {"iteration_time_ms", "throughput_samples_s", "peak_activations_microbatches", "bubble_fraction_s7"} <= set(a.metrics)


def test_metrics_are_consistent(scn):
    m = bench.run(scn, "1f1b", 0, 0).metrics
    # 24 samples per iteration: throughput = 24 / mean iteration time
    assert m["throughput_samples_s"] == pytest.approx(24 / (m["iteration_time_ms"] / 1000))
    assert m["peak_activations_microbatches"] == 8.0


def test_nic_failure_restart_vs_host_path(scn):
    w = scn.workload_names.index("nic-failure")
    zb = bench.run(scn, "zb", 0, w)
    assert zb.metrics["restarts"] == 1.0
    assert max(zb.series["iteration_ms"]) > 20_000.0  # the failure iteration carries the 20 s restart
    ad = bench.run(scn, "adaptra", 0, w)
    assert ad.metrics["restarts"] == 0.0 and max(ad.series["iteration_ms"]) < 2_000.0
    assert ad.metrics["throughput_samples_s"] > zb.metrics["throughput_samples_s"]


def test_adaptra_replans_from_the_next_iteration(scn):
    w = scn.workload_names.index("dynamic")
    t = bench.run(scn, "adaptra", 0, w).series["iteration_ms"]
    # link 6 goes to 60 ms at iteration 20: iteration 20 runs the 10 ms plan, 21 the 60 ms plan
    assert t[20] > t[21] + 50.0


def test_coupling_function():
    spec = PipelineSpec(4, 8, (1.0,) * 4, (2.0,) * 4, (1.0,) * 4, schedule="1f1b")
    assert iteration_time_ms(spec, overhead_ms=1.0) == pytest.approx(45.0)
    assert iteration_time_ms(spec, slowdown=(1.0, 3.0, 1.0, 1.0)) > 2 * 44.0
    ad = PipelineSpec(4, 8, (1.0,) * 4, (2.0,) * 4, (1.0,) * 4, schedule="adaptra")
    assert iteration_time_ms(ad, (0.0, 20.0, 0.0)) < iteration_time_ms(ad, (0.0, 20.0, 0.0), adapted=False)


def test_claim_arithmetic():
    assert claim_value("improvement", "geomean", [0.25, 1.0]) == pytest.approx(0.5)
    assert claim_value("change", "mean", [1.5, 1.3]) == pytest.approx(0.4)


def test_bad_scenario_keys_are_named():
    raw = yaml.safe_load((CONF / "adaptra_14b.yaml").read_text())
    with pytest.raises(ConfigError, match="scenario.job: unknown key"):
        bench.load({**raw, "job": {**raw["job"], "stage": 8}}, "x")
    with pytest.raises(ConfigError, match=r"link must be in 0\.\.6"):
        bench.load({**raw, "workloads": [{"name": "w", "link_delays": [{"link": 7, "delay_ms": 1.0}]}]}, "x")
    with pytest.raises(ConfigError, match="microbatches"):
        bench.load({**raw, "job": {**raw["job"], "microbatches": 4}}, "x")


def test_plot_writes_timelines(scn, tmp_path):
    runs = [(p, 0, 0, bench.run(scn, p, 0, 0)) for p in ("1f1b", "adaptra")]
    paths = bench.plot(scn, runs, tmp_path)
    assert [p.name for p in paths] == ["timeline_delay-10ms.png", "iteration_time.png"]
    assert all(p.stat().st_size > 1000 for p in paths)


def test_pipemorph_a10_message_fits_and_bad_link_keys():
    scn = load_named("pipemorph_a10")
    assert scn.job.message_bytes == 4096 * 1024 * 1 * 2  # hidden x sequence x micro-batch x fp16
    model = scn.job.model()
    assert model.transfer_ms == pytest.approx(8_388_608 / 6.66e6)  # 1.26 ms, the fitted gap
    assert model.copy_ms == pytest.approx(8_388_608 / 12.34e6)  # 0.68 ms
    assert scn.workloads[1].link_delays[0].start == 7  # the delay from iteration 8 (1-based)
    raw = yaml.safe_load((CONF / "pipemorph_a10.yaml").read_text())
    for key, value in (("link_gb_s", -1.0), ("cpu_channels", -2), ("dtype_bytes", 0)):
        bad = {**raw, "job": {**raw["job"], key: value}}
        with pytest.raises((ConfigError, ValueError), match=key):
            bench.load(bad, "bad")


def test_pipemorph_table_fits_healthy_zb_and_is_complete():
    from gpusched_env.pipeline import pipemorph

    sim = pipemorph.simulate(load_named("pipemorph_a10"))
    assert sim["zb"][0] == pytest.approx(pipemorph.MEASURED_MS["zb"][0], abs=0.5)  # the one fit
    rows = pipemorph.table(sim)
    assert len([r for r in rows if r.startswith("| ") and "ms" not in r and "order" not in r]) == 4 * 7 + 6
