"""The device-level seam: how tenants sharing one GPU fare, all at once.

A :class:`DeviceModel` takes every tenant of one GPU and returns a :class:`DeviceOutcome` with one
:class:`TenantOutcome` per tenant (same order), so asymmetric effects (priority, latency) can be
expressed. The cluster model asks it whenever a GPU's tenants change.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from gpusched_env.types import Sharing


@dataclass(frozen=True, slots=True)
class Tenant:
    """One client of a GPU: its model (catalogue name), its utilisation of a GPU it has alone, in
    [0, 1], and how it shares the GPU."""

    model: str
    util: float
    sharing: Sharing


@dataclass(frozen=True, slots=True)
class TenantOutcome:
    """What sharing does to one tenant: ``slowdown`` multiplies its time per iteration (or per
    request) alone; ``latency_s`` is its mean request latency where it is an inference service."""

    slowdown: float
    latency_s: float | None = None


@dataclass(frozen=True, slots=True)
class DeviceOutcome:
    """Every tenant's outcome (same order as the tenants) and the GPU's busy fraction in [0, 1]."""

    tenants: tuple[TenantOutcome, ...]
    util: float


class DeviceModel(Protocol):
    """How a GPU of ``gpu_type`` is shared by ``tenants`` (at least one)."""

    def share(self, gpu_type: str, tenants: Sequence[Tenant]) -> DeviceOutcome: ...
