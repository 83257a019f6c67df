"""Slurm as the engine that runs a policy's decisions: gpusched decides, Slurm runs.

Every job is submitted held (``sbatch --hold``), started by naming its nodes and releasing it
(``scontrol update JobId=… NodeList=…``, ``scontrol release``), preempted by ``scontrol requeuehold``
(Slurm sends the job's signal, waits ``KillWait`` and requeues it held, so the policy decides when it
runs again) and cancelled by ``scancel``. States come from ``squeue`` with a delimited format and
nodes from ``scontrol --oneliner show node``: parsable output only, never the human tables.

Jobs that this service did not submit (their name lacks :data:`PREFIX`) are reported by
:meth:`SlurmClient.foreign_gpus` as occupied GPUs per node and are never touched.

All commands go through one ``run`` callable, so tests can record what would run without Slurm.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

PREFIX = "gpusched-"
SEP = "|"
# squeue fields: job id, name, state, nodes, GRES/TRES per node, user, reason, restart count.
SQUEUE_FORMAT = SEP.join(["%i", "%j", "%T", "%N", "%b", "%u", "%r"])
GPU_RE = re.compile(r"gpu(?::[^:(,]+)?:(\d+)")
# squeue fields for shadow mode: job id, name, state, nodes, node count, GRES per node, user, submit,
# start and end time (ISO, the controller's local time). Finished jobs stay listed for MinJobAge.
SQUEUE_TIMES_FORMAT = SEP.join(["%i", "%j", "%T", "%N", "%D", "%b", "%u", "%V", "%S", "%e"])
ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL",
         "DEADLINE")

Run = Callable[[Sequence[str]], str]


class SlurmError(RuntimeError):
    """A Slurm command failed; the message names the command and what Slurm said."""


def run_command(env: Mapping[str, str] | None = None) -> Run:
    """A ``run`` callable executing Slurm's clients (with ``env``, e.g. a test cluster's SLURM_CONF)."""

    def run(argv: Sequence[str]) -> str:
        p = subprocess.run(list(argv), capture_output=True, text=True, env=dict(env) if env else None,
                           check=False, timeout=60)
        if p.returncode != 0:
            msg = (p.stderr or p.stdout).strip().splitlines()
            raise SlurmError(f"{shlex.join(argv)}: {msg[-1] if msg else f'exit {p.returncode}'}")
        return p.stdout

    return run


@dataclass(frozen=True)
class SlurmNode:
    name: str
    gpus: int
    state: str  # Slurm's node state, lower case (idle, mixed, allocated, down, drained, ...)

    @property
    def usable(self) -> bool:
        s = self.state.split("+")[0]
        return s in ("idle", "mixed", "allocated", "completing")


@dataclass(frozen=True)
class SlurmJob:
    slurm_id: int
    name: str
    state: str  # PENDING, RUNNING, COMPLETED, ...
    nodes: tuple[str, ...]
    gpus_per_node: int
    user: str
    reason: str

    @property
    def ours(self) -> bool:
        return self.name.startswith(PREFIX)

    @property
    def job_id(self) -> int | None:
        """The service's job id, for jobs this service submitted."""
        tail = self.name[len(PREFIX):]
        return int(tail) if self.ours and tail.isdigit() else None


@dataclass(frozen=True)
class SlurmRecord:
    """What Slurm did with one job: times in seconds since the epoch (None: not yet, or unknown)."""

    slurm_id: int
    name: str
    state: str
    nodes: tuple[str, ...]
    n_nodes: int
    gpus_per_node: int
    user: str
    submit_t: float | None
    start_t: float | None
    end_t: float | None

    @property
    def gpus(self) -> int:
        return self.gpus_per_node * self.n_nodes

    @property
    def ours(self) -> bool:
        return self.name.startswith(PREFIX)

    @property
    def ended(self) -> bool:
        return self.state.split()[0] in ENDED


