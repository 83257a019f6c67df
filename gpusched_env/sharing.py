"""Speed of jobs that share a GPU.

Time-slicing (jobs started with ``sm_share`` 1): a job's iteration time on a GPU holding k jobs is
multiplied by
- the Gavel pair slowdown (alone ÷ shared throughput, :data:`fitted.GAVEL_PAIRS`) when k = 2 and
  both models are Gavel job types measured on that GPU type;
- otherwise EaCO's measured co-location slowdown by count (3 % for 2, 7.8 % for 3, 19 % for 4 jobs;
  choice: the ends of EaCO's 3–7.8 % range for 2 and 3 jobs; beyond 4: +19 % per extra job), times
  max(1, Σ utilisation of the residents) — a saturated GPU time-slices (choice).
MPS (every resident started with ``sm_share`` < 1): a job with share s runs at min(1, s / u) of its
alone speed, u its alone utilisation (choice: linear in SMs up to its demand), and, if the shares on
the GPU sum to S > 1 (oversubscription), a further 1/S.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpusched_env.fitted import GAVEL_PAIRS


def _default_count_slowdown() -> list[float]:
    return [1.0, 1.03, 1.078, 1.19]


@dataclass(frozen=True)
class SharingConfig:
    """``scenario.model.sharing``."""

    use_gavel_pairs: bool = True  # use Gavel's measured pair throughputs for 2 jobs when known
    count_slowdown: list[float] = field(default_factory=_default_count_slowdown)  # EaCO slowdown for k jobs, index k-1
    saturate_by_util: bool = True  # also multiply by max(1, summed utilisation of the residents)


@dataclass(frozen=True)
class Resident:
    model: str
    util: float
    sm_share: float


def slowdown(cfg: SharingConfig, gpu_type: str, me: Resident, residents: list[Resident]) -> float:
    """Iteration-time multiplier for ``me`` on a GPU whose residents (including ``me``) are given."""
    k = len(residents)
    if all(r.sm_share < 1.0 for r in residents):
        total = sum(r.sm_share for r in residents)
        return max(1.0, me.util / me.sm_share) * max(1.0, total)
    if k == 1:
        return 1.0
    if k == 2 and cfg.use_gavel_pairs:
        other = residents[0] if residents[1] is me else residents[1]
        pair = GAVEL_PAIRS.get(gpu_type, {}).get(f"{me.model}|{other.model}")
        if pair is not None:
            return pair
    table = cfg.count_slowdown
    base = table[k - 1] if k <= len(table) else table[-1] + (k - len(table)) * (table[-1] - 1.0)
    if cfg.saturate_by_util:
        base *= max(1.0, sum(r.util for r in residents))
    return base


def gpu_utilisation(residents: list[Resident]) -> float:
    """Busy fraction of a GPU: sum of the residents' utilisations (capped by their shares) ≤ 1."""
    return min(1.0, sum(min(r.util, r.sm_share) for r in residents))
