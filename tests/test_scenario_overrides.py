"""Every ``scenario.model.KEY=VALUE`` override works, without ``+``, on every cluster-level scenario
(each composes conf/scenario_defaults/cluster.yaml, generated from the dataclasses); on device and
pipeline scenarios it is a one-line error saying why."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import yaml
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from gpusched_env.cluster.model import SimModel
from gpusched_env.config_docs import CLUSTER_DEFAULTS, render_cluster_defaults
from gpusched_env.config_util import CONF_DIR
from gpusched_env.scenario import load_scenario

ALL = sorted(p.stem for p in (CONF_DIR / "scenario").glob("*.yaml"))
CLUSTER = [s for s in ALL if yaml.safe_load((CONF_DIR / "scenario" / f"{s}.yaml").read_text()).get("level") is None]


def _leaves(obj: Any, prefix: str) -> list[tuple[str, Any]]:
    out = []
    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name)
        if dataclasses.is_dataclass(v):
            out += _leaves(v, f"{prefix}.{f.name}")
        elif not isinstance(v, (dict, list)):
            out.append((f"{prefix}.{f.name}", v))
    return out


def _composed(overrides: list[str]) -> dict[str, Any]:
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("bench", overrides=overrides)
    raw: dict[str, Any] = OmegaConf.to_container(cfg.scenario, resolve=True)  # type: ignore[assignment]
    return raw


def test_the_defaults_file_is_the_dataclass_defaults() -> None:
    text = (CONF_DIR / f"{CLUSTER_DEFAULTS}.yaml").read_text()
    assert text == render_cluster_defaults()  # regenerate with python -m gpusched_env.config_docs
    assert yaml.safe_load(text)["model"] == dataclasses.asdict(SimModel())
    assert len(CLUSTER) >= 10


@pytest.mark.parametrize("name", CLUSTER)
def test_every_model_key_overrides_without_plus_on_every_cluster_scenario(name: str) -> None:
    base = load_scenario(name)
    leaves = _leaves(base.model, "scenario.model")
    assert len(leaves) >= 20
    changed = {"scenario.model.sharing.model": "kernel",  # README's own example
               "scenario.model.failures.mtbf_h": 5000, "scenario.model.restart_cost_s": 7}
    text = {k: "null" if v is None else str(v).lower() if isinstance(v, bool) else v for k, v in leaves}
    scn = load_scenario(_composed([f"scenario={name}", *(f"{k}={v}" for k, v in {**text, **changed}.items())]))
    assert scn.model.sharing.model == "kernel" and scn.model.failures.mtbf_h == 5000.0
    assert scn.model.restart_cost_s == 7.0
    # every other key keeps the scenario's own value (or the default it composes)
    assert dataclasses.replace(scn, model=dataclasses.replace(
        scn.model, sharing=base.model.sharing, failures=base.model.failures,
        restart_cost_s=base.model.restart_cost_s)) == base


@pytest.mark.parametrize(("name", "level"), [("tally_pairs", "device"), ("adaptra_14b", "pipeline")])
def test_model_override_on_another_level_says_why(name: str, level: str, capsys, monkeypatch) -> None:
    from tests.test_cli_errors import one_line_error, run_main

    code, _, err = run_main([f"scenario={name}", "scenario.model.sharing.model=kernel"], capsys, monkeypatch)
    line = one_line_error(code, err)
    assert line.startswith(f"gpusched-bench: error: scenario.model.sharing.model: scenario {name} is a "
                           f"{level}-level scenario; scenario.model is a key of cluster-level scenarios")


def test_the_loader_reads_the_defaults_list_and_refuses_another() -> None:
    raw = yaml.safe_load((CONF_DIR / "scenario" / "synthetic_small.yaml").read_text())
    assert raw["defaults"] == ["/scenario_defaults/cluster@_here_", "_self_"]
    assert load_scenario(raw) == load_scenario("synthetic_small")
    from gpusched_env.config_util import ConfigError

    with pytest.raises(ConfigError, match=r"^scenario\.defaults: must be"):
        load_scenario({**raw, "defaults": ["_self_"]})
