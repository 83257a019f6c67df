"""``scenario.model_per_workload``: a per-workload override of the model, typed and checked."""

from __future__ import annotations

import pytest

from gpusched.agents.policies import make_policy
from gpusched_env.cluster.build import simulate
from gpusched_env.config_util import ConfigError, override
from gpusched_env.scenario import load_scenario

BASE_ITER_S = 0.1754  # resnet50: catalogue base iteration time on a V100 (PAL's value)


def _toy(lf_override: dict | None) -> dict:
    """2 nodes x 1 V100; one 2-GPU ResNet-50 job of 1,000 iterations: it must span both nodes."""
    cfg = {
        "name": "toy",
        "cluster": {"nodes": [{"count": 2, "gpus_per_node": 1, "gpu_type": "V100"}], "nodes_per_rack": 2,
                    "max_jobs_per_gpu": 1},
        "workload": {"kind": "inline", "jobs": [
            {"job_id": 0, "arrival_s": 0.0, "num_gpus": 2, "work_iters": 1000.0, "model": "resnet50", "mem_gb": 1.0}]},
        "model": {"variability": {"mode": "none"}, "locality": {"mode": "constant", "lf": 1.7}, "timeline": False},
        "round_s": None,
    }
    if lf_override is not None:
        cfg["model_per_workload"] = lf_override
    return cfg


def test_override_reaches_the_simulators_locality_penalty() -> None:
    from gpusched_env.catalog import model_spec

    assert model_spec("resnet50").base_iter_s == pytest.approx(BASE_ITER_S)
    base = load_scenario(_toy(None))
    over = load_scenario(_toy({"toy": {"locality": {"lf": 2.5}}}))
    assert over.model.locality.lf == 1.7  # the scenario-wide model is untouched
    assert over.model_for(0).locality.lf == 2.5 and over.model_for(0).locality.mode == "constant"
    assert over.model_for(0).variability == over.model.variability  # keys not named keep their values
    for scn, lf in ((base, 1.7), (over, 2.5)):
        _, res = simulate(scn, make_policy("fifo", scn, 0), 0)
        (rec,) = res.tracked
        assert rec.finish_s == pytest.approx(1000 * BASE_ITER_S * lf)  # 175.4 s x lf: the span penalty


def test_bad_override_key_is_an_error_naming_it() -> None:
    with pytest.raises(ConfigError, match=r"scenario\.model_per_workload\.toy\.locality: unknown key\(s\) \['lff'\]"):
        load_scenario(_toy({"toy": {"locality": {"lff": 2.5}}}))
    with pytest.raises(ConfigError, match=r"scenario\.model_per_workload\.toy: unknown key\(s\) \['localty'\]"):
        load_scenario(_toy({"toy": {"localty": {"lf": 2.5}}}))
    with pytest.raises(ConfigError, match=r"scenario\.model_per_workload\.nope: no workload of that name.*\['toy'\]"):
        load_scenario(_toy({"nope": {"locality": {"lf": 2.5}}}))
    with pytest.raises(ConfigError, match=r"scenario\.model_per_workload\.toy\.locality\.lf: must be a finite"):
        load_scenario(_toy({"toy": {"locality": {"lf": 0.5}}}))
    with pytest.raises(ConfigError, match=r"scenario\.model_per_workload\.toy\.locality\.lf: expected a number"):
        load_scenario(_toy({"toy": {"locality": {"lf": "high"}}}))
    with pytest.raises(ConfigError, match=r"scenario\.model_per_workload\.toy\.locality: .*constant or bandwidth"):
        load_scenario(_toy({"toy": {"locality": {"mode": "ring"}}}))


def test_override_helper_on_a_plain_dataclass() -> None:
    from gpusched_env.cluster.model import SimModel

    m = SimModel()
    assert override(m, None, "x") is m
    o = override(m, {"restart_cost_s": 5, "locality": {"lf": 2.0}}, "x")
    assert o.restart_cost_s == 5.0 and isinstance(o.restart_cost_s, float) and o.locality.lf == 2.0
    assert m.locality.lf == 1.7  # the original is unchanged (frozen copies)
    with pytest.raises(ConfigError, match=r"^x: expected a mapping"):
        override(m, [1], "x")  # type: ignore[arg-type]


def test_pal_philly_lf_override_equals_the_pal_locality_workload(tmp_path, capsys, monkeypatch) -> None:
    """docs/NAMES.md: pal_philly keeps ``workloads=[I]`` and ``scenario.model.locality.lf=X``; workload-6 at
    lf 2.5 there is pal_locality's lf-2.5 workload (same jobs, same penalty, same PAL plan), run twice
    with identical results (determinism)."""
    import json

    from tests.test_cli_errors import run_main

    common = ["policies=[pal]", "seeds=[0]", "workers=1", "plots=false"]
    a = ["scenario=pal_philly", "workloads=[5]", "scenario.model.locality.lf=2.5"]
    b = ["scenario=pal_locality", "workloads=[3]"]
    out = {}
    for key, argv in (("philly", a), ("locality", b), ("locality2", b)):
        code, _, err = run_main([*argv, *common, f"out_dir={tmp_path / key}"], capsys, monkeypatch)
        assert code == 0, err
        out[key] = json.loads((tmp_path / key / "results.json").read_text())["policies"]["pal"]
    assert out["philly"]["metrics"]["avg_jct_s"] == out["locality"]["metrics"]["avg_jct_s"]
    assert out["locality"] == out["locality2"]
    assert out["locality"]["per_workload"][0]["workload"] == "lf-2.5"


def test_cluster_env_plans_pal_with_each_workloads_lf() -> None:
    import gymnasium as gym

    env = gym.make("gpusched/Cluster-v0", scenario="pal_locality", workloads=[0, 4], options=["pal", "packed"])
    u = env.unwrapped
    lfs = {}
    for wl in (4, 0, 4):
        env.reset(seed=0, options={"workload": wl, "run_seed": 0})
        lfs[wl] = u.option_set._placements[0].source.lf
        assert u.sim.model.locality.lf == lfs[wl]  # the simulator charges what PAL plans with
    assert lfs == {0: 1.0, 4: 3.0}
