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
from gpusched_env.device.mechanism import READY, BaseMechanism, ClientSpec, ClientView, Grant


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


INF = float("inf")
_RUN, _HOLD = Grant(True), Grant(False)  # the active context's grant, the others'


class TimeSlicing(BaseMechanism):
    name = "time_slicing"

    def __init__(self, cfg: TimeSlicingConfig | None = None) -> None:
        self.cfg = cfg or TimeSlicingConfig()

    def reset(self, clients: Sequence[ClientSpec], gpu: DeviceGpu) -> None:
        super().reset(clients, gpu)
        self.active, self.slice_end, self.switched_until = 0, self.cfg.slice_s, 0.0

    def plan(self, t: float, clients: Sequence[ClientView]) -> tuple[list[Grant], float]:
        n, active, cfg = len(clients), self.active, self.cfg
        nxt = -1  # the next context with queued work, round robin after the active one
        for k in range(1, n):
            j = (active + k) % n
            if clients[j].phase >= READY:  # READY or RUN
                nxt = j
                break
        mine = clients[active]
        busy = mine.phase >= READY
        if nxt < 0:  # nobody else waits: the active context keeps the GPU
            if self.slice_end <= t:  # alone: its slice keeps renewing
                self.slice_end += cfg.slice_s * (1 + (t - self.slice_end) // cfg.slice_s)
            grants = [_HOLD] * n
            grants[active] = _RUN
            return grants, INF
        since = mine.idle_since
        yielded = not busy and since >= 0 and t - since >= cfg.yield_idle_s - 1e-15
        wake = since + cfg.yield_idle_s if not busy and not yielded else INF
        if yielded or t >= self.slice_end - 1e-15:
            self.active, self.slice_end = active, end = nxt, t + cfg.slice_s
            self.switched_until = t + cfg.switch_s
        else:
            end = self.slice_end
        grants = [_HOLD] * n
        grants[active] = _RUN
        return grants, end if end < wake else wake  # min(wake, slice end)

    def launch_delay(self, t: float, i: int, displaced: Sequence[int], clients: Sequence[ClientView]) -> float:
        d = self.switched_until - t
        return d if d > 0.0 else 0.0  # max(0.0, d)
