"""Job specs: a YAML file per job, validated into a frozen :class:`JobSpec`.

Keys (docs/DEPLOY.md): ``command`` (a list of strings, or one string with ``shell: true``), ``gpus``,
and optional ``name``, ``model``, ``expected_duration_s``, ``priority``, ``env``, ``workdir``,
``checkpoint_dir``, ``max_restarts``, ``shell``. Every error is one line naming the file and the key.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from gpusched_env.catalog import find_model

# choice: a job whose model the catalogue does not know is scheduled as this class (PAL's rule:
# "others -> A") with the catalogue's fallback iteration time of 1.0 s (gpusched_env.catalog.base_iter_s).
DEFAULT_MODEL = "unknown"
DEFAULT_PERF_CLASS = "A"
DEFAULT_MAX_RESTARTS = 3  # choice
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
RESERVED_ENV = ("GPUSCHED_JOB_ID", "GPUSCHED_CHECKPOINT_DIR", "GPUSCHED_RESTART_COUNT")
KEYS = ("command", "gpus", "name", "model", "expected_duration_s", "priority", "env", "workdir",
        "checkpoint_dir", "max_restarts", "shell")


class SpecError(ValueError):
    """A bad job spec; the message is one line naming the file and the key."""


@dataclass(frozen=True)
class JobSpec:
    """One user job. ``command`` is an argv tuple, or a 1-tuple shell string when ``shell``."""

    command: tuple[str, ...]
    gpus: int
    name: str = ""
    model: str = DEFAULT_MODEL
    expected_duration_s: float | None = None  # only clairvoyant policies (sjf, srtf) read it
    priority: int = 0
    env: tuple[tuple[str, str], ...] = field(default_factory=tuple)
    workdir: str | None = None
    checkpoint_dir: str | None = None
    max_restarts: int = DEFAULT_MAX_RESTARTS
    shell: bool = False

    @property
    def perf_class(self) -> str:
        m = find_model(self.model)
        return m.perf_class if m is not None else DEFAULT_PERF_CLASS

    def to_json(self) -> str:
        d = asdict(self)
        d["command"], d["env"], d["name"] = list(self.command), dict(self.env), self.name or None
        return json.dumps(d, sort_keys=True)

    @staticmethod
    def from_json(text: str) -> JobSpec:
        return parse_spec(json.loads(text), "<queue>")


def load_spec(path: str | Path) -> JobSpec:
    """Read and validate a YAML job spec (SpecError on any problem)."""
    import yaml

    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text())
    except FileNotFoundError:
        raise SpecError(f"{p}: no such file") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise SpecError(f"{p}:{where} not valid YAML ({getattr(e, 'problem', e)})") from None
    spec = parse_spec(data, str(p))
    if spec.workdir is not None and not Path(spec.workdir).is_absolute():  # relative to the spec file
        spec = replace(spec, workdir=str(p.resolve().parent / spec.workdir))
    return spec


def parse_spec(data: Any, where: str) -> JobSpec:
    """Validate a mapping of spec keys."""
    if not isinstance(data, dict):
        raise SpecError(f"{where}: a job spec is a mapping of keys {KEYS}, got {type(data).__name__}")
    unknown = sorted(set(data) - set(KEYS))
    if unknown:
        raise SpecError(f"{where}: unknown key {unknown[0]!r}; expected one of {KEYS}")

    def bad(key: str, what: str) -> SpecError:
        return SpecError(f"{where}: {key}: expected {what}, got {data.get(key)!r}")

    shell = data.get("shell", False)
    if not isinstance(shell, bool):
        raise bad("shell", "true or false")
    cmd = data.get("command")
    if cmd is None:
        raise SpecError(f"{where}: command: missing (a list of strings, or a string with shell: true)")
    if isinstance(cmd, str):
        if not shell:
            raise bad("command", "a list of strings (a single string needs shell: true)")
        if not cmd.strip():
            raise bad("command", "a non-empty string")
        command: tuple[str, ...] = (cmd,)
    elif isinstance(cmd, list) and cmd and all(isinstance(c, (str, int, float)) for c in cmd):
        command = tuple(str(c) for c in cmd)
        if shell:
            command = (" ".join(command),) if len(command) > 1 else command
    else:
        raise bad("command", "a non-empty list of strings")
    gpus = data.get("gpus")
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise bad("gpus", "an integer >= 1")
    exp = data.get("expected_duration_s")
    if exp is not None and (isinstance(exp, bool) or not isinstance(exp, (int, float)) or exp <= 0):
        raise bad("expected_duration_s", "a number of seconds > 0")
    prio = data.get("priority", 0)
    if isinstance(prio, bool) or not isinstance(prio, int):
        raise bad("priority", "an integer")
    mr = data.get("max_restarts", DEFAULT_MAX_RESTARTS)
    if isinstance(mr, bool) or not isinstance(mr, int) or mr < 0:
        raise bad("max_restarts", "an integer >= 0")
    return JobSpec(
        command=command, gpus=gpus, name=_str(data, "name", where) or "", model=_str(data, "model", where) or DEFAULT_MODEL,
        expected_duration_s=None if exp is None else float(exp), priority=prio, env=_env(data.get("env"), where),
        workdir=_str(data, "workdir", where), checkpoint_dir=_str(data, "checkpoint_dir", where),
        max_restarts=mr, shell=shell,
    )


def _str(data: dict[str, Any], key: str, where: str) -> str | None:
    v = data.get(key)
    if v is None:
        return None
    if not isinstance(v, str) or not v:
        raise SpecError(f"{where}: {key}: expected a non-empty string, got {v!r}")
    return v


def _env(env: Any, where: str) -> tuple[tuple[str, str], ...]:
    if env is None:
        return ()
    if not isinstance(env, dict):
        raise SpecError(f"{where}: env: expected a mapping NAME: value, got {env!r}")
    out = []
    for k, v in env.items():
        if not isinstance(k, str) or not ENV_NAME.match(k):
            raise SpecError(f"{where}: env: {k!r} is not a valid variable name ([A-Za-z_][A-Za-z0-9_]*)")
        if k in RESERVED_ENV:
            raise SpecError(f"{where}: env: {k} is set by the service and cannot be given")
        if isinstance(v, (dict, list)) or v is None:
            raise SpecError(f"{where}: env: {k}: expected a string or number, got {v!r}")
        out.append((k, str(v).lower() if isinstance(v, bool) else str(v)))
    return tuple(sorted(out))
