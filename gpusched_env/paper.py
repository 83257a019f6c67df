"""Published claims a scenario reproduces, and how each one's simulated counterpart is computed.

A leaf module (it imports nothing from gpusched_env), so every level's scenario can use it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

KINDS = ("improvement", "change", "value")
AGGREGATES = ("geomean", "mean", "min", "max")


@dataclass(frozen=True)
class PaperClaim:
    """``scenario.paper``: a published figure and how to compute its simulated counterpart.

    ``kind``: ``improvement`` = 1 − metric(policy)/metric(baseline); ``change`` =
    metric(policy)/metric(baseline) − 1; ``value`` = metric(policy) itself (no baseline; for
    absolute claims such as a miss rate). Per workload, then combined by ``aggregate``: ``geomean``
    (of the ratios; for ``value``, of the values), ``mean``, ``min`` or ``max``; ``workloads``
    restricts the claim to the named workloads (default: every workload the run has); ``bound``
    marks a published bound (``upper``: the result is at most ``value``; ``lower``: at least).
    ``value: null`` lists a figure the paper does not publish next to the ones it does (e.g. the
    middle of a sweep whose ends are published): its row shows the simulated value and no gap.
    """

    def meets(self, sim: float) -> bool | None:
        """Whether ``sim`` keeps a published bound (None for a plain value)."""
        if not self.bound or self.value is None:
            return None
        return sim <= self.value + 1e-12 if self.bound == "upper" else sim >= self.value - 1e-12

    claim: str  # the published statement
    value: float | None  # the published figure; null = not published (the table shows the simulated value only)
    metric: str = "avg_jct_s"  # metric compared
    policy: str = ""  # the paper's policy
    baseline: str = ""  # what it is compared against (unused for kind value)
    kind: str = "improvement"  # improvement (1 - ratio), change (ratio - 1) or value (the metric itself)
    aggregate: str = "geomean"  # geomean, mean, min or max over workloads
    source: str = ""  # where the figure is published
    workloads: list[str] = field(default_factory=list)  # the workloads the claim is about (empty = all)
    bound: str = ""  # "": the figure is a value; "upper" / "lower": the paper bounds the result (sim <= / >= value)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"paper claim kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if self.aggregate not in AGGREGATES:
            raise ValueError(f"paper claim aggregate must be one of {', '.join(AGGREGATES)}, got {self.aggregate!r}")
        if self.bound not in ("", "upper", "lower"):
            raise ValueError(f"paper claim bound must be empty, upper or lower, got {self.bound!r}")
        if self.bound and self.value is None:
            raise ValueError(f"paper claim {self.claim!r}: a bound needs a value")
        if self.kind != "value" and not self.baseline:
            raise ValueError(f"paper claim {self.claim!r}: kind {self.kind} needs a baseline")

    def sim_value(self, block: Mapping[str, Any]) -> float | None:
        """The simulated counterpart from a results block (policy -> metrics / per_workload), or
        None when the run lacks the policy, the baseline, a workload or the metric."""
        if self.policy not in block or (self.kind != "value" and self.baseline not in block):
            return None
        try:
            mine = _per_workload(block[self.policy], self.workloads)
            if self.kind == "value":
                return claim_from_ratios("value", self.aggregate, [m[self.metric] for m in mine])
            base = _per_workload(block[self.baseline], self.workloads)
            ratios = [m[self.metric] / b[self.metric] for m, b in zip(mine, base, strict=True)]
        except (KeyError, ValueError, ZeroDivisionError):
            return None
        return claim_from_ratios(self.kind, self.aggregate, ratios)


def claim_from_ratios(kind: str, aggregate: str, ratios: list[float]) -> float:
    """A claim's value from its per-workload ratios (``value``: per-workload values): combined by
    ``aggregate``, then 1 - r (improvement), r - 1 (change) or r (value)."""
    r = _combine(np.asarray(ratios, dtype=float), aggregate)
    return 1.0 - r if kind == "improvement" else r if kind == "value" else r - 1.0


def _per_workload(entry: Mapping[str, Any], names: list[str]) -> list[Mapping[str, float]]:
    groups = entry.get("per_workload")
    if not groups:
        if names:
            raise KeyError("per_workload")
        return [entry["metrics"]]
    if not names:
        return [g["metrics"] for g in groups]
    by_name = {g["workload"]: g["metrics"] for g in groups}
    return [by_name[n] for n in names]


def _combine(x: np.ndarray, aggregate: str) -> float:
    if aggregate == "geomean":
        return float(np.exp(np.log(x).mean()))
    if aggregate == "min":
        return float(x.min())
    return float(x.max()) if aggregate == "max" else float(x.mean())


def mark_subsets(paper: list[dict[str, Any]], policies: dict[str, Any], n_workloads: int) -> list[dict[str, Any]]:
    """Claims about every workload (no ``workloads`` list) whose simulated value comes from a run of
    fewer of them get ``sim_workloads: "K of N"`` and no ``meets_bound``. The published figure is
    defined on all N workloads, so the sim value is kept (what these K workloads give) but is not
    compared with it: the table labels the row as a subset and prints no gap."""
    out = []
    for c in paper:
        c = dict(c)
        entry = policies.get(str(c.get("policy")), {})
        k = len(entry.get("per_workload", [])) or 1
        if not c.get("workloads") and c.get("sim_value") is not None and k < n_workloads:
            c["sim_workloads"] = f"{k} of {n_workloads}"
            c["meets_bound"] = None
        out.append(c)
    return out
