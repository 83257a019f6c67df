"""A one-machine Slurm cluster for tests and trials: munged, slurmctld and one slurmd per node name.

Everything lives in one folder that this module writes (config, keys, state, logs, fake GPU device
files), so nothing under /etc is touched and :meth:`LocalSlurm.stop` leaves no daemon behind::

    with LocalSlurm(tmp_dir, nodes=3, gpus_per_node=4) as slurm:
        subprocess.run(["sinfo"], env=slurm.env)

The daemons come from the distribution's packages (Debian: ``slurm-wlm``, ``munge``). Several
slurmd on one host need a build with multiple-slurmd support (Debian's has it); :func:`unavailable`
says why a cluster cannot be started here, for tests to skip with that reason.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "scontrol", "squeue", "scancel")
SBIN = ("/usr/sbin", "/usr/local/sbin", "/sbin")


def find(binary: str) -> str | None:
    """Path of a Slurm or munge binary (sbin folders are searched although root's PATH may lack them)."""
    hit = shutil.which(binary)
    if hit:
        return hit
    for d in SBIN:
        p = Path(d) / binary
        if p.is_file() and os.access(p, os.X_OK):
            return str(p)
    return None


def unavailable() -> str | None:
    """Why a local cluster cannot start here (None if it can)."""
    missing = [b for b in DAEMONS if find(b) is None]
    if missing:
        return (f"Slurm is not installed (missing {', '.join(missing)}; "
                "Debian: apt-get install slurm-wlm munge)")
    if os.geteuid() != 0:
        return "a local Slurm cluster runs slurmd as root; run the tests as root"
    return None


def _free_ports(n: int) -> list[int]:
    """``n`` distinct ports that are free now, chosen below Linux's ephemeral range (32768-60999), so
    that the outgoing connections of other processes cannot take one before the daemons bind it."""
    import socket

    out: list[int] = []
    while len(out) < n:
        port = 20000 + secrets.randbelow(12000)
        if port in out:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        out.append(port)
    return out


@dataclass
class LocalSlurm:
    """Config and daemons of a one-machine cluster with ``nodes`` node names of ``gpus_per_node`` GPUs."""

    root: Path
    nodes: int = 3
    gpus_per_node: int = 4
    cpus_per_node: int = 8  # choice: more job slots than cores (config_overrides lets slurmd accept it)
    partition: str = "gpu"
    kill_wait_s: int = 5
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.root = Path(self.root).resolve()

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        """The environment every Slurm client needs to reach this cluster."""
        path = ":".join([*SBIN, os.environ.get("PATH", "")])
        return {**os.environ, "SLURM_CONF": str(self.conf), "PATH": path}

    @property
    def node_names(self) -> list[str]:
        return [f"n{i + 1}" for i in range(self.nodes)]

    def write_config(self) -> None:
        r = self.root
        for d in ("state", "spool", "log", "run", "dev"):
            (r / d).mkdir(parents=True, exist_ok=True)
        key = r / "munge.key"
        key.write_bytes(secrets.token_bytes(1024))
        key.chmod(0o600)
        for g in range(self.gpus_per_node):
            (r / "dev" / f"gpu{g}").touch()  # fake device files: slurmd only checks that they exist
        ctld, slurmd, *ports = _free_ports(2 + self.nodes)
        nodes = ",".join(self.node_names)
        lines = [
            "ClusterName=gpusched-local",
            "SlurmctldHost=localhost",
            f"SlurmctldPort={ctld}",
            f"SlurmdPort={slurmd}",
            "AuthType=auth/munge",
            f"AuthInfo=socket={r}/munge.sock",
            "CredType=cred/munge",
            "SlurmUser=root",
            "SlurmdUser=root",
            f"StateSaveLocation={r}/state",
            f"SlurmdSpoolDir={r}/spool/%n",
            f"SlurmctldPidFile={r}/run/slurmctld.pid",
            f"SlurmdPidFile={r}/run/slurmd-%n.pid",
            f"SlurmctldLogFile={r}/log/slurmctld.log",
            f"SlurmdLogFile={r}/log/slurmd-%n.log",
            "SlurmdParameters=config_overrides",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SchedulerType=sched/builtin",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "GresTypes=gpu",
            "ReturnToService=2",
            "MpiDefault=none",
            "JobCompType=jobcomp/none",
            "AccountingStorageType=accounting_storage/none",
            "JobAcctGatherType=jobacct_gather/none",
            "MinJobAge=3600",
            "SlurmdTimeout=30",
            "InactiveLimit=0",
            f"KillWait={self.kill_wait_s}",
            "PreemptMode=OFF",
        ]
        for name, port in zip(self.node_names, ports, strict=True):
            lines.append(f"NodeName={name} NodeHostname=localhost Port={port} CPUs={self.cpus_per_node} "
                         f"RealMemory=1000 Gres=gpu:{self.gpus_per_node} State=UNKNOWN")
        lines.append(f"PartitionName={self.partition} Nodes={nodes} Default=YES MaxTime=INFINITE State=UP")
        self.conf.write_text("\n".join(lines) + "\n")
        last = self.gpus_per_node - 1
        (r / "gres.conf").write_text(f"NodeName={nodes} Name=gpu File={r}/dev/gpu[0-{last}]\n"
                                     if last > 0 else f"NodeName={nodes} Name=gpu File={r}/dev/gpu0\n")

    def _spawn(self, argv: list[str], log: str) -> None:
        out = open(self.root / "log" / log, "ab")  # noqa: SIM115 - the daemon owns it
        self.procs.append(subprocess.Popen(argv, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                           start_new_session=True))

    def start(self, timeout_s: float = 60.0, attempts: int = 3) -> LocalSlurm:
        """Start munged, slurmctld and the slurmds; a daemon that exits while starting (e.g. its port
        was taken in the meantime) is retried on new ports, up to ``attempts`` times."""
        why = unavailable()
        if why:
            raise RuntimeError(why)
        for attempt in range(attempts):
            try:
                return self._start_once(timeout_s)
            except RuntimeError as e:
                if "exited" not in str(e) or attempt == attempts - 1:
                    raise
        raise AssertionError("unreachable")

    def _start_once(self, timeout_s: float) -> LocalSlurm:
        self.write_config()
        r = self.root
        (r / "munge.sock").unlink(missing_ok=True)  # a previous attempt's: wait for the new one
        self._spawn([str(find("munged")), "--foreground", f"--key-file={r}/munge.key",
                     f"--socket={r}/munge.sock", f"--pid-file={r}/run/munged.pid",
                     f"--log-file={r}/log/munged.log", f"--seed-file={r}/munge.seed", "--force"],
                    "munged.out")
        self._wait(lambda: (r / "munge.sock").exists(), 10, "munged did not create its socket")
        self._spawn([str(find("slurmctld")), "-D", "-i"], "slurmctld.out")
        for name in self.node_names:
            self._spawn([str(find("slurmd")), "-D", "-N", name], f"slurmd-{name}.out")
        self._wait(self._all_idle, timeout_s, "the nodes did not come up idle "
                   f"(logs in {r / 'log'})")
        return self

    def _all_idle(self) -> bool:
        p = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t"], env=self.env, capture_output=True,
                           text=True, check=False)
        states = dict(line.split() for line in p.stdout.splitlines() if line.strip())
        return all(states.get(n) == "idle" for n in self.node_names)

    def _wait(self, ok: Callable[[], bool], timeout_s: float, what: str) -> None:
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            if ok():
                return
            dead = [str(p.args) for p in self.procs if p.poll() is not None]
            if dead:
                self.stop()
                raise RuntimeError(f"{what}: {dead[0]} exited (logs in {self.root / 'log'})")
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(what)

    def stop(self) -> None:
        """Stop every daemon and every job process they started."""
        if self.procs:
            subprocess.run(["scancel", "--full", f"--partition={self.partition}"], env=self.env,
                           capture_output=True, check=False, timeout=10)
            end = time.monotonic() + self.kill_wait_s + 5
            while time.monotonic() < end and self._queue_busy():
                time.sleep(0.2)
        for p in reversed(self.procs):
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        end = time.monotonic() + 10
        for p in self.procs:
            try:
                p.wait(timeout=max(0.1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        self.procs.clear()
        self._kill_strays()

    def _queue_busy(self) -> bool:
        p = subprocess.run(["squeue", "-h", "-t", "running,completing"], env=self.env, capture_output=True,
                           text=True, check=False, timeout=10)
        return p.returncode == 0 and bool(p.stdout.strip())

    def _kill_strays(self) -> None:
        """SIGKILL job step daemons of this cluster that outlived slurmd, with their children."""
        import psutil

        for proc in psutil.process_iter(["name"]):
            try:
                if proc.info["name"] == "slurmstepd" and proc.environ().get("SLURM_CONF") == str(self.conf):
                    for child in proc.children(recursive=True):
                        child.kill()
                    proc.kill()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue

    def __enter__(self) -> LocalSlurm:
        return self.start()

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()
