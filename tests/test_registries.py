"""Where a new policy, mechanism or schedule goes: its own code plus one registration line.

Each toy below is defined here (its "own file") and registered with one line; it then runs through its
level's bench path and shows up in the generated policy tables, with nothing else edited. Each toy
copies a shipped entry under a new name, so its results must equal that entry's exactly.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest

from gpusched.baselines import POLICIES
from gpusched.baselines.ordering import FifoOrder
from gpusched.baselines.placement import PackedPlacement
from gpusched.baselines.scheduler import QueueScheduler
from gpusched.bench import doc_tables
from gpusched.bench.runner import run_tasks, tasks_for
from gpusched_env.device import bench as device_bench
from gpusched_env.device.mechanisms import MECHANISMS
from gpusched_env.device.mechanisms.mps import Mps
from gpusched_env.pipeline import bench as pipeline_bench
from gpusched_env.pipeline.schedules import SCHEDULES, gpipe
from gpusched_env.registry import Registry
from gpusched_env.scenario import load_scenario
from gpusched_env.scenario_file import read_scenario_file


def toy_fifo() -> QueueScheduler:
    """A toy: FIFO under another name."""
    return QueueScheduler("toy_fifo", FifoOrder(), PackedPlacement())


class ToyMps(Mps):
    """A toy: MPS under another name."""

    name = "toy_mps"


@pytest.fixture
def toys() -> Iterator[None]:
    POLICIES.add("toy_fifo", toy_fifo, "FIFO under another name")
    MECHANISMS.add("toy_mps", ToyMps)
    SCHEDULES.add("toy_gpipe", replace(SCHEDULES["gpipe"], name="toy_gpipe"),
                  module=gpipe.__name__)
    try:
        yield
    finally:
        POLICIES.remove("toy_fifo")
        MECHANISMS.remove("toy_mps")
        SCHEDULES.remove("toy_gpipe")


def test_a_registered_cluster_policy_runs_in_the_bench_and_equals_what_it_copies(toys: None) -> None:
    scn = load_scenario("synthetic_small")
    toy, fifo = (r.metrics for r in run_tasks(scn, tasks_for(scn, ["toy_fifo", "fifo"], [0]), workers=1,
                                               keep_series=False))
    assert toy == fifo and toy["jobs_finished"] == 40


def test_a_registered_mechanism_runs_as_a_device_policy_and_equals_what_it_copies(toys: None) -> None:
    scn = device_bench.load(read_scenario_file("tally_pairs", level="device") | {"duration_s": 2.0}, "tally_pairs")
    assert device_bench.run(scn, "toy_mps", 0, 0).metrics == device_bench.run(scn, "mps", 0, 0).metrics


def test_a_registered_schedule_runs_as_a_pipeline_policy_and_equals_what_it_copies(toys: None) -> None:
    scn = pipeline_bench.load(read_scenario_file("adaptra_14b", level="pipeline"), "adaptra_14b")
    assert pipeline_bench.run(scn, "toy_gpipe", 0, 0).metrics == pipeline_bench.run(scn, "gpipe", 0, 0).metrics


def test_the_generated_policy_tables_list_the_registered_toys(toys: None) -> None:
    text = doc_tables.render()  # the family column is the defining module's first sentence, up to its colon
    here, path = "Where a new policy, mechanism or schedule goes", toy_fifo.__module__.replace(".", "/") + ".py"
    assert f"| `toy_fifo` | {here} | FIFO under another name | [`{path}`]" in text
    assert f"| `toy_mps` | {here} | its own code plus one registration line | [`{path}`]" in text
    assert "| `toy_gpipe` | GPipe (Huang et al., 2019) |" in text


def test_unknown_and_duplicate_names_are_named_errors() -> None:
    reg: Registry[int] = Registry("widget")
    reg.add("a", 1, module="m")
    with pytest.raises(ValueError, match=r"^unknown widget 'b'; known widgets: a$"):
        reg.lookup("b")
    with pytest.raises(ValueError, match=r"^widget 'a' is registered already$"):
        reg.add("a", 2, module="m")
    assert dict(reg) == {"a": 1} and reg.entry("a").module == "m"


def test_bench_help_lists_the_registered_policies_of_every_level(toys: None, capsys: pytest.CaptureFixture[str],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from gpusched.bench import cli

    monkeypatch.setattr(sys, "argv", ["gpusched-bench", "--help"])
    with pytest.raises(SystemExit) as e:
        cli.main()
    out = capsys.readouterr().out
    assert e.value.code in (0, None)
    assert "cluster: fifo sjf srtf las" in out and "toy_fifo" in out
    assert "device: exclusive time_slicing mps mps_priority tgs tally toy_mps mps_be50" in out
    assert "pipeline: gpipe 1f1b zb zb_cpu adaptra toy_gpipe agent" in out
