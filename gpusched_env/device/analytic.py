"""The closed-form device model: today's co-location formulas, one outcome per tenant.

Time slicing (whole-GPU tenants): a tenant's iteration time on a GPU holding k tenants is multiplied by
- the Gavel pair slowdown (alone ÷ shared throughput, :data:`fitted.GAVEL_PAIRS`) when k = 2 and
  both models are Gavel job types measured on that GPU type;
- otherwise EaCO's measured co-location slowdown by count (3 % for 2, 7.8 % for 3, 19 % for 4 jobs;
  choice: the ends of EaCO's 3–7.8 % range for 2 and 3 jobs; beyond 4: +19 % per extra job), times
  max(1, Σ utilisation of the residents) — a saturated GPU time-slices (choice).
MPS (every tenant an MPS client): a tenant with SM share s runs at min(1, s / u) of its alone speed,
u its alone utilisation (choice: linear in SMs up to its demand), and, if the shares on the GPU sum to
S > 1 (oversubscription), a further 1/S. MPS priority is not modelled here (the kernel-level device
model is where it is).
GPU utilisation: the sum of the tenants' utilisations, each capped by its SM share, at most 1; a
tenant alone on a GPU it holds whole keeps its own utilisation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from gpusched_env.catalog import EACO_COLO_SLOWDOWN
from gpusched_env.device.seam import DeviceOutcome, Tenant, TenantOutcome
from gpusched_env.fitted import GAVEL_PAIRS


def _default_count_slowdown() -> list[float]:
    return list(EACO_COLO_SLOWDOWN)


@dataclass(frozen=True)
class SharingConfig:
    """``scenario.model.sharing``."""

    model: str = "analytic"  # analytic: these closed-form formulas; kernel: the kernel-level device model (device/kernel_device.py)
    use_gavel_pairs: bool = True  # use Gavel's measured pair throughputs for 2 jobs when known
    count_slowdown: list[float] = field(default_factory=_default_count_slowdown)  # EaCO slowdown for k jobs, index k-1
    saturate_by_util: bool = True  # also multiply by max(1, summed utilisation of the residents)

    def __post_init__(self) -> None:
        if self.model not in ("analytic", "kernel"):
            raise ValueError(f"sharing.model must be analytic or kernel, got {self.model!r}")


class AnalyticDevice:
    """:class:`~gpusched_env.device.seam.DeviceModel` from the formulas above (cached per GPU type
    and tenant set)."""

    def __init__(self, cfg: SharingConfig | None = None) -> None:
        self.cfg = cfg or SharingConfig()
        self._count = tuple(self.cfg.count_slowdown)
        self._cached = lru_cache(maxsize=4096)(self._compute)

    def share(self, gpu_type: str, tenants: Sequence[Tenant]) -> DeviceOutcome:
        return self._cached(gpu_type, tuple(tenants))

    def _compute(self, gpu_type: str, tenants: tuple[Tenant, ...]) -> DeviceOutcome:
        shares = [t.sharing.sm_share for t in tenants]
        if len(tenants) == 1 and not tenants[0].sharing.is_mps:
            return DeviceOutcome((TenantOutcome(1.0),), tenants[0].util)
        util = min(1.0, sum(min(t.util, s) for t, s in zip(tenants, shares, strict=True)))
        if all(t.sharing.is_mps for t in tenants):
            total = max(1.0, sum(shares))
            out = tuple(TenantOutcome(max(1.0, t.util / s) * total) for t, s in zip(tenants, shares, strict=True))
        else:
            out = tuple(TenantOutcome(self._time_slice(gpu_type, i, tenants)) for i in range(len(tenants)))
        return DeviceOutcome(out, util)

    def _time_slice(self, gpu_type: str, i: int, tenants: Sequence[Tenant]) -> float:
        k = len(tenants)
        if k == 2 and self.cfg.use_gavel_pairs:
            pair = GAVEL_PAIRS.get(gpu_type, {}).get(f"{tenants[i].model}|{tenants[1 - i].model}")
            if pair is not None:
                return pair
        table = self._count
        base = table[k - 1] if k <= len(table) else table[-1] + (k - len(table)) * (table[-1] - 1.0)
        if self.cfg.saturate_by_util:
            base *= max(1.0, sum(t.util for t in tenants))
        return base
