"""TGS (Wu et al., NSDI'23), as ported in Tally's benchmark (DEVICE.md): MPS-like concurrency with a
TCP-like throttle on the best-effort client's thread-block rate.

HP's block rate is published per 5 s window (its max over the last 5 windows is the reference). BE
has a block budget per 50 ms window; once spent, BE sleeps in 10 ms ticks until the next window. The
budget is adjusted at every BE window: slow start ×1.5 while HP's rate is within 3 % of its max, else
÷1.5 and congestion avoidance; there +max(0.025 % of the budget ceiling, 1000) or −8 %; an HP drop
≥ 9 % divides it by 10 and returns to slow start; 20 windows with ≥ 12 % drop reset it.
A kernel's blocks: SM demand × SMs × duration / block duration (one block per SM at a time; choice).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpusched_env.device.gpus import DeviceGpu
from gpusched_env.device.mechanism import READY, BaseMechanism, ClientSpec, ClientView, Grant


@dataclass(frozen=True)
class TgsConfig:
    hp_window_s: float = 5.0  # DEVICE.md: HP publishes its rate per 5 s window
    hp_max_windows: int = 5  # DEVICE.md: max over 5 windows
    be_window_s: float = 0.05  # DEVICE.md: BE block budget per 50 ms window
    tick_s: float = 0.01  # DEVICE.md: BE sleeps in 10 ms ticks
    initial_budget: float = 1000.0  # choice: one additive step (DEVICE.md's +1000 blocks)
    ceiling: float = 1e9  # choice: budget ceiling (the "max" of the additive step)

    def __post_init__(self) -> None:
        for k in ("hp_window_s", "be_window_s", "tick_s", "initial_budget", "ceiling"):
            if not getattr(self, k) > 0:
                raise ValueError(f"tgs {k} must be in (0, inf), got {getattr(self, k)}")


class Tgs(BaseMechanism):
    name = "tgs"

    def __init__(self, cfg: TgsConfig | None = None) -> None:
        self.cfg = cfg or TgsConfig()

    def reset(self, clients: Sequence[ClientSpec], gpu: DeviceGpu) -> None:
        super().reset(clients, gpu)
        self.budget, self.used, self.slow_start, self.bad = self.cfg.initial_budget, 0.0, True, 0
        self.hp_blocks, self.hp_rates = 0.0, [0.0]
        self.hp_next, self.be_next = self.cfg.hp_window_s, self.cfg.be_window_s
        self.prev_rate = 0.0
        self.be = [c.role == "be" for c in clients]
        self.held = [Grant(False, c.sm_cap) for c in clients]  # a BE client while its budget is spent

    def on_launch(self, t: float, i: int, clients: Sequence[ClientView]) -> None:
        c = clients[i]
        k = c.idx
        blocks = c.sm[k] * self.gpu.sms * (c.dur[k] / c.block[k])
        if c.spec.role == "hp":
            self.hp_blocks += blocks
        else:
            self.used += blocks

    def plan(self, t: float, clients: Sequence[ClientView]) -> tuple[list[Grant], float]:
        self._windows(t)
        over = self.used >= self.budget
        grants = list(self.grants)
        if over:
            for i, c in enumerate(clients):
                if self.be[i] and c.phase == READY and not c.started:
                    grants[i] = self.held[i]
        wake = self.hp_next if self.hp_next < self.be_next else self.be_next  # min(be window, hp window)
        if over:  # sleeping BE looks again at the next 10 ms tick
            tick = t + self.cfg.tick_s
            if tick < wake:
                wake = tick
        return grants, wake

    def _windows(self, t: float) -> None:
        while t >= self.hp_next - 1e-12:
            self.hp_rates = (self.hp_rates + [self.hp_blocks / self.cfg.hp_window_s])[-self.cfg.hp_max_windows:]
            self.hp_blocks, self.hp_next = 0.0, self.hp_next + self.cfg.hp_window_s
        while t >= self.be_next - 1e-12:
            self._control()
            self.used, self.be_next = 0.0, self.be_next + self.cfg.be_window_s

    def _control(self) -> None:
        rate, best = self.hp_rates[-1], max(self.hp_rates)
        ok = best <= 0 or rate >= 0.97 * best
        drop = 0.0 if best <= 0 else 1.0 - rate / best
        if drop >= 0.09 and rate < self.prev_rate:
            self.budget, self.slow_start = max(1.0, self.budget / 10), True
        elif self.slow_start:
            self.budget, self.slow_start = (self.budget * 1.5, True) if ok else (self.budget / 1.5, False)
        else:
            self.budget = self.budget + max(0.00025 * self.cfg.ceiling, 1000.0) if ok else self.budget * 0.92
        self.bad = self.bad + 1 if drop >= 0.12 else 0
        if self.bad >= 20:
            self.budget, self.slow_start, self.bad = self.cfg.initial_budget, True, 0
        self.budget = min(self.budget, self.cfg.ceiling)
        self.prev_rate = rate
