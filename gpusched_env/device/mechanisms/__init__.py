"""Sharing mechanisms, one module each; :data:`MECHANISMS` maps a policy name to its factory."""

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

MECHANISMS: dict[str, Callable[..., Mechanism]] = {
    "exclusive": Exclusive,
    "time_slicing": TimeSlicing,
    "mps": Mps,
    "mps_priority": MpsPriority,
    "tgs": Tgs,
    "tally": Tally,
}
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
