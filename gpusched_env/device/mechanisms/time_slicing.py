"""Time slicing, the driver's default between CUDA contexts (DEVICE.md).

The hardware rule (NVIDIA open-gpu-doc, manuals/volta/gv100/dev_pbdma.ref.txt, "Semaphore switch
option": Host keeps processing a timeslice group "until either every channel in the TSG runs out of
work or the timeslice expires"; dev_ram.ref.txt: the timeslice starts once the context is loaded,
switching time is not part of it): contexts take turns round robin; the active one keeps the GPU for
at most one slice of ``slice_s`` (1024 µs, DEVICE.md) and hands it over **at once** when it has no
work left. Kernels of different contexts never run at the same time; each hand-over between two
contexts with work costs ``switch_s`` (no published figure: choice).

At kernel-group granularity the engine cannot see the host gaps inside a group, so the turns are
modelled as their cycle average (a fluid model, exact in the mean for periodic turns): a context
whose group keeps the GPU busy a share u of its span alone (``busy``) brings u·L of work per cycle of
length L; its turn lasts min(slice, u·L); L = Σ turns + n·switch. A context whose work fits its turn
gets its share u and runs as alone (host-bound); the others get slice / L each. The engine gives each
context that time share of the GPU (its SMs × share; no co-running, so no DRAM or block-wait terms).

An inference request starts with an empty queue (its host waits for the previous result), so its
first kernel waits for the context on the GPU to end its slice: the slice that began when that
context got the GPU alone (a fresh one when the service's previous request ended), then the switch.
A training job's host keeps its queue filled across iterations (never waits to join).
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

    def __post_init__(self) -> None:
        if not self.slice_s > 0:
            raise ValueError(f"time_slicing slice_s must be in (0, inf), got {self.slice_s}")
        if not self.switch_s >= 0:
            raise ValueError(f"time_slicing switch_s must be in [0, inf), got {self.switch_s}")


INF = float("inf")
_HOLD = Grant(False)
_RUN = Grant(True)


def time_shares(busy: Sequence[float], slice_s: float, switch_s: float) -> list[float]:
    """Share of the GPU's time each of n ≥ 2 contexts with work gets under round-robin slicing with
    hand-over when out of work: the cycle L = Σ turns + n·switch, turn_i = min(slice, busy_i·L).
    Contexts are saturated (turn = slice) from the busiest down until the rest fit their turns."""
    n = len(busy)
    if n == 2:  # the loop below for two contexts (the same arithmetic)
        u0, u1 = busy
        big, small = (u0, u1) if u0 >= u1 else (u1, u0)
        if big + small < 1.0 and big * (2 * switch_s) / (1.0 - big - small) <= slice_s:
            return [u0, u1]
        if small < 1.0 and small * (slice_s + 2 * switch_s) / (1.0 - small) <= slice_s:
            f = slice_s / ((slice_s + 2 * switch_s) / (1.0 - small))
            return [f, u1] if u0 >= u1 else [u0, f]
        f = slice_s / (2 * slice_s + 2 * switch_s)
        return [f, f]
    order = sorted(range(n), key=lambda i: -busy[i])
    length = 0.0
    sat = n
    for k in range(n + 1):
        rest = sum(busy[i] for i in order[k:])
        if rest < 1.0:
            length = (k * slice_s + n * switch_s) / (1.0 - rest)
            if k == n or busy[order[k]] * length <= slice_s:
                sat = k
                break
    shares = list(busy)
    for i in order[:sat]:
        shares[i] = slice_s / length
    return shares


class TimeSlicing(BaseMechanism):
    name = "time_slicing"
    co_run = False  # kernels of different contexts never share the GPU at the same time

    def __init__(self, cfg: TimeSlicingConfig | None = None) -> None:
        self.cfg = cfg or TimeSlicingConfig()

    def reset(self, clients: Sequence[ClientSpec], gpu: DeviceGpu) -> None:
        super().reset(clients, gpu)
        n = len(clients)
        self.services = [i for i, c in enumerate(clients) if c.is_service]
        self.seen = [-1.0] * n  # a service's request (its sequence start) already admitted
        self.wait_until = [-1.0] * n  # a request waiting for the active context's slice to end
        self.joining = [False] * n  # its next launch pays the switch
        self.alone: tuple[int, float] | None = None  # (context, since when) holding the GPU alone
        # the grants of two contexts taking turns, per (kernel of the first, kernel of the second):
        # they depend on those kernels' busy shares and SM demands only
        self.turns: dict[tuple[int, int], list[Grant]] = {}

    def plan(self, t: float, clients: Sequence[ClientView]) -> tuple[list[Grant], float]:
        cfg, n = self.cfg, len(clients)
        for i in self.services:
            c = clients[i]
            if c.phase < READY or c.seq_start == self.seen[i]:
                continue
            self.seen[i] = c.seq_start  # a new request: its queue was empty
            others = [j for j in range(n) if j != i and clients[j].phase >= READY and self.wait_until[j] < 0]
            if len(others) == 1:  # wait for the other context's slice to end, then switch
                j = others[0]
                since = self.alone[1] if self.alone is not None and self.alone[0] == j else t
                self.wait_until[i] = since + cfg.slice_s * ((t - since) // cfg.slice_s + 1)
            elif others:  # several already take turns: join the round (its place in it: not modelled)
                self.joining[i] = True
        wake = INF
        for i in self.services:  # only a request waits
            w = self.wait_until[i]
            if w < 0:
                continue
            c = clients[i]
            if w <= t + 1e-15 or c.phase < READY:
                self.wait_until[i], self.joining[i] = -1.0, c.phase >= READY
            elif w < wake:
                wake = w
        wait_until = self.wait_until
        active = []
        for i, c in enumerate(clients):
            if c.phase >= READY and wait_until[i] < 0:
                active.append(i)
        if len(active) == 1:
            i = active[0]
            if self.alone is None or self.alone[0] != i:
                self.alone = (i, t)
        else:
            self.alone = None
        if n == 2 and len(active) == 2:  # two contexts take turns: their grants, built once per kernel pair
            c0, c1 = clients
            key = (c0.idx, c1.idx)
            pair = self.turns.get(key)
            if pair is None:
                f0, f1 = time_shares([c0.busy[c0.idx], c1.busy[c1.idx]], cfg.slice_s, cfg.switch_s)
                pair = self.turns[key] = [Grant(True, f0 * c0.sm[c0.idx]), Grant(True, f1 * c1.sm[c1.idx])]
            return list(pair), wake
        grants = [_HOLD] * n
        if len(active) == 1:
            grants[active[0]] = _RUN
        elif active:
            busy = [clients[i].busy[clients[i].idx] for i in active]
            for i, f in zip(active, time_shares(busy, cfg.slice_s, cfg.switch_s), strict=True):
                c = clients[i]
                grants[i] = Grant(True, f * c.sm[c.idx])  # its SMs for a share f of the time
        return grants, wake

    def launch_delay(self, t: float, i: int, displaced: Sequence[int], clients: Sequence[ClientView]) -> float:
        if self.joining[i]:
            self.joining[i] = False
            return self.cfg.switch_s
        return 0.0
