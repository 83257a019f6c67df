"""Time slicing, the driver's default between CUDA contexts (DEVICE.md).

Contexts take turns: the active one runs alone for a slice of 1024 µs (open-gpu-kernel-modules,
kernel_fifo_gv100.c); at the slice's end, or as soon as the active context has nothing queued, the
next context with queued work (round robin) takes over, after a context switch of ``switch_s``
(no published figure: choice). A kernel preempted at a slice's end keeps its progress. A context
with nothing queued yields the GPU only after ``yield_idle_s`` (choice: the host gaps between one
request's kernels, ~10-30 µs, do not hand the slice away; without this, eager batch-1 inference
would lose a whole slice per kernel, far worse than colocation-h100 measures).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpusched_env.device.gpus import DeviceGpu
from gpusched_env.device.mechanism import READY, RUN, BaseMechanism, ClientSpec, ClientView, Grant


@dataclass(frozen=True)
class TimeSlicingConfig:
    slice_s: float = 1.024e-3  # DEVICE.md: default time-slice group length on Volta and later
    switch_s: float = 25e-6  # choice: compute context save + restore (no published figure)
    yield_idle_s: float = 100e-6  # choice: idle time after which the active context yields its slice

    def __post_init__(self) -> None:
        if not self.slice_s > 0:
            raise ValueError(f"time_slicing slice_s must be in (0, inf), got {self.slice_s}")
        if not self.switch_s >= 0:
            raise ValueError(f"time_slicing switch_s must be in [0, inf), got {self.switch_s}")


class TimeSlicing(BaseMechanism):
    name = "time_slicing"

    def __init__(self, cfg: TimeSlicingConfig | None = None) -> None:
        self.cfg = cfg or TimeSlicingConfig()

    def reset(self, clients: Sequence[ClientSpec], gpu: DeviceGpu) -> None:
        super().reset(clients, gpu)
        self.active, self.slice_end, self.switched_until = 0, self.cfg.slice_s, 0.0

    def plan(self, t: float, clients: Sequence[ClientView]) -> tuple[list[Grant], float]:
        busy = [c.phase in (READY, RUN) for c in clients]
        others = [i for i in _round_robin(self.active, len(clients)) if busy[i]]
        since = clients[self.active].idle_since
        yielded = not busy[self.active] and since >= 0 and t - since >= self.cfg.yield_idle_s - 1e-15
        wake = float("inf")
        if others and not busy[self.active] and not yielded:
            wake = since + self.cfg.yield_idle_s
        if others and (yielded or t >= self.slice_end - 1e-15):
            self.active, self.slice_end = others[0], t + self.cfg.slice_s
            self.switched_until = t + self.cfg.switch_s
        elif not others and self.slice_end <= t:  # alone: its slice keeps renewing
            self.slice_end += self.cfg.slice_s * (1 + (t - self.slice_end) // self.cfg.slice_s)
        grants = [Grant(i == self.active) for i in range(len(clients))]
        return grants, min(wake, self.slice_end) if others else float("inf")

    def launch_delay(self, t: float, i: int, displaced: Sequence[int], clients: Sequence[ClientView]) -> float:
        return max(0.0, self.switched_until - t)


def _round_robin(active: int, n: int) -> list[int]:
    return [(active + k) % n for k in range(1, n)]
