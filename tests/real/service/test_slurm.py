"""The Slurm engine's commands: parsers on hand-written outputs, then a real one-machine cluster."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from gpusched.real.service.slurm import (
    BatchJob,
    SlurmClient,
    batch_script,
    expand_hostlist,
    gpu_count,
    parse_jobs,
    parse_nodes,
    run_command,
)
from gpusched.real.service.slurm_local import LocalSlurm, unavailable


def test_gpu_count_reads_every_gres_form() -> None:
    assert gpu_count("gpu:4") == 4
    assert gpu_count("gpu:a100:2(S:0)") == 2
    assert gpu_count("gres/gpu:3") == 3
    assert gpu_count("gpu:v100:2,gpu:k80:1") == 3
    assert gpu_count("(null)") == 0


def test_hostlists_expand_ranges_and_padding() -> None:
    assert expand_hostlist("n[1-3,5],m2") == ("n1", "n2", "n3", "n5", "m2")
    assert expand_hostlist("gpu[08-10]") == ("gpu08", "gpu09", "gpu10")
    assert expand_hostlist("(null)") == ()


def test_parse_nodes_and_jobs() -> None:
    nodes = parse_nodes("NodeName=n1 Arch=x86_64 Gres=gpu:4 State=IDLE ThreadsPerCore=1\n"
                        "NodeName=n2 Gres=gpu:tesla:2(S:0) State=MIXED+DRAIN\n")
    assert [(n.name, n.gpus, n.state, n.usable) for n in nodes] == [
        ("n1", 4, "idle", True), ("n2", 2, "mixed+drain", True)]
    jobs = parse_jobs("7|gpusched-12|RUNNING|n[1-2]|gres:gpu:2|root|None\n"
                      "8|train.sh|RUNNING|n3|gres:gpu:1|alice|None\n")
    assert jobs[0].job_id == 12 and jobs[0].nodes == ("n1", "n2") and jobs[0].gpus_per_node == 2
    assert not jobs[1].ours and jobs[1].job_id is None
    client = SlurmClient(lambda argv: "")
    assert client.foreign_gpus(jobs) == {"n3": 1}


def test_recorded_commands_for_submit_release_requeue(tmp_path: Path) -> None:
    calls: list[list[str]] = []

    def run(argv):  # type: ignore[no-untyped-def]
        calls.append(list(argv))
        return "41;cluster\n" if argv[0] == "sbatch" else ""

    c = SlurmClient(run, partition="gpu", script_dir=tmp_path)
    job = BatchJob(5, ("python", "train.py", "--lr", "0.1 x"), False, 2, 1,
                   (("GPUSCHED_JOB_ID", "5"),), "/w d", str(tmp_path / "5.log"))
    assert c.submit_held(job) == 41
    c.release(41, ["n2"])
    c.requeue_held(41)
    c.cancel(41)
    assert calls[0][:3] == ["sbatch", "--parsable", "--hold"]
    assert "--job-name=gpusched-5" in calls[0] and "--gres=gpu:2" in calls[0]
    assert "--partition=gpu" in calls[0]
    assert calls[1:] == [["scontrol", "update", "JobId=41", "NodeList=n2", "StartTime=now"], ["scontrol", "release", "41"],
                         ["scontrol", "requeuehold", "41"], ["scancel", "41"]]
    script = (tmp_path / "job-5.sh").read_text()
    assert "exec python train.py --lr '0.1 x'\n" in script and "cd '/w d'\n" in script


def test_a_shell_command_runs_through_bash_only_when_asked() -> None:
    job = BatchJob(1, ("echo $HOME && sleep 1",), True, 1, 1, (), None, "/tmp/x")
    assert "exec bash -c 'echo $HOME && sleep 1'" in batch_script(job)


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    why = unavailable()
    if why:
        pytest.skip(why)
    with LocalSlurm(tmp_path_factory.mktemp("slurm"), nodes=3, gpus_per_node=4) as s:
        yield s


def _wait(pred, timeout_s: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if pred():
            return
        time.sleep(0.2)
    raise AssertionError("timed out")


def test_a_real_cluster_runs_held_jobs_where_told(slurm: LocalSlurm, tmp_path: Path) -> None:
    c = SlurmClient(run_command(slurm.env), partition="gpu", script_dir=tmp_path)
    assert [(n.name, n.gpus) for n in c.nodes()] == [("n1", 4), ("n2", 4), ("n3", 4)]
    # a job submitted by hand, outside the service: visible as occupied GPUs, never touched
    by_hand = subprocess.run(["sbatch", "--parsable", "--gres=gpu:3", "-w", "n3", "-J", "by-hand", "-o", "/dev/null",
                              "--wrap", "sleep 30"], env=slurm.env, check=True, capture_output=True, text=True)
    _wait(lambda: c.foreign_gpus() == {"n3": 3})
    log = tmp_path / "1.log"
    sid = c.submit_held(BatchJob(1, ("bash", "-c", "echo run=$GPUSCHED_RESTART_COUNT on $SLURMD_NODENAME; "
                                                    "trap 'echo term; exit 0' TERM; sleep 60 & wait"),
                                 False, 2, 1, (), None, str(log)))
    assert [j.state for j in c.jobs() if j.slurm_id == sid] == ["PENDING"]
    c.release(sid, ["n2"])
    _wait(lambda: "run=0 on n2" in (log.read_text() if log.exists() else ""))
    c.requeue_held(sid)
    _wait(lambda: [j.state for j in c.jobs() if j.slurm_id == sid] == ["PENDING"])
    assert "term" in log.read_text()
    c.release(sid, ["n1"])
    _wait(lambda: "run=1 on n1" in log.read_text())
    c.cancel(sid)
    assert c.foreign_gpus() == {"n3": 3}
    c.cancel(int(by_hand.stdout.strip().split(";")[0]))  # the next tests get the whole cluster


# -- the service on Slurm -------------------------------------------------------------------------
SIZES = [1, 2, 1, 4, 1, 2, 6, 1, 3, 1, 2, 1]  # 12 jobs; the 6-GPU job spans two nodes


def _slurm_service(out: Path, slurm: LocalSlurm, **kw: object):  # type: ignore[no-untyped-def]
    from gpusched.real.service.serve import ServeConfig, Service
    from gpusched.real.service.slurm_engine import SlurmEngine

    base: dict[str, object] = {"out_dir": str(out), "engine": "slurm", "partition": "gpu", "poll_s": 0.1,
                               "grace_s": 5.0, "backoff_s": 0.1, "exit_when_idle": True, "max_wall_s": 120.0}
    cfg = ServeConfig(**{**base, **kw})  # type: ignore[arg-type]
    return Service(cfg, engine=SlurmEngine(out, "gpu", run_command(slurm.env)))


@pytest.mark.parametrize("policy", [pytest.param("fifo", marks=pytest.mark.slow), "las"])  # las also preempts
def test_twelve_mixed_jobs_finish_once_on_slurm(slurm: LocalSlurm, tmp_path: Path, policy: str) -> None:
    from gpusched.real.service.queue import JobQueue
    from gpusched.real.service.report import report
    from tests.real.service.helpers import done_lines, steps_done, submit, ticks_spec

    done = tmp_path / "done.txt"
    ticks = [10 + 4 * (i % 4) for i in range(len(SIZES))]
    ids = submit(tmp_path, [ticks_spec(done, t, g) for t, g in zip(ticks, SIZES, strict=True)])
    _slurm_service(tmp_path, slurm, policy=policy, round_s=2.0).run()
    rows = JobQueue(tmp_path).jobs()
    assert [r.state for r in rows] == ["finished"] * 12, [(r.id, r.state) for r in rows]
    lines = done_lines(done)
    # every job completed (a one-node job, or rank 0) and its step counter ended at its tick count; each
    # job that ran as one-node processes did each of its steps exactly once, in order (a restart from zero
    # would repeat step 1; a job stopped in its last step completes at its next launch without a step)
    assert sorted({int(x[0]) for x in lines if x[3] in ("-", "0")}) == ids
    for j, t in zip(ids, ticks, strict=True):
        assert (tmp_path / "checkpoints" / str(j) / "n").read_text().strip() == str(t)
    steps = steps_done(done)
    assert len(steps) >= 6
    for j, t in zip(ids, ticks, strict=True):
        if j in steps:
            assert steps[j] == list(range(1, t + 1)), (j, steps[j])
    ranks = {(x[3], x[4]) for x in lines if int(x[0]) == ids[6]}  # one process per node: ranks 0..k-1 of k
    assert any(k >= 2 and {(str(r), str(k)) for r in range(k)} <= ranks for k in range(2, 4))
    m = report(tmp_path)["policies"][policy]["metrics"]
    assert m["jobs_finished"] == 12
    if policy == "fifo":
        assert m["preemptions"] == 0 and m["restarts"] == 0


class _PreemptOnce:
    """FIFO, except that job 1 is preempted once after 4 s of service by the service's clock, which
    starts when the part is released (Slurm takes about 1–2 s more to start it)."""

    name, round_s, events = "preempt_once", 0.5, True

    def __init__(self, fifo):  # type: ignore[no-untyped-def]
        self.fifo, self.done = fifo, False

    def decide(self, view):  # type: ignore[no-untyped-def]
        from gpusched_env.types import Preempt

        if not self.done and 1 in view.running and view.progress(1).attained_gpu_s >= 4.0:
            self.done = True
            return [Preempt(1)]
        return self.fifo.decide(view)


def test_a_preempted_job_is_stopped_by_slurm_and_resumes_from_its_checkpoint(slurm: LocalSlurm, tmp_path: Path) -> None:
    from gpusched.real.service.queue import JobQueue
    from tests.real.service.helpers import done_lines, submit, ticks_spec

    done = tmp_path / "done.txt"
    (j,) = submit(tmp_path, [ticks_spec(done, 80, 1)])
    svc = _slurm_service(tmp_path, slurm)
    svc.policy = _PreemptOnce(svc.fifo)
    svc.run()
    row = JobQueue(tmp_path).get(j)
    assert row is not None and row.state == "finished" and row.preemptions == 1 and row.launches == 2
    ((job, restart, first, _, _),) = done_lines(done)
    assert (job, restart) == (str(j), "1") and 0 < int(first) < 80  # resumed from its step counter
    # the TERM went to the launch wrapper alone (scancel --batch), which passed it on: the job died of it
    (first_exit,) = (tmp_path / "slurm" / "nodes").glob(f"*/jobs/{j}/launch-0/exit")
    assert first_exit.read_text().split() == ["143", "1"]


@pytest.mark.slow  # the same recovery on the local engine: test_recovery.py; foreign GPUs on Slurm: held jobs above
def test_kill_9_and_restart_on_slurm_loses_nothing_and_leaves_a_hand_submitted_job_alone(
        slurm: LocalSlurm, tmp_path: Path) -> None:
    import sys

    from gpusched.real.service.queue import JobQueue
    from tests.real.service.helpers import done_lines, submit, ticks_spec

    by_hand = subprocess.run(["sbatch", "--parsable", "--gres=gpu:4", "-w", "n3", "-J", "by-hand", "-o", "/dev/null",
                              "--wrap", "sleep 120"], env=slurm.env, check=True, capture_output=True, text=True)
    hand_id = int(by_hand.stdout.strip())
    c = SlurmClient(run_command(slurm.env))
    _wait(lambda: c.foreign_gpus() == {"n3": 4})
    done = tmp_path / "done.txt"
    ids = submit(tmp_path, [ticks_spec(done, 30, 4) for _ in range(5)])  # one job fills a node
    repo = Path(__file__).resolve().parents[3]
    env = {**slurm.env, "PYTHONPATH": str(repo)}
    proc = subprocess.Popen([sys.executable, "-c", "from gpusched.real.cli import main; main()", "serve", f"out_dir={tmp_path}",
                             "engine=slurm", "partition=gpu", "poll_s=0.1", "grace_s=5"], env=env)
    q = JobQueue(tmp_path)
    try:
        _wait(lambda: len(q.jobs(("running",))) == 2 and all(
            (tmp_path / "checkpoints" / str(r.id) / "n").exists() for r in q.jobs(("running",))), 60)
    finally:
        proc.kill()  # kill -9: no chance to clean up
        proc.wait()
    running = sorted(r.id for r in q.jobs(("running",)))
    _slurm_service(tmp_path, slurm, policy="fifo").run()
    rows = {r.id: r for r in q.jobs()}
    assert all(r.state == "finished" for r in rows.values()), {r.id: r.state for r in rows.values()}
    assert sorted(int(x[0]) for x in done_lines(done)) == ids  # every job finished exactly once
    for j in running:  # re-attached after the restart, not started again
        assert rows[j].launches == 1 and rows[j].restarts == 0
    assert not (tmp_path / "slurm" / "nodes" / "n3").exists()  # nothing of ours ran beside the hand job
    assert [j.state for j in c.jobs() if j.slurm_id == hand_id] == ["RUNNING"]  # and it was never touched
    c.cancel(hand_id)


def test_a_stop_signal_before_the_part_started_cancels_it(tmp_path: Path) -> None:
    """Slurm is still bringing the part up (no claim yet): a signal would be lost, so it is cancelled;
    once the wrapper has claimed the launch, the signal is sent."""
    import signal

    from gpusched.real.service.slurm_engine import SlurmEngine

    calls: list[list[str]] = []

    def run(argv):  # type: ignore[no-untyped-def]
        calls.append(list(argv))
        return "7\n" if argv[0] == "sbatch" else ""

    eng = SlurmEngine(tmp_path, "gpu", run)
    eng.launch("n1", 3, 0, ["sleep", "9"], {}, None, [0], str(tmp_path / "ckpt"))
    calls.clear()
    eng.signal("n1", 3, 0, signal.SIGTERM)
    assert calls == [["scancel", "7"]]
    (eng.launch_dir("n1", 3, 0) / "claim").write_text("123 456\n")
    calls.clear()
    eng.signal("n1", 3, 0, signal.SIGTERM)
    assert calls == [["scancel", "--signal=TERM", "--batch", "7"]]  # the wrapper alone: it passes it on


def test_local_cluster_ports_are_distinct_free_and_below_the_ephemeral_range() -> None:
    """A node port taken by another process made a slurmd exit at start: every port is checked, and
    none is one an outgoing connection could be given meanwhile."""
    import socket

    from gpusched.real.service.slurm_local import _free_ports

    ports = _free_ports(5)
    assert len(set(ports)) == 5 and all(20000 <= p < 32000 for p in ports)
    with socket.socket() as s:
        s.bind(("127.0.0.1", ports[0]))  # free when chosen
