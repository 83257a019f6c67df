"""The process that runs one launch of a job: ``python runner.py LAUNCH_DIR -- ARGV...`` (stdlib only,
so it adds nothing to the job's environment).

1. It claims the launch by linking ``LAUNCH_DIR/claim`` to a file holding its pid and start time; if
   the claim exists (the service declared this launch dead after a crash), it exits without running.
2. It runs ARGV in its own process group (the service signals the whole group) and ignores the stop
   signals itself, remembering that one came.
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


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: runner.py LAUNCH_DIR -- ARGV...", file=sys.stderr)
        return 2
    launch_dir, cmd = argv[0], argv[2:]
    me = os.getpid()
    if not claim(launch_dir, f"{me} {_start_ticks(me)}\n"):
        print(f"[gpusched] launch {launch_dir} was declared dead; not running it", file=sys.stderr, flush=True)
        return 0
    stopped = []

    def on_stop(sig: int, frame: object) -> None:  # the job gets the same signal from the group
        stopped.append(sig)

    for s in STOP_SIGNALS:
        signal.signal(s, on_stop)  # a handler (not SIG_IGN): the child gets default dispositions
    _die_with_parent(os.environ.pop("GPUSCHED_DIE_WITH_PARENT", ""))
    print(f"[gpusched] {time.strftime('%Y-%m-%d %H:%M:%S')} start {' '.join(cmd)}", flush=True)
    try:
        proc = subprocess.Popen(cmd)
    except OSError as e:
        print(f"[gpusched] cannot start {cmd[0]!r}: {e}", flush=True)
        rc = 127
    else:
        while True:
            try:
                rc = proc.wait()
                break
            except InterruptedError:
                continue
    print(f"[gpusched] {time.strftime('%Y-%m-%d %H:%M:%S')} exit {rc}", flush=True)
    final = os.path.join(launch_dir, "exit")
    os.replace(_write_atomic(final, f"{rc} {1 if stopped else 0}\n"), final)
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
