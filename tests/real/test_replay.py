"""Replay on the CPU stand-in, end to end: real processes, the project's invariants, results.json in
the simulator's schema, telemetry; and a clean stop when the policy raises mid-run."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from realtest_helpers import FakeWorkers, Fifo, descendants, tiny_workload

from gpusched.real.backend import RealBackend, RealConfig
from gpusched.real.config import DevicesConf, build_devices
from gpusched.real.devices import TELEMETRY_FIELDS
from gpusched.real.launcher import LocalNodeAgent
from gpusched.real.replay import replay
from gpusched_env.invariants import InvariantChecker
from gpusched_env.policy import run_policy
from gpusched_env.types import Preempt
from gpusched_env.view import ClusterView


def test_replay_two_jobs_end_to_end(run_dir: Path) -> None:
    wl = tiny_workload([(0.0, "pointnet", 300), (0.3, "resnet50", 150)])
    devices, runner = build_devices(DevicesConf(kind="cpu", count=2), "auto", run_dir / "commands.jsonl")
    out = replay(wl, Fifo(), devices, runner, run_dir, 0, RealConfig(telemetry_s=0.2))
    assert out.status == "complete" and not descendants()
    doc = json.loads((run_dir / "results.json").read_text())
    m = doc["policies"]["fifo_test"]["metrics"]
    assert doc["scenario"] == "tiny" and doc["seeds"] == [0]
    assert doc["policies"]["fifo_test"]["per_seed"][0]["seed"] == 0
    assert m["jobs_finished"] == 2 and doc["real"]["status"] == "complete"
    assert 0 < m["avg_jct_s"] <= m["makespan_s"] + 0.3 and 0 < m["utilization"] <= 1 and m["energy_kwh"] > 0
    jobs = {j["job_id"]: j for j in doc["real"]["jobs"]}
    assert jobs[0]["first_start_s"] < 0.3 and jobs[1]["first_start_s"] >= 0.3  # placed at its arrival
    with open(run_dir / "telemetry.csv") as f:
        rows = list(csv.reader(f))
    assert tuple(rows[0]) == TELEMETRY_FIELDS and len(rows) > 4
    assert {r[1] for r in rows[1:]} == {"0", "1"}
    spawns = [json.loads(x) for x in (run_dir / "commands.jsonl").read_text().splitlines()]
    cores = sorted(s["env"]["GPUSCHED_CPU_CORES"] for s in spawns if s["kind"] == "spawn")
    assert len(cores) == 2 and cores[0] != cores[1]  # one job per device, pinned to its cores


class PreemptOnce(Fifo):
    """FIFO that preempts job 0 once, after it has made progress (checkpoint, SIGTERM, resume)."""

    name = "preempt_once"
    round_s = 0.5

    def __init__(self) -> None:
        super().__init__()
        self.done = False

    def decide(self, view: ClusterView) -> list:  # type: ignore[type-arg]
        if not self.done and 0 in view.running and view.progress(0).done_iters >= 30:
            self.done = True
            return [Preempt(0)]
        return super().decide(view)


@pytest.mark.slow
def test_preemption_resumes_and_keeps_invariants(run_dir: Path) -> None:
    wl = tiny_workload([(0.0, "resnet50", 400)], devices=1)
    devices, runner = build_devices(DevicesConf(kind="cpu", count=1), "auto", None)
    checker = InvariantChecker()
    backend = RealBackend(wl.topology, wl.jobs, wl.sizes, devices, LocalNodeAgent(runner, run_dir), run_dir, 0,
                          RealConfig(telemetry_s=0.2), checker=checker)
    with backend:
        run_policy(backend, PreemptOnce())
    checker.check_all_finished([0])
    rec = backend.result().records[0]
    assert rec.preemptions == 1 and rec.restarts == 1 and rec.finish_s is not None
    progress = [json.loads(x) for x in (run_dir / "jobs" / "0" / "progress.jsonl").read_text().splitlines()]
    readies = [r for r in progress if r["ev"] == "ready"]
    stopped = [r for r in progress if r["ev"] == "stopped"]
    assert len(readies) == 2 and readies[1]["iter"] == stopped[0]["iter"] >= 30  # resumed where it stopped
    assert progress[-1]["ev"] == "done" and progress[-1]["iter"] == 400


class Boom(Fifo):
    name = "boom"

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def decide(self, view: ClusterView) -> list:  # type: ignore[type-arg]
        self.calls += 1
        if self.calls > 1:
            raise RuntimeError("policy bug")
        return super().decide(view)


def test_exception_mid_run_stops_everything(run_dir: Path) -> None:
    """Torch-free job processes (the real ones are stopped in test_kill.py)."""
    wl = tiny_workload([(0.0, "pointnet", 10**7), (0.0, "pointnet", 10**7), (1.5, "bert", 10)])
    devices, _ = build_devices(DevicesConf(kind="cpu", count=2), "auto", None)
    runner = FakeWorkers(run_dir / "commands.jsonl")
    with pytest.raises(RuntimeError, match="policy bug"):
        replay(wl, Boom(), devices, runner, run_dir, 0, RealConfig(telemetry_s=0.2))
    assert not descendants()
    doc = json.loads((run_dir / "results.json").read_text())
    assert doc["real"]["status"] == "error" and doc["policies"]["boom"]["metrics"]["jobs_finished"] == 0
    assert [c.stdin for c in runner.commands("run")] == [None, "quit\n"]  # its own MPS daemon stopped


class Never(Fifo):
    name = "never"

    def decide(self, view: ClusterView) -> list:  # type: ignore[type-arg]
        return []


def test_policy_that_starts_nothing_ends_the_run(run_dir: Path) -> None:
    wl = tiny_workload([(0.0, "pointnet", 10)])
    devices, runner = build_devices(DevicesConf(kind="cpu", count=2), "auto", None)
    out = replay(wl, Never(), devices, runner, run_dir, 0, RealConfig())
    assert out.metrics["deadlocked"] == 1.0 and out.metrics["jobs_finished"] == 0 and not descendants()
