"""Sharing mechanisms, one module each; :data:`MECHANISMS` (a :class:`~gpusched_env.registry.Registry`)
maps a policy name to its factory."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpusched_env.device.mechanism import Mechanism
from gpusched_env.device.mechanisms.exclusive import Exclusive
from gpusched_env.device.mechanisms.mps import Mps
from gpusched_env.device.mechanisms.mps_priority import MpsPriority
from gpusched_env.device.mechanisms.tally import Tally, TallyConfig
from gpusched_env.device.mechanisms.tgs import Tgs, TgsConfig
from gpusched_env.device.mechanisms.time_slicing import TimeSlicing, TimeSlicingConfig
from gpusched_env.registry import Registry

MECHANISMS: Registry[Callable[..., Mechanism]] = Registry("mechanism")
MECHANISMS.add("exclusive", Exclusive)
MECHANISMS.add("time_slicing", TimeSlicing)
MECHANISMS.add("mps", Mps)
MECHANISMS.add("mps_priority", MpsPriority)
MECHANISMS.add("tgs", Tgs)
MECHANISMS.add("tally", Tally)
CONFIGS: dict[str, type] = {"time_slicing": TimeSlicingConfig, "tgs": TgsConfig, "tally": TallyConfig}


def make_mechanism(name: str, params: dict[str, Any] | None = None) -> Mechanism:
    """A fresh mechanism ``name`` with its config ``params`` (keys of its ``*Config`` dataclass)."""
    if name not in MECHANISMS:
        raise ValueError(f"mechanism must be one of {sorted(MECHANISMS)}, got {name!r}")
    if name in CONFIGS:
        return MECHANISMS[name](CONFIGS[name](**(params or {})))
    if params:
        raise ValueError(f"mechanism {name!r} takes no parameters, got {sorted(params)}")
    return MECHANISMS[name]()
