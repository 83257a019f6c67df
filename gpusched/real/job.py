"""A small helper for job scripts run by the gpusched service (optional; any program works).

The service's preemption protocol: the job receives its stop signal (``GPUSCHED_STOP_SIGNAL``,
SIGTERM by default), saves a checkpoint in ``GPUSCHED_CHECKPOINT_DIR`` and exits within the grace
period (else SIGKILL); its next launch sees ``GPUSCHED_RESTART_COUNT`` incremented and resumes::

    from gpusched.real import job

    state = job.load_checkpoint() or {"step": 0}
    while state["step"] < steps and not job.should_stop():
        train_one_step(); state["step"] += 1
        if state["step"] % 100 == 0:
            job.save_checkpoint(state)
    job.save_checkpoint(state)

Importing this module installs the stop-signal handler.
"""

from __future__ import annotations

import os
import signal
import tempfile
from pathlib import Path
from typing import Any

CHECKPOINT = "checkpoint.pt"
_stop = False


def _on_stop(sig: int, frame: object) -> None:
    global _stop
    _stop = True


def install() -> None:
    """Catch the service's stop signal (done on import; call again if something replaced it)."""
    name = os.environ.get("GPUSCHED_STOP_SIGNAL", "SIGTERM")
    signal.signal(getattr(signal, name, signal.SIGTERM), _on_stop)


def should_stop() -> bool:
    """True once the service asked the job to stop: save a checkpoint and exit."""
    return _stop


def restart_count() -> int:
    return int(os.environ.get("GPUSCHED_RESTART_COUNT", "0"))


def checkpoint_dir() -> Path:
    """``GPUSCHED_CHECKPOINT_DIR`` (``./checkpoints`` outside the service)."""
    d = Path(os.environ.get("GPUSCHED_CHECKPOINT_DIR", "checkpoints"))
    d.mkdir(parents=True, exist_ok=True)
    return d


def save_checkpoint(obj: Any, name: str = CHECKPOINT) -> Path:
    """``torch.save(obj)`` into the checkpoint folder atomically (a temporary file, then a rename):
    a job killed mid-save leaves the previous checkpoint intact."""
    import torch

    d = checkpoint_dir()
    fd, tmp = tempfile.mkstemp(dir=d, prefix=f".{name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, d / name)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return d / name


def load_checkpoint(name: str = CHECKPOINT) -> Any | None:
    """The last saved checkpoint, or None when there is none."""
    import torch

    p = checkpoint_dir() / name
    if not p.exists():
        return None
    return torch.load(p, weights_only=False)


install()
