"""The one layer through which every GPU-only command (MPS control, NVML queries) goes.

:class:`DryRunRunner` records ``(argv, env)`` of each command and each NVML call without executing
it (tests assert on those records; on a machine without NVIDIA GPUs the CPU stand-in uses it, so the
exact commands a GPU run would issue are logged in ``commands.jsonl``). :class:`ExecRunner` executes
them. Job processes are not GPU-only: both runners start them for real and record how.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Protocol


@dataclass(frozen=True)
class Call:
    """One recorded command. ``kind``: "run" (a command), "spawn" (a job process) or "nvml"."""

    kind: str
    argv: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    stdin: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "argv": list(self.argv), "env": self.env, "stdin": self.stdin}


class CommandRunner(Protocol):
    """Runs (or records) GPU-only commands and NVML calls; starts job processes."""

    dry_run: bool
    calls: list[Call]

    def run(self, argv: list[str], env: dict[str, str], stdin: str | None = None) -> str:
        """Run a command to completion with ``env`` added to the environment; return stdout."""
        ...

    def nvml(self, fn: str, *args: Any) -> Any:
        """Call ``pynvml.<fn>(*args)``; dry run: record and return None."""
        ...

    def spawn(
        self, argv: list[str], env: dict[str, str], cwd: Path, log: IO[bytes]
    ) -> subprocess.Popen[bytes]:
        """Start a job process in its own session (Ctrl-C reaches only the backend)."""
        ...


class _Recorder:
    def __init__(self, log_path: Path | None) -> None:
        self.calls: list[Call] = []
        self._log_path = log_path
        self._logged_nvml: set[tuple[str, ...]] = set()

    def _record(self, call: Call) -> None:
        self.calls.append(call)
        if call.kind == "nvml":  # sampled every tick: log each distinct call once
            if call.argv in self._logged_nvml:
                return
            self._logged_nvml.add(call.argv)
        if self._log_path is not None:
            with open(self._log_path, "a") as f:
                f.write(json.dumps(call.to_json()) + "\n")

    def spawn(
        self, argv: list[str], env: dict[str, str], cwd: Path, log: IO[bytes]
    ) -> subprocess.Popen[bytes]:
        self._record(Call("spawn", tuple(argv), dict(env)))
        return subprocess.Popen(
            argv, env={**os.environ, **env}, cwd=cwd, stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )


class DryRunRunner(_Recorder):
    """Records GPU-only commands and NVML calls instead of executing them."""

    dry_run = True

    def __init__(self, log_path: Path | None = None) -> None:
        super().__init__(log_path)

    def run(self, argv: list[str], env: dict[str, str], stdin: str | None = None) -> str:
        self._record(Call("run", tuple(argv), dict(env), stdin))
        return ""

    def nvml(self, fn: str, *args: Any) -> Any:
        self._record(Call("nvml", (fn, *map(str, args))))
        return None

    def commands(self, kind: str = "run") -> list[Call]:
        return [c for c in self.calls if c.kind == kind]


class ExecRunner(_Recorder):
    """Executes commands and NVML calls (a machine with NVIDIA GPUs); still records them."""

    dry_run = False

    def __init__(self, log_path: Path | None = None, timeout_s: float = 30.0) -> None:
        super().__init__(log_path)
        self.timeout_s = timeout_s
        self._pynvml: Any = None

    def run(self, argv: list[str], env: dict[str, str], stdin: str | None = None) -> str:
        self._record(Call("run", tuple(argv), dict(env), stdin))
        out = subprocess.run(
            argv, env={**os.environ, **env}, input=stdin, capture_output=True, text=True,
            timeout=self.timeout_s, check=False,
        )
        if out.returncode != 0:
            raise RuntimeError(f"command {' '.join(argv)} failed ({out.returncode}): {out.stderr.strip()}")
        return out.stdout

    def nvml(self, fn: str, *args: Any) -> Any:
        self._record(Call("nvml", (fn, *map(str, args))))
        if self._pynvml is None:
            import pynvml

            self._pynvml = pynvml
        return getattr(self._pynvml, fn)(*args)


def nvidia_problem() -> str | None:
    """Why job processes could not use an NVIDIA GPU here, or None: ``nvidia-smi -L`` must list a GPU
    and this Python's torch must be built with CUDA (checked without creating a CUDA context)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return "nvidia-smi is not on PATH"
    try:
        out = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"nvidia-smi -L failed: {e}"
    if out.returncode != 0 or "GPU" not in out.stdout:
        return f"nvidia-smi -L lists no GPU (exit {out.returncode}: {(out.stderr or out.stdout).strip()[:120]})"
    import torch

    if torch.version.cuda is None:
        return f"torch {torch.__version__} in {sys.executable} is built without CUDA"
    return None


def has_nvidia() -> bool:
    """True where job processes can use an NVIDIA GPU (:func:`nvidia_problem` finds nothing)."""
    return nvidia_problem() is None


def make_runner(mode: str, log_path: Path | None = None) -> DryRunRunner | ExecRunner:
    """``mode``: "auto" (execute where nvidia-smi works, else dry run), "dry_run" or "exec"."""
    if mode == "auto":
        mode = "exec" if has_nvidia() else "dry_run"
    if mode == "dry_run":
        return DryRunRunner(log_path)
    if mode == "exec":
        return ExecRunner(log_path)
    raise ValueError(f"real.commands must be auto, dry_run or exec; got {mode!r}")
