"""Build typed config dataclasses from plain mappings (Hydra/YAML), rejecting unknown keys."""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

CONF_DIR = Path(__file__).resolve().parent / "conf"
"""The Hydra configs and scenario files, shipped inside the package (wheel installs too)."""

T = TypeVar("T")


class ConfigError(ValueError):
    """A config key is unknown, missing or has a bad value; the message names the key."""


def int_list(text: str, flag: str) -> list[int]:
    """Comma-separated integers of a command-line flag (``"0,1,2"``); a ConfigError naming ``flag`` otherwise."""
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"{flag}: expected comma-separated integers, got {text!r}") from None


def from_dict(cls: type[T], data: Mapping[str, Any] | None, where: str) -> T:
    """Instantiate dataclass ``cls`` from ``data``; nested dataclass fields are built recursively.

    ``where`` is the dotted config path used in error messages (e.g. ``scenario.model.power``).
    """
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: expected a mapping, got {type(data).__name__} {data!r}")
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; expected some of {sorted(fields)}")
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for name, value in data.items():
        kwargs[name] = _convert(hints[name], value, f"{where}.{name}")
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{where}: {e}") from e


def override(obj: T, data: Mapping[str, Any] | None, where: str) -> T:
    """A copy of the dataclass instance ``obj`` with the keys of ``data`` replaced.

    A nested dataclass field given a mapping is overridden key by key (the keys it does not name keep
    ``obj``'s values); any other value is converted as :func:`from_dict` converts it. Unknown keys
    and bad values are ConfigErrors naming the dotted key under ``where``.
    """
    if data is None:
        return obj
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: expected a mapping, got {type(data).__name__} {data!r}")
    fields = {f.name for f in dataclasses.fields(obj)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - fields)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; expected some of {sorted(fields)}")
    hints = typing.get_type_hints(type(obj))
    changes: dict[str, Any] = {}
    for name, value in data.items():
        current = getattr(obj, name)
        if dataclasses.is_dataclass(current) and isinstance(value, Mapping):
            changes[name] = override(current, value, f"{where}.{name}")
        else:
            changes[name] = _convert(hints[name], value, f"{where}.{name}")
    try:
        return dataclasses.replace(obj, **changes)  # type: ignore[type-var]
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{where}: {e}") from e


def _convert(tp: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None:
            return None
        return _convert(args[0], value, where) if len(args) == 1 else value
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return from_dict(tp, value, where)
    if origin in (list, tuple) and isinstance(value, (list, tuple)):
        (arg, *_) = typing.get_args(tp) or (Any,)
        conv = [_convert(arg, v, f"{where}[{i}]") for i, v in enumerate(value)]
        return conv if origin is list else tuple(conv)
    if origin is dict and isinstance(value, Mapping):
        _, varg = typing.get_args(tp) or (Any, Any)
        return {k: _convert(varg, v, f"{where}.{k}") for k, v in value.items()}
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where}: expected a number, got {value!r}")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
        return value
    if tp is bool and not isinstance(value, bool):
        raise ConfigError(f"{where}: expected true/false, got {value!r}")
    if tp is str and not isinstance(value, str):
        raise ConfigError(f"{where}: expected a string, got {value!r}")
    return value
