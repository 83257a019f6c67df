"""Heuristic scheduling policies and their name -> factory registry.

``get_policy(name, **params)`` builds a policy (:class:`gpusched_env.policy.Policy`). Names are fixed
by docs/NAMES.md. Unknown names and unknown parameters raise :class:`ValueError` naming them.
Policies that draw random numbers (``random_sticky``, ``random_nonsticky``) need
``rng=numpy.random.Generator`` from the caller (a child of the run's ``SeedSequence``).

Each name's one-line semantics and implementing module are its :data:`POLICIES` entry
(``python -m gpusched.bench.doc_tables`` prints them as README's table).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable

import numpy as np

from gpusched.baselines.eaco import EaCO
from gpusched.baselines.gandiva import make_fifo_packed, make_gandiva
from gpusched.baselines.ordering import (
    AgedMlfqOrder,
    FifoOrder,
    LasOrder,
    LeasedOrder,
    OrderKey,
    SjfOrder,
    SrtfOrder,
    TiresiasOrder,
)
from gpusched.baselines.pal import make_pal, make_pm_first
from gpusched.baselines.placement import PackedPlacement, RandomPlacement
from gpusched.baselines.scheduler import QueueScheduler
from gpusched_env.policy import Policy
from gpusched_env.registry import Registry

PAL_ROUND_S = 360.0
PREEMPTIVE_ROUND_S = 360.0


def fifo(head_of_line: bool = True) -> QueueScheduler:
    return QueueScheduler("fifo", FifoOrder(), PackedPlacement(), head_of_line=head_of_line)


def sjf(head_of_line: bool = True) -> QueueScheduler:
    return QueueScheduler("sjf", SjfOrder(), PackedPlacement(), head_of_line=head_of_line)


def _preemptive(name: str, order: OrderKey, round_s: float, head_of_line: bool, events: bool) -> QueueScheduler:
    """A preemptive, sticky, round-based queue scheduler with packed placement."""
    return QueueScheduler(
        name, order, PackedPlacement(), sticky=True, preemptive=True, round_s=round_s,
        head_of_line=head_of_line, events=events,
    )


def srtf(
    round_s: float = PREEMPTIVE_ROUND_S, head_of_line: bool = True, events: bool = True
) -> QueueScheduler:
    return _preemptive("srtf", SrtfOrder(), round_s, head_of_line, events)


def las(
    round_s: float = PREEMPTIVE_ROUND_S, head_of_line: bool = True, events: bool = True, lease_rounds: float = 0.0
) -> QueueScheduler:
    """``lease_rounds`` > 0: a started job keeps its GPUs for that many round lengths (:class:`LeasedOrder`);
    0 (default) is plain LAS."""
    if not (math.isfinite(lease_rounds) and lease_rounds >= 0):
        raise ValueError(f"las.lease_rounds must be a number >= 0, got {lease_rounds}")
    order: OrderKey = LasOrder() if lease_rounds == 0 else LeasedOrder(LasOrder(), lease_rounds * round_s)
    return _preemptive("las", order, round_s, head_of_line, events)


def tiresias(
    round_s: float = PREEMPTIVE_ROUND_S,
    threshold_gpu_s: float = 3600.0,
    head_of_line: bool = True,
    events: bool = True,
) -> QueueScheduler:
    return _preemptive("tiresias", TiresiasOrder(threshold_gpu_s), round_s, head_of_line, events)


def mlfq_aged(
    round_s: float = PREEMPTIVE_ROUND_S,
    threshold_gpu_s: float = 3600.0,
    factor: float = 4.0,
    aging: float = 0.1,
    head_of_line: bool = True,
    events: bool = True,
) -> QueueScheduler:
    """Tiresias's discretised LAS with more queues and aged LAS inside each. Defaults are choices made
    on synthetic_philly_dr's training variants only (docs/AGENTS.md, run F): a teacher for the agents."""
    return _preemptive("mlfq_aged", AgedMlfqOrder(threshold_gpu_s, factor, aging), round_s, head_of_line, events)


def _pal_study(name: str, placement: object, sticky: bool, round_s: float, events: bool) -> QueueScheduler:
    return QueueScheduler(
        name,
        FifoOrder(),
        placement,  # type: ignore[arg-type]
        sticky=sticky,
        preemptive=True,
        round_s=round_s,
        head_of_line=True,
        events=events,
    )


def packed_sticky(round_s: float = PAL_ROUND_S, events: bool = False) -> QueueScheduler:
    return _pal_study("packed_sticky", PackedPlacement(), True, round_s, events)


def packed_nonsticky(round_s: float = PAL_ROUND_S, events: bool = False) -> QueueScheduler:
    return _pal_study("packed_nonsticky", PackedPlacement(), False, round_s, events)


