"""The service's engine on a Slurm cluster: the policy decides, Slurm runs.

Each launch of a job part (one node of a job) is one Slurm batch job named ``gpusched-<id>``,
submitted held with the part's GPU count and released onto exactly the node the policy chose
(:class:`~gpusched.real.service.slurm.SlurmClient`). The batch script runs the same launch wrapper as the other
engines (:mod:`gpusched.real.service.runner`), so claim and exit files under ``out_dir/slurm/`` tell a
restarted service what happened; ``out_dir`` must therefore be on a filesystem every node shares.
Stop signals reach the launch wrapper alone through ``scancel --signal=SIG --batch`` (the batch script
``exec``'s it), which passes them on to the job's processes only while the job has not exited (the
preemption protocol of docs/DEPLOY.md; a job that finished as the signal came is not queued again),
and a kill is ``scancel``. A preempted job is submitted again when the policy
restarts it: the service, not Slurm, keeps its restart count and its checkpoint folder.

Slurm jobs that the service did not submit hold GPUs the policy must not give away:
:meth:`SlurmEngine.foreign_gpus` reports them per node and the service marks as many GPUs busy.
"""

from __future__ import annotations

import signal
import sys
import time
from collections import deque
from pathlib import Path

from gpusched.real.service.engine import NodeInfo, NodeLost
from gpusched.real.service.node import EXITED, LOST, RUNNER, RUNNING
from gpusched.real.service.runner import claim
from gpusched.real.service.slurm import BatchJob, Run, SlurmClient, SlurmError, SlurmJob, run_command

LIVE = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING", "STOPPED")
STATUS_TTL_S = 0.2  # choice: one squeue answer serves every status call of one poll


class SlurmEngine:
    """Launches on the nodes of a Slurm partition (all of them when ``partition`` is None)."""

    def __init__(self, out_dir: str | Path, partition: str | None = None, run: Run | None = None) -> None:
        self.root = Path(out_dir) / "slurm"
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.client = SlurmClient(run or run_command(), partition, self.root / "scripts")
        self._jobs: dict[int, SlurmJob] = {}
        self._jobs_t = -1.0

    # -- what Slurm says ---------------------------------------------------------------------
    def _queue(self) -> dict[int, SlurmJob]:
        if time.monotonic() - self._jobs_t > STATUS_TTL_S:
            self._jobs = {j.slurm_id: j for j in self.client.jobs()}
            self._jobs_t = time.monotonic()
        return self._jobs

    def nodes(self) -> list[NodeInfo]:
        return [NodeInfo(n.name, n.gpus, "slurm", n.name) for n in self.client.nodes() if n.usable]

    def foreign_gpus(self) -> dict[str, int]:
        """GPUs per node held by Slurm jobs this service did not submit."""
        return self.client.foreign_gpus(list(self._queue().values()))

    # -- launches ----------------------------------------------------------------------------
    def job_dir(self, node: str, job_id: int) -> Path:
        """One job's files on one node (a multi-node job has one such folder per node)."""
        return self.root / "nodes" / node / "jobs" / str(job_id)

    def launch_dir(self, node: str, job_id: int, launch: int) -> Path:
        return self.job_dir(node, job_id) / f"launch-{launch}"

    def _sid_file(self, node: str, job_id: int, launch: int) -> Path:
        return self.launch_dir(node, job_id, launch) / "slurm_id"

    def _sid(self, node: str, job_id: int, launch: int) -> int | None:
        try:
            return int(self._sid_file(node, job_id, launch).read_text())
        except (OSError, ValueError):
            return None

    def launch(self, node: str, job_id: int, launch: int, argv: list[str], env: dict[str, str],
               cwd: str | None, local: list[int], checkpoint_dir: str, mps: object = None) -> None:
        """Submit this part held and release it onto ``node``; Slurm picks the GPUs inside the node
        (``local`` gives only their count) and sets CUDA_VISIBLE_DEVICES itself. ``mps`` is not used:
        on Slurm an MPS share reaches the job only as GPUSCHED_SM_PCT."""
        d = self.launch_dir(node, job_id, launch)
        d.mkdir(parents=True, exist_ok=True, mode=0o700)
        Path(checkpoint_dir).mkdir(parents=True, exist_ok=True, mode=0o700)
        job = BatchJob(job_id, (sys.executable, RUNNER, str(d), "--pass-stop", "--", *argv), False, len(local), 1,
                       tuple(sorted(env.items())), cwd or str(self.job_dir(node, job_id)),
                       str(self.job_dir(node, job_id) / "log"))
        sid = self.client.submit_held(job, tag=f"{launch}-{node}")
        self._sid_file(node, job_id, launch).write_text(f"{sid}\n")
        self.client.release(sid, [node])
        self._jobs_t = -1.0

    def status(self, node: str, job_id: int, launch: int) -> tuple[str, int | None, bool]:
        d = self.launch_dir(node, job_id, launch)
        sid = self._sid(node, job_id, launch)
        j = self._queue().get(sid) if sid is not None else None
        if j is not None and j.state == "PENDING" and "held" in j.reason.lower():
            self.client.cancel(j.slurm_id)  # submitted, never released: the service died in between
            j = None
        if j is not None and j.state in LIVE:
            return RUNNING, None, False
        try:
            rc, stopped = (d / "exit").read_text().split()
            return EXITED, int(rc), stopped == "1"
        except (OSError, ValueError):
            d.mkdir(parents=True, exist_ok=True, mode=0o700)
            claim(str(d), "dead\n")  # a wrapper that starts late will not run it
            return LOST, None, False  # cancelled before its wrapper ran, or killed outright

    def signal(self, node: str, job_id: int, launch: int, sig: int) -> None:
        sid = self._sid(node, job_id, launch)
        if sid is None:
            return
        started = (self.launch_dir(node, job_id, launch) / "claim").exists()
        try:
            if sig == signal.SIGKILL or not started:
                # not started yet (Slurm is still bringing it up): a signal would be lost, so the
                # part is cancelled before it does any work; the next status reports it lost
                self.client.cancel(sid)
            else:
                self.client.signal(sid, signal.Signals(sig).name.removeprefix("SIG"), batch_only=True)
        except SlurmError:
            self._jobs_t = -1.0
            j = self._queue().get(sid)
            if j is not None and j.state in LIVE:
                raise
            # it ended between the poll and the signal: nothing to stop
        self._jobs_t = -1.0

    def tail(self, node: str, job_id: int, n: int) -> list[str]:
        try:
            with open(self.job_dir(node, job_id) / "log", errors="replace") as f:
                return [x.rstrip("\n") for x in deque(f, maxlen=n)]
        except OSError:
            return []

    def free_port(self, node: str) -> int:
        # choice: a fixed port per node name; a multi-node job's rank 0 listens on it
        if not node:
            raise NodeLost(node)
        return 29500 + sum(node.encode()) % 1000

    def pack_checkpoint(self, node: str, checkpoint_dir: str, max_bytes: int) -> tuple[int, bytes | None]:
        raise NotImplementedError("engine=slurm needs out_dir on a shared filesystem (shared_fs=true)")

    def unpack_checkpoint(self, node: str, checkpoint_dir: str, data: bytes) -> None:
        raise NotImplementedError("engine=slurm needs out_dir on a shared filesystem (shared_fs=true)")

    def close(self) -> None:
        """Leaves the jobs running (a restarted service re-attaches to them)."""
