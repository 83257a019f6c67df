"""Shadow mode against Slurm's own scheduler: squeue's times parsed, the observer, the comparison on
hand-computed cases, then jobs submitted with sbatch to a real one-machine cluster while the service
shadows them and `report` compares both sides on the same jobs."""

from __future__ import annotations

import io
import json
import subprocess
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pytest

from gpusched.baselines import get_policy
from gpusched.real.service.slurm import SlurmRecord, parse_job_times, slurm_time
from gpusched.real.service.slurm_local import LocalSlurm, unavailable
from gpusched.real.service.slurm_shadow import SlurmObserver, compare, load_observed, replay_model

T0 = 1_700_000_000.0


def _rec(i: int, sub: float, start: float | None, end: float | None, gpus: int = 1, state: str = "COMPLETED",
         name: str = "train") -> SlurmRecord:
    return SlurmRecord(i, name, state, ("n1",) if start is not None else (), 1, gpus, "alice", T0 + sub,
                       None if start is None else T0 + start, None if end is None else T0 + end)


def test_squeue_times_are_parsed_and_only_facts_are_kept() -> None:
    text = ("1|train|COMPLETED|n1|1|gres:gpu:1|alice|2026-11-26T21:00:39|2026-11-26T21:00:41|2026-11-26T21:00:43\n"
            "2|big|RUNNING|n[1-2]|2|gres/gpu:2|bob|2026-11-26T21:00:39|2026-11-26T21:00:41|2026-11-27T21:00:41\n"
            "3|wait|PENDING||1|gres:gpu:1|bob|2026-11-26T21:00:40|2026-11-26T21:05:00|N/A\n"
            "4|gone|CANCELLED||1|gres:gpu:1|bob|2026-11-26T21:00:40|2026-11-26T21:00:42|2026-11-26T21:00:42\n")
    a, b, c, d = parse_job_times(text)
    t = slurm_time("2026-11-26T21:00:39")
    assert t is not None and (a.submit_t, a.start_t, a.end_t) == (t, t + 2, t + 4) and a.ended and a.gpus == 1
    assert b.nodes == ("n1", "n2") and b.gpus == 4 and b.end_t is None  # a running job's end is its time limit
    assert c.start_t is None  # a pending job's start is Slurm's estimate
    assert d.ended and d.start_t is None  # cancelled before it ran
    assert slurm_time("N/A") is None and slurm_time("Unknown") is None
    with pytest.raises(Exception, match="expected 10"):
        parse_job_times("1|x|RUNNING\n")


def test_replay_against_slurm_on_hand_computed_jobs() -> None:
    """One GPU. Slurm ran A (submit 0, 10 s) then B (submit 1, 2 s): JCTs 10 and 11, waits 0 and 9.
    FIFO replays the same; SRTF with 1-s rounds preempts A at t=1 for B: B 1..3, A 0..1 + 3..12."""
    recs = {7: _rec(7, 0, 0, 10), 8: _rec(8, 1, 10, 12),
            9: _rec(9, 2, 12, None, state="RUNNING"),  # not ended: on neither side
            10: _rec(10, 2, None, None, state="CANCELLED"),  # never ran
            11: _rec(11, 3, 3, 5, gpus=0)}  # no GPU
    fifo = compare(recs, [1], get_policy("fifo"), replay_model(0.0))
    assert fifo["jobs"] == [7, 8]
    for side in ("slurm", "policy"):
        m = fifo[side]
        assert (m["avg_jct_s"], m["avg_queue_s"], m["utilization"], m["makespan_s"]) == (10.5, 4.5, 1.0, 12.0)
    srtf = compare(recs, [1], get_policy("srtf", round_s=1.0), replay_model(0.0))
    assert srtf["per_job"] == {"7": {"slurm": [0.0, 10.0], "policy": [0.0, 12.0]},
                               "8": {"slurm": [10.0, 12.0], "policy": [1.0, 3.0]}}
    m = srtf["policy"]
    assert (m["avg_jct_s"], m["avg_queue_s"], m["preemptions"]) == (7.0, 0.0, 1.0)
    assert compare({9: recs[9]}, [1], get_policy("fifo"), replay_model(0.0))["jobs"] == []


class _FakeClient:
    def __init__(self) -> None:
        self.answers: list[list[SlurmRecord]] = []

    def job_times(self) -> list[SlurmRecord]:
        return self.answers.pop(0)


