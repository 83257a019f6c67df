"""The service loop on the local engine: policies run online, crashes, policy faults, cancel, report."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from gpusched.real.service.queue import JobQueue
from gpusched.real.service.report import report
from gpusched.real.service.spec import parse_spec
from gpusched_env.types import Preempt, Start
from gpusched_env.view import ClusterView
from tests.real.service.helpers import (
    done_lines,
    proc_state,
    service,
    steps_done,
    submit,
    ticks_spec,
    wait_until,
)

SIZES = [1, 2, 1, 4, 1, 2, 6, 1, 3, 1, 2, 1, 4, 1, 2, 1, 1, 2, 1, 3]  # 20 jobs; a 6-GPU job spans both nodes


@pytest.mark.parametrize("policy", ["fifo", "las"])
def test_twenty_mixed_jobs_all_finish_exactly_once(tmp_path: Path, policy: str) -> None:
    done = tmp_path / "done.txt"
    ids = submit(tmp_path, [ticks_spec(done, 1 + i % 6, g) for i, g in enumerate(SIZES)])
    svc = service(tmp_path, policy=policy, nodes=2, devices_per_node=4, round_s=1.0)
    svc.run()
    q = JobQueue(tmp_path)
    rows = q.jobs()
    assert [r.state for r in rows] == ["finished"] * 20
    lines = done_lines(done)
    finished = [int(x[0]) for x in lines if x[3] in ("-", "0")]  # single-node jobs and rank 0
    assert sorted(finished) == ids  # every job completed exactly once
    multi = [x for x in lines if int(x[0]) == ids[6]]
    assert sorted((x[3], x[4]) for x in multi) == [("0", "2"), ("1", "2")]  # one process per node, ranks 0 and 1
    for r in rows:  # every launch is in the history, and the launch count matches it
        launches = [d for _, _, s, d in q.history(r.id) if s == "running"]
        assert len(launches) == r.launches >= 1
    m = report(tmp_path)["policies"][policy]["metrics"]
    assert m["jobs_finished"] == 20 and 0 < m["utilization"] <= 1
    assert m["preemptions"] == sum(r.preemptions for r in rows)
    assert m["restarts"] == 0  # nothing crashed or was lost
    if policy == "fifo":
        assert m["preemptions"] == 0 and all(x[1] == "0" for x in lines)
    # every single-node job did each of its steps exactly once, in order: a preempted job resumed from
    # its step counter, never from zero (a restart from zero would repeat step 1)
    steps = steps_done(done)
    assert len(steps) >= 15
    for i, j in enumerate(ids):
        if j in steps:
            assert steps[j] == list(range(1, 2 + i % 6)), (j, steps[j])


def test_las_preempts_a_long_job_which_resumes_from_its_step_counter(tmp_path: Path) -> None:
    """Four devices, a 15-step job A then a 2-step job B, both whole-node: A starts first (equal
    attained service, lower id); at the 1-s round A has attained service and B none, so LAS preempts A
    for B; A then resumes from its checkpointed step, and every step of A is done exactly once."""
    done = tmp_path / "done.txt"
    a, b = submit(tmp_path, [ticks_spec(done, 15, 4), ticks_spec(done, 2, 4)])
    service(tmp_path, policy="las", devices_per_node=4, round_s=1.0).run()
    q = JobQueue(tmp_path)
    ra, rb = q.get(a), q.get(b)
    assert ra is not None and rb is not None
    assert (ra.state, ra.preemptions, ra.launches) == ("finished", 1, 2)
    assert (rb.state, rb.preemptions, rb.launches) == ("finished", 0, 1)
    (line_b, line_a) = done_lines(done)  # B finishes first
    assert line_b[:2] == [str(b), "0"] and line_a[:2] == [str(a), "1"]
    assert 0 < int(line_a[2]) < 15  # A's second launch began where its first stopped
    assert steps_done(done) == {a: list(range(1, 16)), b: [1, 2]}


def test_crash_is_restarted_with_backoff_then_failed_with_exit_code_and_log(tmp_path: Path) -> None:
    (j,) = submit(tmp_path, [parse_spec({"command": "echo attempt $GPUSCHED_RESTART_COUNT; exit 3", "shell": True,
                                         "gpus": 1, "max_restarts": 2}, "t")])
    service(tmp_path).run()
    q = JobQueue(tmp_path)
    row = q.get(j)
    assert row is not None and row.state == "failed" and row.exit_code == 3 and row.restarts == 2
    assert row.error is not None and "exit code 3 after 2 restart(s)" in row.error and "attempt 2" in row.error
    assert [s for _, _, s, _ in q.history(j)] == ["pending", "running", "pending", "running", "pending", "running", "failed"]


class _Raising:
    name, round_s, events = "raising", None, True

    def decide(self, view: ClusterView) -> list[Start]:
        raise RuntimeError("bug in the policy")


class _Invalid:
    name, round_s, events = "invalid", None, True

    def decide(self, view: ClusterView) -> list[Start]:
        return [Start(j, (99,)) for j in view.pending_ids]  # no GPU 99


@pytest.mark.parametrize("bad", [_Raising, _Invalid])
def test_a_faulty_policy_falls_back_to_fifo_for_the_round(tmp_path: Path, bad: type) -> None:
    done = tmp_path / "done.txt"
    submit(tmp_path, [ticks_spec(done, 1, 1) for _ in range(3)])
    svc = service(tmp_path)
    svc.policy = bad()
    svc.run()
    assert sorted(int(x[0]) for x in done_lines(done)) == [1, 2, 3]
    log = (tmp_path / "service.log").read_text()
    assert "FIFO decides this round" in log
    assert ("RuntimeError: bug in the policy" if bad is _Raising else "[gpu-exists]") in log


def test_cancel_pending_and_running(tmp_path: Path) -> None:
    done = tmp_path / "done.txt"
    a, b = submit(tmp_path, [ticks_spec(done, 100, 4), ticks_spec(done, 1, 4)])
    q = JobQueue(tmp_path)
    assert q.cancel(b) == "cancelled"
    svc = service(tmp_path, devices_per_node=4, max_wall_s=1.0, exit_when_idle=False)
    svc.run()  # starts a, stops after 1 s leaving it running
    assert q.get(a).state == "running"  # type: ignore[union-attr]
    assert q.cancel(a) == "cancelling"
    service(tmp_path).run()
    assert q.get(a).state == "cancelled" and done_lines(done) == []  # type: ignore[union-attr]


def test_shadow_mode_launches_nothing_and_logs_both_policies(tmp_path: Path) -> None:
    submit(tmp_path, [ticks_spec(tmp_path / "d", 1, g) for g in (4, 1, 2)])
    service(tmp_path, policy="sjf", mode="shadow", exit_when_idle=False, max_wall_s=0.5).run()
    q = JobQueue(tmp_path)
    assert [r.state for r in q.jobs()] == ["pending"] * 3
    first = json.loads((tmp_path / "shadow.jsonl").read_text().splitlines()[0])
    assert first["baseline"]["name"] == "fifo" and first["policy"]["name"] == "sjf"
    assert [d["job"] for d in first["baseline"]["decisions"]] == [1]  # fifo: the 4-GPU head of the queue
    assert first["policy"]["error"] is None and first["baseline"]["error"] is None


@pytest.mark.slow  # training the tiny agent dominates (~1 min here)
def test_twenty_jobs_finish_under_a_trained_agent(tmp_path: Path) -> None:
    """A (tiny) trained agent of the synthetic_small cluster (2 nodes x 4 GPUs) runs the same service."""
    import gymnasium as gym
    import torch
    from sb3_contrib import MaskablePPO

    import gpusched_env  # noqa: F401
    from gpusched.agents.adapter import write_meta

    torch.set_num_threads(1)
    env = gym.make("gpusched/Cluster-v0", scenario="synthetic_small")
    model = MaskablePPO("MlpPolicy", env, n_steps=64, batch_size=32, n_epochs=1, seed=0,
                        policy_kwargs={"net_arch": [32]}, device="cpu")
    model.learn(64)
    path = tmp_path / "model.zip"
    model.save(str(path))
    u = env.unwrapped
    write_meta(path, {"algo": "maskable_ppo", "scenario": "synthetic_small",
                      "env": {"queue_slots": u.k, "fifo_slots": u.fifo_slots,  # type: ignore[attr-defined]
                              "options": list(u.option_set.names), "max_actions_per_decision": 64}})  # type: ignore[attr-defined]
    out = tmp_path / "svc"
    done = tmp_path / "done.txt"
    ids = submit(out, [ticks_spec(done, 1 + i % 4, g) for i, g in enumerate(SIZES)])
    service(out, policy="agent", agent_path=str(path), scenario="synthetic_small", nodes=2, devices_per_node=4).run()
    assert [r.state for r in JobQueue(out).jobs()] == ["finished"] * 20
    assert sorted(int(x[0]) for x in done_lines(done) if x[3] in ("-", "0")) == ids
    assert "FIFO decides" not in (out / "service.log").read_text()  # the agent decided every round


@pytest.mark.parametrize("policy", ["sjf", "agent"])
def test_round_s_is_given_only_to_policies_with_rounds(tmp_path: Path, policy: str) -> None:
    """``round_s`` is a serve key for round-based heuristics; an event-driven one and a trained agent
    (which keeps its env's rounds) are built without it instead of refusing an unknown parameter."""
    from gpusched.real.service.serve import _has_rounds

    assert [_has_rounds(p) for p in ("las", "tiresias", "fifo", "sjf", "agent")] == [True, True, False, False, False]
    extra = {"agent_path": "pretrained:set_philly_dr"} if policy == "agent" else {}
    svc = service(tmp_path, policy=policy, round_s=1.0, **extra)
    assert svc.policy.name in (policy, "agent")
    las = service(tmp_path / "las", policy="las", round_s=7.0)
    assert las.policy.round_s == 7.0  # type: ignore[attr-defined]


def test_a_preemption_that_reaches_a_job_which_just_ended_by_itself_finishes_it(tmp_path: Path) -> None:
    """The race behind a job completed twice, forced: the policy preempts a job that still read as
    running, but the job exits 0 by itself before the stop signal reaches its launch, while the launch's
    runner (frozen here) has yet to record the exit. The service must record the job finished, not
    preempted and queued again (its next launch would complete it a second time)."""
    pid_file, go = tmp_path / "pid", tmp_path / "go"
    (j,) = submit(tmp_path, [parse_spec({"command": f'echo $$ > {pid_file}; while [ ! -e {go} ]; do sleep 0.02; done',
                                         "shell": True, "gpus": 1}, "t")])
    svc = service(tmp_path, exit_when_idle=False)
    svc.refresh_nodes()
    svc.schedule()  # fifo starts the job
    q = JobQueue(tmp_path)
    row = q.get(j)
    assert row is not None and row.state == "running"
    wait_until(lambda: pid_file.exists() and pid_file.read_text().strip(), "the job started")
    job = int(pid_file.read_text())
    runner = svc.engine.runners["local0"].procs[(j, 0)]  # type: ignore[attr-defined]
    os.kill(runner.pid, signal.SIGSTOP)
    wait_until(lambda: proc_state(runner.pid) == "T", "the runner frozen")
    go.touch()
    wait_until(lambda: proc_state(job) == "Z", "the job exited")
    send = svc.engine.signal

    def signal_then_thaw(node: str, job_id: int, launch: int, sig: int) -> None:
        send(node, job_id, launch, sig)  # the stop signal, after the job's exit
        os.kill(runner.pid, signal.SIGCONT)

    svc.engine.signal = signal_then_thaw  # type: ignore[method-assign]
    svc.carry_out([Preempt(j)], {j: row}, time.time())
    svc.shutdown()
    done = q.get(j)
    assert done is not None and (done.state, done.preemptions, done.launches) == ("finished", 0, 1)
    assert [s for _, _, s, _ in q.history(j)] == ["pending", "running", "finished"]