def slurm_time(text: str) -> float | None:
    """A Slurm timestamp (``2026-11-26T21:00:39``, local time) in seconds since the epoch; None for
    ``N/A``, ``NONE``, ``Unknown`` and the like."""
    try:
        return time.mktime(time.strptime(text.strip(), "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return None


def parse_job_times(text: str) -> list[SlurmRecord]:
    """``squeue -h -t all -o SQUEUE_TIMES_FORMAT`` → records. A pending job's start (Slurm's estimate),
    a live job's end (its time limit) and the start of a job cancelled before it ran are no facts: None."""
    out = []
    for jid, name, state, nodes, n_nodes, gres, user, submit, start, end in _rows(text, 10):
        st = state.strip()
        hosts = expand_hostlist(nodes)
        started = st not in ("PENDING", "REQUEUED") and bool(hosts)  # a job cancelled while pending has no nodes
        out.append(SlurmRecord(
            int(jid.split("_")[0]), name, st, hosts, int(n_nodes) if n_nodes.isdigit() else 1,
            gpu_count(gres), user, slurm_time(submit), slurm_time(start) if started else None,
            slurm_time(end) if st.split()[0] in ENDED else None))
    return out


def gpu_count(gres: str) -> int:
    """GPUs in a GRES string such as ``gpu:4``, ``gpu:a100:2(S:0)`` or ``gres/gpu:2`` (0 if none)."""
    return sum(int(m) for m in GPU_RE.findall(gres.replace("gres/", "")))


def parse_nodes(text: str) -> list[SlurmNode]:
    """``scontrol --oneliner show node`` → nodes (one line each, ``Key=Value`` tokens)."""
    out = []
    for line in text.splitlines():
        fields = dict(tok.split("=", 1) for tok in line.split() if "=" in tok)
        if "NodeName" not in fields:
            continue
        out.append(SlurmNode(fields["NodeName"], gpu_count(fields.get("Gres", "")),
                             fields.get("State", "unknown").lower()))
    return out


def expand_hostlist(spec: str) -> tuple[str, ...]:
    """``n[1-3,5],m2`` → ``(n1, n2, n3, n5, m2)``: Slurm's compressed host lists (one bracket level)."""
    if not spec or spec in ("(null)", "n/a"):
        return ()
    names: list[str] = []
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\])?", spec):
        m = re.fullmatch(r"(.*)\[([^\]]*)\](.*)", part)
        if not m:
            names.append(part)
            continue
        head, ranges, tail = m.groups()
        for r in ranges.split(","):
            lo, _, hi = r.partition("-")
            width = len(lo)
            for i in range(int(lo), int(hi or lo) + 1):
                names.append(f"{head}{i:0{width}d}{tail}")
    return tuple(names)


def _rows(text: str, n: int) -> Iterator[list[str]]:
    """The ``n`` fields of each non-blank line of delimited ``squeue`` output; another count is an error."""
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split(SEP)
        if len(parts) != n:
            raise SlurmError(f"squeue: expected {n} '{SEP}'-separated fields, got {line!r}")
        yield parts


def parse_jobs(text: str) -> list[SlurmJob]:
    """``squeue -h -o SQUEUE_FORMAT`` → jobs."""
    out = []
    for jid, name, state, nodes, gres, user, reason in _rows(text, 7):
        out.append(SlurmJob(int(jid.split("_")[0]), name, state, expand_hostlist(nodes), gpu_count(gres),
                            user, reason))
    return out


@dataclass(frozen=True)
class BatchJob:
    """What the service asks Slurm to run for one of its jobs."""

    job_id: int
    command: tuple[str, ...]
    shell: bool
    gpus_per_node: int
    nodes: int
    env: tuple[tuple[str, str], ...]
    workdir: str | None
    log_path: str
    signal: str = "TERM"
    grace_s: int = 30


def batch_script(job: BatchJob) -> str:
    """The sbatch script: the job's command, run once per node with srun for multi-node jobs.

    The command is quoted word by word (``shlex.join``) and ``exec``'d, so no shell interprets it
    unless the spec asked for one (``shell: true``)."""
    cmd = ("bash", "-c", job.command[0]) if job.shell else job.command
    launch = "exec " + shlex.join(cmd)
    if job.nodes > 1:  # one process per node; rank and world size from Slurm's own variables
        launch = ("export MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)\n"
                  "export MASTER_PORT=$((29500 + SLURM_JOB_ID % 1000)) WORLD_SIZE=$SLURM_NNODES\n"
                  "exec srun --ntasks-per-node=1 bash -c 'RANK=$SLURM_NODEID exec \"$@\"' _ "
                  + shlex.join(cmd))
    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in job.env)
    cd = f"cd {shlex.quote(job.workdir)}\n" if job.workdir else ""
    return f"#!/bin/bash\n{exports}export GPUSCHED_RESTART_COUNT=${{GPUSCHED_RESTART_COUNT:-${{SLURM_RESTART_COUNT:-0}}}}\n{cd}{launch}\n"


