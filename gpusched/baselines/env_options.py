"""The heuristics' placements offered as options of the Cluster env (injected into
:class:`gpusched_env.envs.options.OptionSet` by name: the env never imports a policy)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpusched.baselines.pal import make_pal, make_pm_first
from gpusched.baselines.placement import PackedPlacement, SpreadPlacement
from gpusched_env.placement import Placement


def exclusive_placements(pal: dict[str, Any]) -> Mapping[str, Placement]:
    """``pal``, ``pm_first``, ``packed`` and ``spread`` (``pal``: PAL's parameters for both PAL
    placements; PM-First takes its ``k1`` and ``outlier_sigma``)."""
    return {
        "pal": make_pal(**pal).placement,
        "pm_first": make_pm_first(**{k: v for k, v in pal.items() if k in ("k1", "outlier_sigma")}).placement,
        "packed": PackedPlacement(),
        "spread": SpreadPlacement(),
    }
