"""GPU and node power.

GPU power = idle_w + (busy_w − idle_w) × utilisation (per GPU type from power-zeus, see
:mod:`gpusched_env.catalog`). A node draws ``node_base_w`` (CPUs, memory, fans: fitted to EaCO's
exclusive-run table, :data:`gpusched_env.fitted.NODE_BASE_W`) while any of its GPUs holds a job;
an idle node may drop to ``sleep_w`` for the whole node (GPUs included) when ``low_power_idle``.
Energy is integrated exactly between events (power is constant between them).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpusched_env.fitted import NODE_BASE_W


@dataclass(frozen=True)
class PowerConfig:
    """``scenario.model.power``."""

    node_base_w: float = NODE_BASE_W  # fitted: EaCO exclusive runs minus modelled V100 power
    low_power_idle: bool = False  # idle nodes drop to sleep_w
    sleep_w: float = 60.0  # choice: suspend-to-RAM draw of a 2-socket GPU server (whole node)

    def __post_init__(self) -> None:
        if self.node_base_w < 0 or self.sleep_w < 0:
            raise ValueError("node_base_w and sleep_w must be >= 0")


def gpu_power_w(idle_w: float, busy_w: float, util: float) -> float:
    return idle_w + (busy_w - idle_w) * min(1.0, max(0.0, util))
