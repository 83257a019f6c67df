"""The one scenario-file reader: every level's loader gives the same one-line errors."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import pytest

import gpusched_env  # noqa: F401
from gpusched_env.config_util import ConfigError
from gpusched_env.scenario import load_scenario
from gpusched_env.scenario_file import read_scenario_file


def test_a_name_reads_the_shipped_file_and_defaults_its_name() -> None:
    raw = read_scenario_file("tally_pairs", level="device")
    assert raw["name"] == "tally_pairs" and raw["level"] == "device"


def test_an_unknown_name_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError, match=r"scenario 'nope': no file .*nope\.yaml; known scenarios: \[.*'synthetic_small'"):
        read_scenario_file("nope")


def test_a_path_is_read_and_named_by_its_stem(tmp_path: Path) -> None:
    p = tmp_path / "mine.yaml"
    p.write_text("level: pipeline\n")
    assert read_scenario_file(str(p)) == {"level": "pipeline", "name": "mine"}
    with pytest.raises(ConfigError, match=r"^scenario: no file .*other\.yaml$"):
        read_scenario_file(str(tmp_path / "other.yaml"))


def test_bad_yaml_names_the_file_and_line(tmp_path: Path) -> None:
    p = tmp_path / "bad.yaml"
    p.write_text("name: x\ncluster:\n  nodes: [1, 2\n")
    with pytest.raises(ConfigError, match=rf"^{p} line 4: not valid YAML"):
        read_scenario_file(str(p))


def test_a_file_that_is_not_a_mapping_is_named(tmp_path: Path) -> None:
    p = tmp_path / "list.yaml"
    p.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match=rf"^{p}: a scenario file holds a mapping of keys, got list$"):
        read_scenario_file(str(p))


@pytest.mark.parametrize("make", [
    lambda: gym.make("gpusched/GPUShare-v0", scenario="synthetic_small"),
    lambda: gym.make("gpusched/Pipeline-v0", scenario="tally_pairs"),
])
def test_every_level_refuses_a_scenario_of_another_level_the_same_way(make) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError, match=r"scenario '(synthetic_small|tally_pairs)' is a (cluster|device)-level "
                                          r"scenario; this needs one with level: (device|pipeline)$"):
        make()


def test_the_cluster_loader_gives_the_same_unknown_name_error() -> None:
    with pytest.raises(ConfigError, match=r"scenario 'nope': no file"):
        load_scenario("nope")
