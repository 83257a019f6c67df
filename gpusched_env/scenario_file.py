"""The one reader of scenario files, for every level.

A scenario is named (``conf/scenario/NAME.yaml``) or given as a path to a YAML file. Every level's
loader starts from :func:`read_scenario_file`, so a missing file, a YAML syntax error, a file that is
not a mapping or a scenario of the wrong level reads the same everywhere: one
:class:`~gpusched_env.config_util.ConfigError` naming the file (and the line, for bad YAML) and what
was expected.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from gpusched_env.config_util import CONF_DIR, ConfigError

SCENARIO_DIR = CONF_DIR / "scenario"


def known_scenarios() -> list[str]:
    """The names of the shipped scenario files."""
    return sorted(p.stem for p in SCENARIO_DIR.glob("*.yaml"))


def scenario_path(name_or_path: str) -> Path:
    """``conf/scenario/NAME.yaml`` for a name, else the path itself (a name ending in .yaml/.yml or
    holding a path separator is a path); a missing file is a ConfigError listing the known names."""
    if name_or_path.endswith((".yaml", ".yml")) or "/" in name_or_path:
        path = Path(name_or_path)
        if not path.is_file():
            raise ConfigError(f"scenario: no file {path}")
        return path
    path = SCENARIO_DIR / f"{name_or_path}.yaml"
    if not path.is_file():
        raise ConfigError(f"scenario {name_or_path!r}: no file {path}; known scenarios: {known_scenarios()}")
    return path


def read_scenario_file(name_or_path: str, level: str | None = None) -> dict[str, Any]:
    """The scenario file's mapping, ``name`` defaulting to the file's stem. With ``level``, the file
    must declare that level (``level:``; cluster scenarios may leave it out)."""
    path = scenario_path(name_or_path)
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"{path}{where}: not valid YAML ({problem})") from None
    raw = {} if raw is None else raw
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: a scenario file holds a mapping of keys, got {type(raw).__name__}")
    raw.setdefault("name", path.stem)
    if level is not None and str(raw.get("level", "cluster")) != level:
        raise ConfigError(f"{path}: scenario {raw['name']!r} is a {raw.get('level', 'cluster')}-level "
                          f"scenario; this needs one with level: {level}")
    return raw
