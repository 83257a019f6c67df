"""One name per GPU sharing mechanism, for every level and backend (docs/NAMES.md).

``exclusive``, ``time_slicing``, ``mps`` and ``mps_priority`` name the mechanisms everywhere: the
cluster level's :class:`~gpusched_env.types.Sharing` kinds, the device level's mechanisms and pair
policies, ``gpusched-real pairs`` and the configs. ``mps_beNN`` (1 <= NN <= 99) is MPS with the
best-effort client capped at NN % of the SMs (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=NN).

The names used before are still accepted where a user types them (a config or a command line) and
give one line on stderr naming the new one (:func:`current_name`). The measured H100 CSV
(data/calibration/colocation-h100) keeps its own names; :mod:`gpusched_env.device.measured`
translates them where it reads the file.
"""

from __future__ import annotations

import re
import sys

EXCLUSIVE, TIME_SLICING, MPS, MPS_PRIORITY = "exclusive", "time_slicing", "mps", "mps_priority"
SHARING_MECHANISMS: tuple[str, ...] = (EXCLUSIVE, TIME_SLICING, MPS, MPS_PRIORITY)
"""The four mechanisms a GPU offers (fixed names, docs/NAMES.md)."""

OLD_NAMES: dict[str, str] = {
    "time_slice": TIME_SLICING,  # Sharing.kind before
    "timeslice": TIME_SLICING,  # gpusched-real pairs and the colocation-h100 CSV before
    "priority": MPS_PRIORITY,  # Sharing.kind before
    "mps_prio": MPS_PRIORITY,  # gpusched-real pairs and the colocation-h100 CSV before
}
"""Old name -> its current name."""

BE_CAPPED = re.compile(r"mps_be([1-9][0-9]?)")
"""``mps_beNN``: MPS with the best-effort client capped at NN % of the SMs (group 1 = NN)."""

_told: set[tuple[str, str]] = set()


def current_name(name: str, where: str) -> str:
    """``name``, or its current spelling if it is an old one; an old name prints (once per ``where``)
    ``<where>: '<old>' is an old name; use '<new>'`` on stderr. Unknown names pass unchanged (the
    caller checks them against what it allows)."""
    new = OLD_NAMES.get(name)
    if new is None:
        return name
    if (where, name) not in _told:
        _told.add((where, name))
        print(f"{where}: {name!r} is an old name; use {new!r}", file=sys.stderr)
    return new


def current_names(names: list[str], where: str) -> list[str]:
    """:func:`current_name` of each."""
    return [current_name(n, where) for n in names]
