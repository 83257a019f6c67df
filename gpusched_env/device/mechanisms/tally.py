"""Tally (Zhao et al., ASPLOS'25; CALIBRATION.md, DEVICE.md): priority-aware kernel scheduling.

HP kernels launch unmodified whenever HP has work and take SMs first. BE launches at most one kernel
at a time (one stream), and only once every HP client has been idle for ``idle_s`` (0.1 ms). BE
kernels run transformed and an arriving HP kernel waits for the unit under way to end: the slice
(``l_max_s`` of work, or one block where a block is longer) when sliced, the block under way as a
persistent thread block (its workers check the retreat flag before each block). The transform is
chosen per kernel online, the faster of slicing (one extra launch of ``slice_launch_s`` per slice)
and persistent thread blocks (``ptb_overhead`` slower). After
``unsliced_after_s`` (100 ms) of HP idleness BE kernels run unmodified: they cannot be preempted, so
HP waits for their running block to end and shares the GPU with it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpusched_env.device.gpus import DeviceGpu
from gpusched_env.device.mechanism import (
    READY,
    RUN,
    BaseMechanism,
    ClientSpec,
    ClientView,
    Grant,
    remaining_block,
)


@dataclass(frozen=True)
class TallyConfig:
    l_max_s: float = 31.6e-6  # CALIBRATION.md: L_max 0.0316 ms in Tally's benchmark (0.1 ms default)
    idle_s: float = 0.1e-3  # CALIBRATION.md: BE only after HP idle >= 0.1 ms
    unsliced_after_s: float = 0.1  # CALIBRATION.md: unsliced after 100 ms of HP idleness
    slice_launch_s: float = 4e-6  # choice: one extra kernel launch per slice (CUDA launch cost, a few µs)
    ptb_overhead: float = 0.05  # choice: slowdown of a persistent-thread-block kernel (retreat-flag polling)

    def __post_init__(self) -> None:
        for k in ("l_max_s", "idle_s", "unsliced_after_s"):
            if not getattr(self, k) > 0:
                raise ValueError(f"tally {k} must be in (0, inf), got {getattr(self, k)}")
        for k in ("slice_launch_s", "ptb_overhead"):
            if not 0.0 <= getattr(self, k) < 10.0:
                raise ValueError(f"tally {k} must be in [0, 10), got {getattr(self, k)}")

    def slice_unit(self, block: float) -> float:
        """The work of one slice: l_max_s, or one block if longer."""
        return block if block > self.l_max_s else self.l_max_s

    def ptb(self, block: float) -> bool:
        """PTB is the faster transform (the online choice; a tie goes to PTB)."""
        return self.ptb_overhead <= self.slice_launch_s / self.slice_unit(block)

    def unit(self, block: float) -> float:
        """The preemption unit of a transformed kernel: under PTB one block (its workers check the
        retreat flag before each original block: tally-project/tally priority.cpp, PTB preemption
        latency = a batch of blocks' time), when sliced the slice under way."""
        return block if self.ptb(block) else self.slice_unit(block)

    def slow(self, block: float) -> float:
        """Speed of a transformed kernel (1 = unmodified): the faster of slicing and PTB (online choice)."""
        return 1.0 / (1.0 + min(self.slice_launch_s / self.slice_unit(block), self.ptb_overhead))


class Tally(BaseMechanism):
    name = "tally"

    def __init__(self, cfg: TallyConfig | None = None) -> None:
        self.cfg = cfg or TallyConfig()

    def reset(self, clients: Sequence[ClientSpec], gpu: DeviceGpu) -> None:
        super().reset(clients, gpu)
        self.unsliced: dict[int, tuple[float, int]] = {}  # client -> (sequence start, kernel) launched unmodified
        self.hp = [i for i, c in enumerate(clients) if c.role == "hp"]
        # the grants a client can get: HP always runs first; BE by (may run, speed), built here once
        self.hp_grant = {i: Grant(True, c.sm_cap, 0) for i, c in enumerate(clients)}
        self.is_hp = [c.role == "hp" for c in clients]
        # a BE client's grants (held, running) per kernel: transformed at the kernel's speed, or unmodified
        by_slow: dict[tuple[int, float], tuple[Grant, Grant]] = {}

        def pair(i: int, slow: float) -> tuple[Grant, Grant]:
            g = by_slow.get((i, slow))
            if g is None:
                cap = clients[i].sm_cap
                g = by_slow[i, slow] = (Grant(False, cap, 1, slow), Grant(True, cap, 1, slow))
            return g

        self.sliced = [[] if c.role == "hp" else [pair(i, self.cfg.slow(b)) for b in c.seq.block_s.tolist()]
                       for i, c in enumerate(clients)]
        self.plain = [pair(i, 1.0) for i in range(len(clients))]

    def _is_unsliced(self, i: int, c: ClientView) -> bool:
        return self.unsliced.get(i) == (c.seq_start, c.idx)

    def plan(self, t: float, clients: Sequence[ClientView]) -> tuple[list[Grant], float]:
        hp_busy, idle_from = False, 0.0
        for k, i in enumerate(self.hp):  # HP busy, and when the last HP client went idle (max idle_since)
            c = clients[i]
            hp_busy = hp_busy or c.phase >= READY  # READY or RUN
            if k == 0 or c.idle_since > idle_from:
                idle_from = c.idle_since
        idle = t - idle_from if not hp_busy else -1.0
        grants, wake, cfg, is_hp = [], float("inf"), self.cfg, self.is_hp
        for i, c in enumerate(clients):
            if is_hp[i]:
                grants.append(self.hp_grant[i])
                continue
            phase, k = c.phase, c.idx
            if phase == READY and not c.started and idle >= cfg.unsliced_after_s:
                self.unsliced[i] = (c.seq_start, k)
            u = self.unsliced.get(i)
            unsliced = u is not None and u[0] == c.seq_start and u[1] == k  # _is_unsliced
            run = idle >= cfg.idle_s - 1e-15 or (unsliced and phase == RUN)
            # slow: 1 unmodified, else cfg.slow(its block)
            grants.append((self.plain[i] if unsliced else self.sliced[i][k])[run])
        if not hp_busy and self.hp:
            for lim in (self.cfg.idle_s, self.cfg.unsliced_after_s):
                if idle < lim - 1e-12:
                    x = idle_from + lim
                    if x < wake:
                        wake = x
        return grants, wake

    def launch_delay(self, t: float, i: int, displaced: Sequence[int], clients: Sequence[ClientView]) -> float:
        out = 0.0
        for j in displaced:
            c = clients[j]
            if self._is_unsliced(j, c):
                out = max(out, remaining_block(c))
            else:
                out = max(out, remaining_block(c, self.cfg.unit(c.block[c.idx])))
        return out
