"""Tally (Zhao et al., ASPLOS'25; CALIBRATION.md, DEVICE.md): priority-aware kernel scheduling.

HP kernels launch unmodified whenever HP has work and take SMs first. BE launches at most one kernel
at a time (one stream), and only once every HP client has been idle for ``idle_s`` (0.1 ms). BE
kernels run transformed (sliced, or persistent thread blocks with a retreat flag): an arriving HP
kernel preempts them and waits at most ``l_max_s`` (mean residual: half the transformed block, the
block cut to ``l_max_s``); a transformed kernel whose blocks are longer than ``l_max_s`` runs
``transform_overhead`` slower. After ``unsliced_after_s`` (100 ms) of HP idleness BE kernels run
unmodified: they cannot be preempted, so HP waits for their running blocks (half a block).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpusched_env.device.gpus import DeviceGpu
from gpusched_env.device.mechanism import READY, RUN, BaseMechanism, ClientSpec, ClientView, Grant, half_block


@dataclass(frozen=True)
class TallyConfig:
    l_max_s: float = 31.6e-6  # CALIBRATION.md: L_max 0.0316 ms in Tally's benchmark (0.1 ms default)
    idle_s: float = 0.1e-3  # CALIBRATION.md: BE only after HP idle >= 0.1 ms
    unsliced_after_s: float = 0.1  # CALIBRATION.md: unsliced after 100 ms of HP idleness
    transform_overhead: float = 0.05  # choice: slowdown of a sliced / PTB kernel (not in CALIBRATION.md)

    def __post_init__(self) -> None:
        for k in ("l_max_s", "idle_s", "unsliced_after_s"):
            if not getattr(self, k) > 0:
                raise ValueError(f"tally {k} must be in (0, inf), got {getattr(self, k)}")
        if not 0.0 <= self.transform_overhead < 10.0:
            raise ValueError(f"tally transform_overhead must be in [0, 10), got {self.transform_overhead}")


class Tally(BaseMechanism):
    name = "tally"

    def __init__(self, cfg: TallyConfig | None = None) -> None:
        self.cfg = cfg or TallyConfig()

    def reset(self, clients: Sequence[ClientSpec], gpu: DeviceGpu) -> None:
        super().reset(clients, gpu)
        self.unsliced: dict[int, tuple[float, int]] = {}  # client -> (sequence start, kernel) launched unmodified
        self.hp = [i for i, c in enumerate(clients) if c.role == "hp"]
        slow = 1.0 / (1.0 + self.cfg.transform_overhead)
        # the grants a client can get: HP always runs first; BE by (may run, transformed and long-blocked)
        self.hp_grant = {i: Grant(True, c.sm_cap, 0) for i, c in enumerate(clients)}
        self.be_grant = {(i, run, cut): Grant(run, c.sm_cap, 1, slow if cut else 1.0)
                         for i, c in enumerate(clients) for run in (False, True) for cut in (False, True)}

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
        grants, wake = [], float("inf")
        for i, c in enumerate(clients):
            if c.spec.role == "hp":
                grants.append(self.hp_grant[i])
                continue
            if c.phase == READY and not c.started and idle >= self.cfg.unsliced_after_s:
                self.unsliced[i] = (c.seq_start, c.idx)
            unsliced = self._is_unsliced(i, c)
            run = idle >= self.cfg.idle_s - 1e-15 or (unsliced and c.phase == RUN)
            cut = not unsliced and c.block[c.idx] > self.cfg.l_max_s
            grants.append(self.be_grant[i, run, cut])
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
                out = max(out, half_block(c))
            else:
                out = max(out, 0.5 * min(c.block[c.idx], self.cfg.l_max_s))
        return out
