"""One name per sharing mechanism (gpusched_env.vocabulary): every level and backend uses the same
four, and the old names are still read where a user types them, with a one-line note."""

from __future__ import annotations

import pytest
import yaml

from gpusched_env import vocabulary
from gpusched_env.device import bench as device_bench
from gpusched_env.device.mechanisms import MECHANISMS
from gpusched_env.scenario import CONF_DIR
from gpusched_env.types import SHARING_KINDS, Sharing
from gpusched_env.vocabulary import SHARING_MECHANISMS, current_name


@pytest.fixture(autouse=True)
def _fresh_notes():
    vocabulary._told.clear()  # each old name is noted once per place and process
    yield
    vocabulary._told.clear()


def test_one_set_of_names_everywhere() -> None:
    from gpusched.real.pairs import MECHANISMS as REAL_PAIRS

    assert SHARING_MECHANISMS == ("exclusive", "time_slicing", "mps", "mps_priority")  # docs/NAMES.md
    assert set(SHARING_KINDS) == set(SHARING_MECHANISMS) and SHARING_KINDS[0] == "time_slicing"
    assert set(SHARING_MECHANISMS) <= set(MECHANISMS)
    assert set(REAL_PAIRS) == set(SHARING_MECHANISMS) - {"exclusive"}  # exclusive: each model alone, always
    assert device_bench.MECHANISM_POLICIES == tuple(MECHANISMS)
    assert device_bench.PAIR_POLICIES == (*MECHANISMS, "mps_be50")


def test_an_old_name_gives_one_line_naming_the_new(capsys: pytest.CaptureFixture[str]) -> None:
    assert current_name("timeslice", "pairs.mechanisms") == "time_slicing"
    assert current_name("timeslice", "pairs.mechanisms") == "time_slicing"  # noted once per place
    assert current_name("mps_prio", "policies") == "mps_priority"
    assert current_name("tgs", "policies") == "tgs" and current_name("nonsense", "policies") == "nonsense"
    assert capsys.readouterr().err.splitlines() == ["pairs.mechanisms: 'timeslice' is an old name; use 'time_slicing'",
                                                    "policies: 'mps_prio' is an old name; use 'mps_priority'"]


def test_sharing_reads_the_old_kinds(capsys: pytest.CaptureFixture[str]) -> None:
    assert Sharing().kind == "time_slicing"
    old = Sharing("time_slice")
    assert old == Sharing() and not old.is_mps
    prio = Sharing("priority", 40.0, 1)
    assert prio == Sharing("mps_priority", 40.0, 1) and prio.is_mps and prio.sm_share == 0.4
    assert capsys.readouterr().err.splitlines() == ["sharing kind: 'time_slice' is an old name; use 'time_slicing'",
                                                    "sharing kind: 'priority' is an old name; use 'mps_priority'"]
    with pytest.raises(ValueError, match="sharing kind must be one of time_slicing, exclusive, mps, mps_priority"):
        Sharing("mig")


def test_device_scenario_and_bench_policies_read_old_names(capsys: pytest.CaptureFixture[str]) -> None:
    from gpusched.bench.level_runner import check_level

    raw = yaml.safe_load((CONF_DIR / "scenario" / "h100_pairs.yaml").read_text())
    raw["default_policies"] = ["exclusive", "timeslice", "mps_prio"]
    raw["mechanisms"] = {"timeslice": raw["mechanisms"]["time_slicing"]}
    scn = device_bench.load(raw, "h100_pairs")
    assert scn.default_policies == ["exclusive", "time_slicing", "mps_priority"]
    assert list(scn.mechanisms) == ["time_slicing"]
    plan = check_level(raw, ["mps_prio", "mps_be50"], [0], [0])
    assert plan.policies == ["mps_priority", "mps_be50"]
    assert capsys.readouterr().err.splitlines() == [
        "scenario h100_pairs: default_policies: 'timeslice' is an old name; use 'time_slicing'",
        "scenario h100_pairs: default_policies: 'mps_prio' is an old name; use 'mps_priority'",
        "scenario h100_pairs: mechanisms: 'timeslice' is an old name; use 'time_slicing'",
        "policies: 'mps_prio' is an old name; use 'mps_priority'"]


def test_gpushare_mechanism_is_one_of_the_mechanisms(capsys: pytest.CaptureFixture[str]) -> None:
    from gpusched_env.envs.gpushare import GPUShareEnv

    assert GPUShareEnv("h100_pairs", mechanism="mps_prio").mechanism == "mps_priority"
    assert capsys.readouterr().err == "mechanism: 'mps_prio' is an old name; use 'mps_priority'\n"
    with pytest.raises(ValueError, match=r"mechanism must be one of \['exclusive', 'time_slicing', 'mps', "
                                         r"'mps_priority', 'tgs', 'tally'\], got 'mps_be50'"):
        GPUShareEnv("h100_pairs", mechanism="mps_be50")