class SlurmClient:
    """The Slurm commands the engine needs, each one call of ``run``."""

    def __init__(self, run: Run, partition: str | None = None, script_dir: str | Path | None = None):
        self.run = run
        self.partition = partition
        self.script_dir = Path(script_dir) if script_dir else None

    def nodes(self) -> list[SlurmNode]:
        argv = ["scontrol", "--oneliner", "show", "node"]
        nodes = parse_nodes(self.run(argv))
        if self.partition:
            names = set(expand_hostlist(self._partition_nodes()))
            nodes = [n for n in nodes if n.name in names]
        return nodes

    def _partition_nodes(self) -> str:
        text = self.run(["scontrol", "--oneliner", "show", "partition", str(self.partition)])
        m = re.search(r"(?:^|\s)Nodes=(\S+)", text)
        if not m:
            raise SlurmError(f"partition {self.partition!r}: no Nodes= in scontrol's answer")
        return m.group(1)

    def jobs(self) -> list[SlurmJob]:
        argv = ["squeue", "-h", "-t", "all", "-o", SQUEUE_FORMAT]
        if self.partition:
            argv += ["-p", self.partition]
        return parse_jobs(self.run(argv))

    def job_times(self) -> list[SlurmRecord]:
        """Every job Slurm still lists in the partition (finished ones for MinJobAge), with its times."""
        argv = ["squeue", "-h", "-t", "all", "-o", SQUEUE_TIMES_FORMAT]
        if self.partition:
            argv += ["-p", self.partition]
        return parse_job_times(self.run(argv))

    def foreign_gpus(self, jobs: Sequence[SlurmJob] | None = None) -> dict[str, int]:
        """GPUs per node held by running jobs this service did not submit."""
        held: dict[str, int] = {}
        for j in self.jobs() if jobs is None else jobs:
            if not j.ours and j.state in ("RUNNING", "COMPLETING", "CONFIGURING"):
                for n in j.nodes:
                    held[n] = held.get(n, 0) + j.gpus_per_node
        return held

    def submit_held(self, job: BatchJob, tag: str = "") -> int:
        """Submit ``job`` held; returns Slurm's job id. ``tag`` tells apart the scripts of several
        submissions of one job (launches, nodes)."""
        if self.script_dir is None:
            raise SlurmError("submit_held needs a script_dir for the batch scripts")
        self.script_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        script = self.script_dir / f"job-{job.job_id}{'-' + tag if tag else ''}.sh"
        script.write_text(batch_script(job))
        script.chmod(0o700)
        argv = ["sbatch", "--parsable", "--hold", "--requeue", f"--job-name={PREFIX}{job.job_id}",
                f"--nodes={job.nodes}", "--ntasks-per-node=1", f"--gres=gpu:{job.gpus_per_node}",
                f"--signal=B:{job.signal}@{job.grace_s}", f"--output={job.log_path}", "--open-mode=append"]
        if self.partition:
            argv.append(f"--partition={self.partition}")
        out = self.run([*argv, str(script)]).strip()
        return int(out.split(";")[0])

    def release(self, slurm_id: int, nodes: Sequence[str]) -> None:
        """Start a held job on exactly ``nodes`` (now: a requeued job would otherwise wait out Slurm's
        requeue delay, about two minutes)."""
        self.run(["scontrol", "update", f"JobId={slurm_id}", f"NodeList={','.join(nodes)}", "StartTime=now"])
        self.run(["scontrol", "release", str(slurm_id)])

    def requeue_held(self, slurm_id: int) -> None:
        """Preempt: Slurm signals the job, requeues it and holds it until the policy releases it."""
        self.run(["scontrol", "requeuehold", str(slurm_id)])

    def signal(self, slurm_id: int, name: str, batch_only: bool = False) -> None:
        """Send signal ``name`` (e.g. ``TERM``) to every process of the job, batch shell included;
        ``batch_only``: to the batch shell alone (``scancel --batch``: the launch wrapper, which the
        service's batch scripts ``exec``, passes it on to the job's processes while the job runs)."""
        self.run(["scancel", f"--signal={name}", "--batch" if batch_only else "--full", str(slurm_id)])

    def cancel(self, slurm_id: int) -> None:
        self.run(["scancel", str(slurm_id)])