def _need_rng(name: str, rng: np.random.Generator | None) -> np.random.Generator:
    if not isinstance(rng, np.random.Generator):
        raise ValueError(f"policy {name!r} needs rng=numpy.random.Generator (derive it from a SeedSequence)")
    return rng


def random_sticky(
    rng: np.random.Generator | None = None, round_s: float = PAL_ROUND_S, events: bool = False
) -> QueueScheduler:
    return _pal_study(
        "random_sticky", RandomPlacement(_need_rng("random_sticky", rng)), True, round_s, events
    )


def random_nonsticky(
    rng: np.random.Generator | None = None, round_s: float = PAL_ROUND_S, events: bool = False
) -> QueueScheduler:
    return _pal_study(
        "random_nonsticky", RandomPlacement(_need_rng("random_nonsticky", rng)), False, round_s, events
    )


POLICIES: Registry[Callable[..., Policy]] = Registry("policy", "policies")
_Q = "gpusched.baselines.scheduler"
POLICIES.add("fifo", fifo, "event-driven FIFO, packed exclusive placement, head-of-line", _Q)
POLICIES.add("sjf", sjf, "event-driven shortest-job-first (oracle total work), packed", _Q)
POLICIES.add("srtf", srtf, "rounds of 360 s, shortest remaining work (oracle), preemptive, sticky", _Q)
POLICIES.add("las", las, "rounds of 360 s, least attained GPU-service, preemptive, sticky", _Q)
POLICIES.add("tiresias", tiresias, "rounds of 360 s, two-queue discretised LAS (3600 GPU-s), sticky", _Q)
POLICIES.add("mlfq_aged", mlfq_aged, "rounds of 360 s, queues at 3600 x 4^k GPU-s, LAS aged 0.1 GPU-s/GPU/s inside, sticky", _Q)
POLICIES.add("packed_sticky", packed_sticky, "PAL study: FIFO prefix, 360 s rounds, packed, running jobs stay", _Q)
POLICIES.add("packed_nonsticky", packed_nonsticky, "PAL study: FIFO prefix, 360 s rounds, packed, all jobs re-placed", _Q)
POLICIES.add("random_sticky", random_sticky, "PAL study: as packed_sticky with uniformly random GPUs", _Q)
POLICIES.add("random_nonsticky", random_nonsticky, "PAL study: as packed_nonsticky with uniformly random GPUs", _Q)
POLICIES.add("pm_first", make_pm_first, "PAL study: PAL's round with PM-First placement on clustered factors")
POLICIES.add("pal", make_pal, "PAL: locality x variability placement")
POLICIES.add("gandiva", make_gandiva, "FIFO; when full, time-slice onto the least loaded GPUs")
POLICIES.add("fifo_packed", make_fifo_packed, "FIFO; when full, pack onto the most utilised GPUs that fit (EaCO)")
POLICIES.add("eaco", EaCO, "energy-aware co-location with deadline checks and undo")

POLICY_NAMES: tuple[str, ...] = tuple(POLICIES)  # the shipped policies (plug-ins may add more)


def policy_params(name: str) -> dict[str, object]:
    """The parameters a policy accepts and their defaults (``inspect.Parameter.empty`` if none)."""
    factory = _lookup(name)
    return {p.name: p.default for p in inspect.signature(factory).parameters.values()}


def _lookup(name: str) -> Callable[..., Policy]:
    return POLICIES.lookup(name)


_HEAVY_IMPORTS: dict[str, tuple[str, ...]] = {
    "pal": ("sklearn.cluster", "sklearn.metrics"),
    "pm_first": ("sklearn.cluster", "sklearn.metrics"),
}


def prepare_policies(names: list[str]) -> None:
    """Import the (slow) libraries the named policies load lazily, e.g. scikit-learn for PAL's
    clustering. A bench calls this before forking its worker processes so that they inherit the
    modules instead of each importing them again. Unknown names are ignored here."""
    import importlib

    for name in names:
        for mod in _HEAVY_IMPORTS.get(name, ()):
            importlib.import_module(mod)


def get_policy(name: str, **params: object) -> Policy:
    """Build the policy ``name`` with ``params`` (see :func:`policy_params`)."""
    factory = _lookup(name)
    known = policy_params(name)
    for p in params:
        if p not in known:
            raise ValueError(
                f"unknown parameter {p!r} for policy {name!r}; accepted: {', '.join(known) or '(none)'}"
            )
    return factory(**params)


__all__ = ["POLICIES", "POLICY_NAMES", "get_policy", "policy_params", "prepare_policies"]
