"""Discrete-event model of one GPU shared by clients, kernel (group) by kernel (group).

Each client is one stream: its host issues kernel i at ``seq start + issue_s[i]`` and the kernel joins
the GPU queue once the previous one has ended. The sharing mechanism (:mod:`mechanism`) grants every
queued or running kernel the right to hold SMs; SMs go to granted kernels by level, max-min fairly
within a level, each up to min(its SM demand, its cap). A kernel with SM share a of its demand s and
memory intensity m progresses at ``slow · (a/s) / ((1 − m) + m · max(1, B))`` of its alone speed, B
the summed bandwidth demand Σ m_j·a_j of the running kernels (choice: a roofline-style split). A
kernel that takes SMs from others waits the mechanism's ``launch_delay`` first (blocks finish or are
preempted). Between events nothing changes, so time jumps from event to event.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpusched_env.device.gpus import DeviceGpu
from gpusched_env.device.mechanism import HOST, IDLE, READY, RUN, ClientSpec, Grant, Mechanism
from gpusched_env.device.stats import ClientStats, RunStats

INF = float("inf")
EPS = 1e-12


class ClientState:
    """Mutable state of one client during a run (mechanisms read it as a ``ClientView``)."""

    __slots__ = ("spec", "phase", "idx", "remaining", "alloc", "rate", "stall_until", "ready_at",
                 "seq_start", "req", "idle_since", "queued_at", "started", "stats", "n", "dur", "issue")

    def __init__(self, spec: ClientSpec) -> None:
        self.spec = spec
        self.dur, self.issue, self.n = spec.seq.dur_s.tolist(), spec.seq.issue_s.tolist(), len(spec.seq)
        self.phase, self.idx, self.remaining = IDLE, 0, 0.0
        self.alloc = self.rate = 0.0
        self.stall_until = self.ready_at = self.seq_start = self.queued_at = 0.0
        self.req, self.idle_since, self.started = 0, -1.0, False
        self.stats = ClientStats(spec.name, spec.role)

    def begin_sequence(self, t: float) -> None:
        self.seq_start, self.idx = t, 0
        self._to_kernel(t)

    def _to_kernel(self, t: float) -> None:
        self.remaining, self.started, self.alloc, self.rate = self.dur[self.idx], False, 0.0, 0.0
        self.ready_at = max(t, self.seq_start + self.issue[self.idx])
        self.phase = HOST if self.ready_at > t + EPS else READY
        if self.phase == READY:
            self.queued_at = t

    def next_kernel(self, t: float) -> bool:
        """Move to the next kernel; False when the sequence is done."""
        self.idx += 1
        if self.idx >= self.n:
            return False
        self._to_kernel(t)
        return True


class DeviceSim:
    """One GPU, its clients and a sharing mechanism; :meth:`run` to a horizon or :meth:`step` by event."""

    def __init__(self, gpu: DeviceGpu, clients: Sequence[ClientSpec], mechanism: Mechanism) -> None:
        if not clients:
            raise ValueError("clients must hold at least one client")
        self.gpu, self.mech = gpu, mechanism
        self.clients = [ClientState(c) for c in clients]
        self.t, self.wake = 0.0, INF
        self.stats = RunStats(gpu.name, mechanism.name)
        mechanism.reset(clients, gpu)
        for c in self.clients:
            if c.spec.is_service:
                self._next_request(c, 0.0)
            else:
                c.begin_sequence(0.0)
        self._replan()

    # -- the event loop -------------------------------------------------------------------------
    def run(self, until_s: float) -> RunStats:
        """Advance to ``until_s`` and return the statistics so far."""
        while self.step(until_s):
            pass
        return self.finish()

    def step(self, until_s: float = INF, replan: bool = True) -> bool:
        """Advance to the next event (at most ``until_s``); False once ``until_s`` is reached.
        ``replan=False`` leaves the new grants to a later :meth:`replan` (an env decides in between)."""
        t_next = min(self._next_time(), until_s)
        self._advance(t_next)
        for c in self.clients:
            self._handle(c)
        if t_next >= until_s:
            return False
        if replan:
            self._replan()
        return True

    def replan(self) -> None:
        """Ask the mechanism for grants now and share the SMs accordingly."""
        self._replan()

    def finish(self) -> RunStats:
        self.stats.clients = [c.stats for c in self.clients]
        self.stats.elapsed_s = self.t
        return self.stats

    def _next_time(self) -> float:
        t = self.wake
        for c in self.clients:
            if c.phase == RUN:
                start = max(self.t, c.stall_until)
                t = min(t, start + c.remaining / c.rate if c.rate > 0 else (start if start > self.t else INF))
            elif c.phase == HOST:
                t = min(t, c.ready_at)
            elif c.phase == IDLE and c.spec.arrivals is not None and c.req < len(c.spec.arrivals):
                t = min(t, float(c.spec.arrivals[c.req]))
        return max(t, self.t)

    def _advance(self, t1: float) -> None:
        dt_busy, sm_time = 0.0, 0.0
        for c in self.clients:
            if c.phase == RUN and c.rate > 0:
                run = t1 - max(self.t, c.stall_until)
                if run > 0:
                    c.remaining -= c.rate * run
                    dt_busy = max(dt_busy, run)
                    sm_time += c.alloc * run
                    c.stats.gpu_s += run
        self.stats.add(t1 - self.t, dt_busy, sm_time)
        self.t = t1

    def _handle(self, c: ClientState) -> None:
        t = self.t
        if c.phase == RUN and c.remaining <= EPS * (1 + c.dur[c.idx]):
            c.stats.kernels += 1
            if not c.next_kernel(t):
                self._sequence_done(c, t)
        if c.phase == HOST and c.ready_at <= t + EPS:
            c.phase, c.queued_at = READY, t
        if c.phase == IDLE and c.spec.arrivals is not None:
            self._next_request(c, t)
        if c.phase == READY and c.queued_at == t and not c.started:
            self.mech.on_launch(t, self.clients.index(c), self.clients)

    def _sequence_done(self, c: ClientState, t: float) -> None:
        if c.spec.arrivals is None:
            c.stats.iterations += 1
            c.begin_sequence(t)
            return
        c.stats.add_latency(t - float(c.spec.arrivals[c.req]), c.spec.slo_s)
        c.req += 1
        c.phase, c.idle_since, c.alloc, c.rate = IDLE, t, 0.0, 0.0
        self._next_request(c, t)

    def _next_request(self, c: ClientState, t: float) -> None:
        arr = c.spec.arrivals
        if arr is not None and c.req < len(arr) and arr[c.req] <= t + EPS:
            c.begin_sequence(t)
            if c.phase == READY:
                c.queued_at = t

    # -- sharing --------------------------------------------------------------------------------
    def _replan(self) -> None:
        for c in self.clients:  # idle_since: -1 while a kernel is queued or running
            if c.phase in (READY, RUN):
                c.idle_since = -1.0
            elif c.idle_since < 0:
                c.idle_since = self.t
        grants, wake = self.mech.plan(self.t, self.clients)
        self.wake = wake if wake > self.t + EPS else INF  # a wake-up now would never advance time
        self._allocate(grants)

    def _allocate(self, grants: list[Grant]) -> None:
        old = [c.alloc if c.phase == RUN else 0.0 for c in self.clients]
        want = [i for i, c in enumerate(self.clients) if c.phase in (READY, RUN) and grants[i].run]
        new = self._water_fill(want, grants)
        displaced = [i for i, c in enumerate(self.clients) if c.phase == RUN and new[i] < old[i] - 1e-12]
        free = 1.0 - sum(max(o, n) for o, n in zip(old, new, strict=True) if o > 0)
        for i, c in enumerate(self.clients):
            a = new[i]
            if c.phase == RUN and a == 0.0:
                c.phase, c.queued_at = READY, self.t  # preempted: keeps its progress
            elif c.phase == READY and a > 0.0:
                c.phase = RUN
                taken = a > free + 1e-12
                delay = self.mech.launch_delay(self.t, i, displaced if taken else (), self.clients)
                free -= a
                c.stall_until = self.t + delay
                if not c.started:
                    c.started = True
                    c.stats.add_wait(c.stall_until - c.queued_at)
            c.alloc = a
        self._rates(grants)

    def _water_fill(self, want: list[int], grants: list[Grant]) -> list[float]:
        new = [0.0] * len(self.clients)
        cap = 1.0
        for level in sorted({grants[i].level for i in want}):
            group = sorted((i for i in want if grants[i].level == level),
                           key=lambda i: min(float(self.clients[i].spec.seq.sm[self.clients[i].idx]), grants[i].cap))
            for k, i in enumerate(group):
                c = self.clients[i]
                demand = min(float(c.spec.seq.sm[c.idx]), grants[i].cap)
                a = min(demand, cap / (len(group) - k))
                new[i], cap = a, cap - a
        return new

    def _rates(self, grants: list[Grant]) -> None:
        seqs = [c.spec.seq for c in self.clients]
        band = sum(float(seqs[i].mem[c.idx]) * c.alloc for i, c in enumerate(self.clients) if c.phase == RUN)
        over = max(1.0, band)
        for i, c in enumerate(self.clients):
            if c.phase != RUN:
                c.rate = 0.0
                continue
            s, m = float(seqs[i].sm[c.idx]), float(seqs[i].mem[c.idx])
            c.rate = grants[i].slow * min(1.0, c.alloc / s) / ((1.0 - m) + m * over)


def simulate(gpu: DeviceGpu, clients: Sequence[ClientSpec], mechanism: Mechanism, duration_s: float) -> RunStats:
    """Run ``clients`` on ``gpu`` under ``mechanism`` for ``duration_s`` simulated seconds."""
    if not duration_s > 0:
        raise ValueError(f"duration_s must be in (0, inf), got {duration_s}")
    return DeviceSim(gpu, clients, mechanism).run(duration_s)