def test_observer_reports_events_once_keeps_ended_jobs_and_ignores_ours(tmp_path: Path) -> None:
    c = _FakeClient()
    obs = SlurmObserver(tmp_path, c)  # type: ignore[arg-type]
    c.answers = [[_rec(1, 0, None, None, state="PENDING"), _rec(2, 0, 0, None, state="RUNNING", name="gpusched-4")],
                 [_rec(1, 0, 1, None, state="RUNNING")],
                 [_rec(1, 0, 1, 5)],
                 []]  # Slurm forgot the job (MinJobAge): the record stays
    assert obs.observe() == [{"job": 1, "event": "submit", "gpus": 1}]
    assert obs.active()
    assert obs.observe() == [{"job": 1, "event": "start", "nodes": ["n1"], "gpus": 1}]
    assert obs.observe() == [{"job": 1, "event": "end", "state": "COMPLETED"}]
    assert obs.observe() == [] and not obs.active()
    assert load_observed(tmp_path) == {1: _rec(1, 0, 1, 5)}  # persisted; gpusched's own job left out


# -- a real one-machine Slurm cluster ------------------------------------------------------------
@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Any:
    why = unavailable()
    if why:
        pytest.skip(why)
    with LocalSlurm(tmp_path_factory.mktemp("slurm"), nodes=2, gpus_per_node=2) as s:
        yield s


JOBS = [(2, 3), (2, 3), (1, 2), (2, 2), (1, 1), (1, 2)]  # (GPUs, seconds): 11 GPUs asked of 4


def test_shadow_logs_slurms_jobs_and_report_compares_both_sides_on_the_same_jobs(slurm: LocalSlurm,
                                                                                  tmp_path: Path) -> None:
    from gpusched.real.service.cli import main
    from gpusched.real.service.serve import ServeConfig, Service
    from gpusched.real.service.slurm import run_command
    from gpusched.real.service.slurm_engine import SlurmEngine

    ids = []
    for g, s in JOBS:  # submitted by a user, straight to Slurm: Slurm's scheduler runs them
        out = subprocess.run(["sbatch", "--parsable", f"--gres=gpu:{g}", "-J", "user-job", "-o", "/dev/null",
                              "--wrap", f"sleep {s}"], env=slurm.env, check=True, capture_output=True, text=True)
        ids.append(int(out.stdout.strip().split(";")[0]))
    cfg = ServeConfig(out_dir=str(tmp_path), engine="slurm", partition="gpu", mode="shadow", policy="fifo",
                      poll_s=0.2, exit_when_idle=True, max_wall_s=120.0)
    Service(cfg, engine=SlurmEngine(tmp_path, "gpu", run_command(slurm.env))).run()

    lines = [json.loads(x) for x in (tmp_path / "shadow.jsonl").read_text().splitlines()]
    events = [(e["job"], e["event"]) for x in lines for e in x["slurm"]]
    for j in ids:  # what Slurm did, each job's start and end once, next to the policy's decisions
        assert events.count((j, "start")) == 1 and events.count((j, "end")) == 1
    assert all(x["policy"]["name"] == "fifo" and x["policy"]["error"] is None for x in lines)
    assert not list((tmp_path / "slurm").glob("nodes/*"))  # nothing launched

    buf = io.StringIO()
    with redirect_stdout(buf):
        assert main(["report", f"out_dir={tmp_path}"]) == 0
    text = buf.getvalue()
    assert f"Slurm vs fifo (replayed in the simulator) on the same {len(ids)} jobs" in text
    assert f"jobs: {' '.join(map(str, ids))}" in text
    doc = json.loads((tmp_path / "shadow_results.json").read_text())
    assert doc["jobs"] == ids and sorted(map(int, doc["per_job"])) == ids and doc["nodes"] == [["n1", 2], ["n2", 2]]
    recs = load_observed(tmp_path)
    runs = {j: recs[j].end_t - recs[j].start_t for j in ids}  # type: ignore[operator]
    t0 = min(recs[j].submit_t for j in ids)  # type: ignore[type-var]
    slurm_m, fifo_m = doc["policies"]["slurm"]["metrics"], doc["policies"]["fifo"]["metrics"]
    # Slurm's side is its own times, computed here by hand from the observed records
    assert slurm_m["avg_jct_s"] == pytest.approx(sum(recs[j].end_t - recs[j].submit_t for j in ids) / len(ids))  # type: ignore[operator]
    assert slurm_m["avg_queue_s"] == pytest.approx(sum(recs[j].start_t - recs[j].submit_t for j in ids) / len(ids))  # type: ignore[operator]
    span = max(recs[j].end_t for j in ids) - t0  # type: ignore[operator, type-var]
    assert slurm_m["utilization"] == pytest.approx(sum(runs[j] * g for j, (g, _) in zip(ids, JOBS, strict=True)) / (4 * span))
    # the policy's side: each job runs its observed time, never more GPUs than the partition's 4 at once
    per = {int(k): v["policy"] for k, v in doc["per_job"].items()}
    for j in ids:
        assert per[j][1] - per[j][0] == pytest.approx(max(runs[j], 0.5))
    for t in {p[0] for p in per.values()}:
        assert sum(g for j, (g, _) in zip(ids, JOBS, strict=True) if per[j][0] <= t < per[j][1]) <= 4
    assert fifo_m["jobs_finished"] == slurm_m["jobs_finished"] == len(ids) and fifo_m["preemptions"] == 0
