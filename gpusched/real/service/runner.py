"""The process that runs one launch of a job: ``python runner.py LAUNCH_DIR [--pass-stop] -- ARGV...`` (stdlib only,
so it adds nothing to the job's environment).

1. It claims the launch by linking ``LAUNCH_DIR/claim`` to a file holding its pid and start time; if
   the claim exists (the service declared this launch dead after a crash), it exits without running.
2. It runs ARGV in its own process group and ignores the stop signals itself, remembering that one
   came. With ``--pass-stop`` (every engine of the service) the service signals the runner alone and
   the runner passes the signal on to the group, but only while the job's process has not exited: a
   signal that comes after the job ended by itself (while the runner has yet to record it) is no
   stop, so a job that had finished when it came is not queued again. Without it (a signal sent to
   every process of the job) any stop signal counts. A stop that comes before the job is started
   keeps it from starting (exit 0, stopped: its next launch runs it).
3. It writes ``LAUNCH_DIR/exit`` atomically: ``<exit code> <1 if a stop signal came first, else 0>``.

So whoever reads the launch folder later (a restarted service) knows whether the launch is running,
finished by itself, stopped on request, or was lost (killed with SIGKILL: a claim, no exit file).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2, signal.SIGHUP)


def _write_atomic(path: str, text: str) -> str:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    return tmp


def claim(launch_dir: str, content: str) -> bool:
    """Create ``launch_dir/claim`` holding ``content`` unless it exists (atomic: link fails if so)."""
    tmp = _write_atomic(os.path.join(launch_dir, "claim"), content)
    try:
        os.link(tmp, os.path.join(launch_dir, "claim"))
        return True
    except FileExistsError:
        return False
    finally:
        os.unlink(tmp)


class StopGate:
    """The stop signals a launch received, and (``pass_on``) their passing on to the job's group.

    A stop counts only when it reaches the job alive: with ``pass_on``, :meth:`on_stop` first asks
    the kernel whether the job's process has exited (``waitid`` without reaping it) and, if so,
    drops the signal; else it records it and sends it to ``pgid``. The job can end by itself only
    between that check and the send (two system calls): it is then recorded as stopped, the safe
    side (queued again, its next launch resumes from a complete checkpoint)."""

    def __init__(self, pass_on: bool, pgid: int) -> None:
        self.pass_on, self.pgid = pass_on, pgid
        self.stopped: list[int] = []
        self.child: int | None = None  # the job's pid, once started
        self._passed = False

    def on_stop(self, sig: int, frame: object) -> None:
        if not self.pass_on:  # the job gets the same signal from the group
            self.stopped.append(sig)
            return
        if self.child is not None and _exited(self.child):
            return  # the job ended before the signal: it finished (or crashed) by itself
        self.stopped.append(sig)
        if self.child is not None:
            self._pass(sig)

    def started(self, pid: int) -> None:
        """The job runs as ``pid``: a stop that came while it was starting is passed on now."""
        self.child = pid
        if self.pass_on and self.stopped and not self._passed:
            self._pass(self.stopped[0])

    def _pass(self, sig: int) -> None:
        self._passed = True
        old = signal.signal(sig, signal.SIG_IGN)  # the runner is in the group: not to itself again
        try:
            os.killpg(self.pgid, sig)
        except ProcessLookupError:
            pass
        finally:
            signal.signal(sig, old)


def _exited(pid: int) -> bool:
    """Whether the child ``pid`` has exited (a zombie not yet reaped, or reaped already)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def main(argv: list[str]) -> int:
    pass_on = len(argv) > 1 and argv[1] == "--pass-stop"
    if pass_on:
        argv = argv[:1] + argv[2:]
    if len(argv) < 3 or argv[1] != "--":
        print("usage: runner.py LAUNCH_DIR [--pass-stop] -- ARGV...", file=sys.stderr)
        return 2
    launch_dir, cmd = argv[0], argv[2:]
    me = os.getpid()
    if not claim(launch_dir, f"{me} {_start_ticks(me)}\n"):
        print(f"[gpusched] launch {launch_dir} was declared dead; not running it", file=sys.stderr, flush=True)
        return 0
    gate = StopGate(pass_on, os.getpgrp())
    for s in STOP_SIGNALS:
        signal.signal(s, gate.on_stop)  # a handler (not SIG_IGN): the child gets default dispositions
    _die_with_parent(os.environ.pop("GPUSCHED_DIE_WITH_PARENT", ""))
    print(f"[gpusched] {time.strftime('%Y-%m-%d %H:%M:%S')} start {' '.join(cmd)}", flush=True)
    if gate.stopped:  # stopped before the job started: it is not started (its next launch resumes)
        print("[gpusched] stopped before the job started", flush=True)
        rc = 0
    else:
        try:
            proc = subprocess.Popen(cmd)
        except OSError as e:
            print(f"[gpusched] cannot start {cmd[0]!r}: {e}", flush=True)
            rc = 127
        else:
            gate.started(proc.pid)
            while True:
                try:
                    rc = proc.wait()
                    break
                except InterruptedError:
                    continue
    print(f"[gpusched] {time.strftime('%Y-%m-%d %H:%M:%S')} exit {rc}", flush=True)
    final = os.path.join(launch_dir, "exit")
    os.replace(_write_atomic(final, f"{rc} {1 if gate.stopped else 0}\n"), final)
    return 0


def _die_with_parent(parent: str) -> None:
    """When ``parent`` (a pid) is set: if that process dies (a node agent whose node left the
    cluster), kill this launch's whole process group, so a job requeued elsewhere never runs twice."""
    if not parent or not sys.platform.startswith("linux"):
        return
    import ctypes

    def on_parent_death(sig: int, frame: object) -> None:
        os.killpg(os.getpgrp(), signal.SIGKILL)

    signal.signal(signal.SIGPWR, on_parent_death)
    ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGPWR), 0, 0, 0)  # PR_SET_PDEATHSIG
    if os.getppid() != int(parent):  # it died before prctl took effect
        on_parent_death(0, None)


def _start_ticks(pid: int) -> str:
    """The process start time in clock ticks since boot (/proc/PID/stat field 22), or '-'."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return "-"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
