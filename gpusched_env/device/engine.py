"""Discrete-event model of one GPU shared by clients, kernel (group) by kernel (group).

Each client is one stream: its host issues kernel i at ``seq start + issue_s[i]`` and the kernel joins
the GPU queue once the previous one has ended. The sharing mechanism (:mod:`mechanism`) grants every
queued or running kernel the right to hold SMs; SMs go to granted kernels by level, max-min fairly
within a level, each up to min(its SM demand, its cap). Demands are in the GPU's units: SM demand =
the share of the GPU's SMs its resident blocks fill; DRAM demand = memory intensity m × the GPU type's
peak bandwidth while it runs at full speed. Co-running kernels slow each other when the summed DRAM
demand exceeds the peak (memory-bound part stretched by the oversubscription), when a kernel gets
fewer SMs than it fills, and because each kernel of a group first waits for SMs that others' running
blocks hold (:func:`rate`). A group's members keep their own SM demands where the group is alone or
served after one co-runner (:func:`member_share`: a full-GPU member under a cap or beside a co-runner
is slowed though the group's mean demand fits). A kernel group that takes SMs from others waits the
mechanism's ``launch_delay`` first (blocks finish or are preempted). Mechanisms whose clients take
turns (``co_run = False``: time slicing) grant time shares instead; their kernels never wait for each
other's blocks. Between events nothing changes, so time jumps from event to event.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence

import numpy as np

from gpusched_env.device.gpus import DeviceGpu
from gpusched_env.device.mechanism import HOST, IDLE, READY, RUN, BaseMechanism, ClientSpec, Grant, Mechanism
from gpusched_env.device.stats import ClientStats, RunStats

INF = float("inf")
EPS = 1e-12



def _two_shares(di: float, dj: float, li: int, lj: int) -> tuple[float, float]:
    """The SM shares of two clients that both want SMs (demands ``di``, ``dj``, levels ``li``, ``lj``),
    as the water fill gives them: the one served first (the lower level; on one level the smaller
    demand, ``i`` on a tie) gets min(demand, its fair share), the other min(demand, what is left)."""
    swap = (dj < di) if li == lj else (lj < li)
    first, second = (dj, di) if swap else (di, dj)
    share = 1.0 / 2 if li == lj else 1.0
    a = share if share < first else first
    rest = 1.0 - a  # what is left, / 1
    b = rest if rest < second else second
    return (b, a) if swap else (a, b)

class Mix:
    """A kernel group's member SM demands (sorted) with cumulative durations and SM-times, so the
    members' mean stretch under an SM ceiling is read with a bisection (:meth:`piece`)."""

    __slots__ = ("s", "cd", "cds", "total", "top", "memo")

    def __init__(self, dur: np.ndarray, sm: np.ndarray) -> None:
        order = np.argsort(sm, kind="stable")
        d, s = dur[order], sm[order]
        self.s = s.tolist()
        self.cd = np.concatenate(([0.0], np.cumsum(d))).tolist()
        self.cds = np.concatenate(([0.0], np.cumsum(d * s))).tolist()
        self.total = self.cd[-1]
        self.top = self.s[-1]  # the largest member demand: no member is held back by a ceiling above it
        self.memo: dict[float, float] = {}

    def share(self, c: float) -> float:
        """1 / the members' mean stretch under the ceiling ``c`` (> 0), remembered per ceiling."""
        got = self.memo.get(c)
        if got is None:
            got = self.memo[c] = self.total / self.piece(-1.0, 2.0, c)
        return got

    def piece(self, lo: float, hi: float, c: float) -> float:
        """Σ over members with lo < s ≤ hi of duration × max(1, s / c): each member that fills more
        than the c of the SMs it can hold runs s / c times longer."""
        s = self.s
        a, b = bisect_right(s, lo), bisect_right(s, hi)
        m = bisect_right(s, c)
        m = a if m < a else b if m > b else m
        return (self.cd[m] - self.cd[a]) + (self.cds[b] - self.cds[m]) / c


def member_ceiling(demand: float, cap: float, level: int, other: tuple[float, int] | None) -> float:
    """The most SMs each member of a group may hold: alone, its cap; served after its one co-runner (a
    higher level, or the larger demand on one level; ``demand`` = its group's min(mean SM demand,
    cap), ``other`` = the co-runner's (demand, level)), min(cap, what the co-runner leaves). -1 where
    the group is served first: its losses to the co-runner are the waits of :func:`rate`."""
    if other is None:
        return cap
    d_o, l_o = other
    if level < l_o or (level == l_o and demand <= d_o):  # first (the client listed first on a tie)
        return -1.0
    if level == l_o:  # the smaller demand took up to half the SMs
        d_o = d_o if d_o < 0.5 else 0.5
    return min(cap, 1.0 - min(d_o, 1.0))


def member_share(mix: Mix, demand: float, cap: float, level: int, other: tuple[float, int] | None) -> float:
    """1 / the mean stretch (duration-weighted) of a group's members under :func:`member_ceiling`: a
    member of SM demand s runs max(1, s / ceiling) longer. 0 where the group is served first or its
    ceiling is empty."""
    c = member_ceiling(demand, cap, level, other)
    return mix.share(c) if c > 1e-12 else 0.0


class ClientState:
    """Mutable state of one client during a run (mechanisms read it as a ``ClientView``).

    The kernel sequence's arrays are kept as Python lists (``dur``, ``sm``, ``mem``, ``block``,
    ``issue``; ``arr`` the arrival times): the event loop reads one entry at a time, and a list item is
    several times cheaper to read than a NumPy scalar (the same float either way)."""

    __slots__ = ("spec", "phase", "idx", "remaining", "alloc", "rate", "stall_until", "ready_at",
                 "seq_start", "req", "idle_since", "queued_at", "started", "stats", "n", "dur", "issue",
                 "sm", "mem", "block", "cnt", "busy", "mb", "arr", "n_arr", "mix")

    def __init__(self, spec: ClientSpec) -> None:
        self.spec = spec
        seq = spec.seq
        self.dur, self.issue, self.n = seq.dur_s.tolist(), seq.issue_s.tolist(), len(seq)
        self.sm, self.mem, self.block = seq.sm.tolist(), seq.mem.tolist(), seq.block_s.tolist()
        self.cnt, self.busy = seq.count.tolist(), seq.busy.tolist()
        self.mb = [m * b for m, b in zip(self.mem, self.busy, strict=True)]  # mem * busy, as _rates multiplies them
        self.mix: list[Mix | None] = [None if len(d) < 2 else Mix(d, s) for d, s in seq.members] or [None] * self.n
        self.arr: list[float] | None = (None if spec.arrivals is None
                                        else np.asarray(spec.arrivals, dtype=float).tolist())
        self.n_arr = 0 if self.arr is None else len(self.arr)
        self.phase, self.idx, self.remaining = IDLE, 0, 0.0
        self.alloc = self.rate = 0.0
        self.stall_until = self.ready_at = self.seq_start = self.queued_at = 0.0
        self.req, self.idle_since, self.started = 0, -1.0, False
        self.stats = ClientStats(spec.name, spec.role)

    def begin_sequence(self, t: float) -> None:
        self.seq_start, self.idx = t, 0
        self._to_kernel(t)

    def _to_kernel(self, t: float) -> None:
        i = self.idx
        self.remaining, self.started, self.alloc, self.rate = self.dur[i], False, 0.0, 0.0
        ready = self.seq_start + self.issue[i]
        self.ready_at = ready = ready if ready > t else t  # max(t, issue time)
        if ready > t + EPS:
            self.phase = HOST
        else:
            self.phase, self.queued_at = READY, t

    def next_kernel(self, t: float) -> bool:
        """Move to the next kernel; False when the sequence is done."""
        self.idx += 1
        if self.idx >= self.n:
            return False
        self._to_kernel(t)
        return True


class DeviceSim:
    """One GPU, its clients and a sharing mechanism; :meth:`run` to a horizon or :meth:`step` by event.

    The event loop is the hot path of every device-level run: it reads locals and list items rather
    than attributes and NumPy scalars, and writes ``min``/``max`` of two floats as comparisons that
    return the same operand the builtins would (``min(a, b)`` is ``b if b < a else a``), so every
    float operation, and its order, is that of the plain formulas in the comments."""

    def __init__(self, gpu: DeviceGpu, clients: Sequence[ClientSpec], mechanism: Mechanism) -> None:
        if not clients:
            raise ValueError("clients must hold at least one client")
        self.gpu, self.mech = gpu, mechanism
        self.clients = [ClientState(c) for c in clients]
        self.t, self.wake = 0.0, INF
        self.stats = RunStats(gpu.name, mechanism.name)
        mechanism.reset(clients, gpu)
        # the mechanism's launch hook, None where it is the default no-op (not called per event then)
        hook = mechanism.on_launch
        self._on_launch = None if getattr(hook, "__func__", None) is BaseMechanism.on_launch else hook
        # clients that take turns (time slicing) never co-run: no waits for each other's blocks
        self._co_run = bool(getattr(mechanism, "co_run", True))
        # the SM water fill: its two-client form for every pair (no length test per event)
        self._fill = self._water_fill2 if len(self.clients) == 2 else self._water_fill
        self._rate_all = self._rates2 if len(self.clients) == 2 else self._rates
        for c in self.clients:
            if c.spec.is_service:
                self._next_request(c, 0.0)
            else:
                c.begin_sequence(0.0)
        self._replan()

    # -- the event loop -------------------------------------------------------------------------
    def run(self, until_s: float) -> RunStats:
        """Advance to ``until_s`` and return the statistics so far: :meth:`step` in a loop, written
        out inline (``_next_time``, ``_advance``, ``_handle`` and ``_plan`` without four calls per
        event; the same operations in the same order)."""
        clients, stats = self.clients, self.stats
        plan, allocate, on_launch = self.mech.plan, self._allocate, self._on_launch
        t = self.t
        while True:
            # _next_time
            now = t
            t = self.wake
            for c in clients:
                phase = c.phase
                if phase == RUN:
                    start = c.stall_until
                    if not start > now:  # max(now, stall_until)
                        start = now
                    rate_c = c.rate
                    x = start + c.remaining / rate_c if rate_c > 0 else (start if start > now else INF)
                elif phase == HOST:
                    x = c.ready_at
                elif phase == IDLE and c.arr is not None and c.req < c.n_arr:
                    x = c.arr[c.req]
                else:
                    continue
                if x < t:
                    t = x
            if not now > t:  # max(t, now)
                now_t = t
            else:
                now_t = now
            t = until_s if until_s < now_t else now_t  # min(next event, until_s)
            # _advance
            dt_busy, sm_time = 0.0, 0.0
            for c in clients:
                if c.phase == RUN and (r := c.rate) > 0:
                    stall = c.stall_until
                    run = t - (stall if stall > now else now)  # t - max(now, stall_until)
                    if run > 0:
                        c.remaining -= r * run
                        if run > dt_busy:
                            dt_busy = run
                        sm_time += c.alloc * run
                        c.stats.gpu_s += run
            stats.busy_s += dt_busy
            stats.sm_s += sm_time
            self.t = t
            # _handle
            for i, c in enumerate(clients):
                phase = c.phase
                if phase == RUN and c.remaining <= EPS * (1 + c.dur[c.idx]):
                    c.stats.kernels += 1
                    if not c.next_kernel(t):
                        self._sequence_done(c, t)
                    phase = c.phase
                if phase == HOST and c.ready_at <= t + EPS:
                    c.phase = phase = READY
                    c.queued_at = t
                if phase == IDLE and c.arr is not None:
                    self._next_request(c, t)
                    phase = c.phase
                if phase == READY and c.queued_at == t and not c.started and on_launch is not None:
                    on_launch(t, i, clients)
                if phase >= READY:  # idle_since: -1 while a kernel is queued or running
                    c.idle_since = -1.0
                elif c.idle_since < 0:
                    c.idle_since = t
            if t >= until_s:
                return self.finish()
            # _plan
            grants, wake = plan(t, clients)
            self.wake = wake if wake > t + EPS else INF  # a wake-up now would never advance time
            allocate(grants)

    def step(self, until_s: float = INF, replan: bool = True) -> bool:
        """Advance to the next event (at most ``until_s``); False once ``until_s`` is reached.
        ``replan=False`` leaves the new grants to a later :meth:`replan` (an env decides in between)."""
        t_next = self._next_time()
        if until_s < t_next:  # min(next event, until_s)
            t_next = until_s
        self._advance(t_next)
        self._handle()
        if t_next >= until_s:
            return False
        if replan:
            self._plan()  # _handle has marked idle_since
        return True

    def replan(self) -> None:
        """Ask the mechanism for grants now and share the SMs accordingly."""
        self._replan()

    def finish(self) -> RunStats:
        self.stats.clients = [c.stats for c in self.clients]
        self.stats.elapsed_s = self.t
        return self.stats

    def _next_time(self) -> float:
        now = self.t
        t = self.wake
        for c in self.clients:
            phase = c.phase
            if phase == RUN:
                start = c.stall_until
                if not start > now:  # max(now, stall_until)
                    start = now
                rate = c.rate
                x = start + c.remaining / rate if rate > 0 else (start if start > now else INF)
            elif phase == HOST:
                x = c.ready_at
            elif phase == IDLE and c.arr is not None and c.req < c.n_arr:
                x = c.arr[c.req]
            else:
                continue
            if x < t:
                t = x
        return now if now > t else t  # max(t, now)

    def _advance(self, t1: float) -> None:
        now = self.t
        dt_busy, sm_time = 0.0, 0.0
        for c in self.clients:
            if c.phase == RUN and (r := c.rate) > 0:
                stall = c.stall_until
                run = t1 - (stall if stall > now else now)  # t1 - max(now, stall_until)
                if run > 0:
                    c.remaining -= r * run
                    if run > dt_busy:
                        dt_busy = run
                    sm_time += c.alloc * run
                    c.stats.gpu_s += run
        stats = self.stats
        stats.busy_s += dt_busy
        stats.sm_s += sm_time
        self.t = t1

    def _handle(self) -> None:
        t = self.t
        clients = self.clients
        for i, c in enumerate(clients):
            phase = c.phase
            if phase == RUN and c.remaining <= EPS * (1 + c.dur[c.idx]):
                c.stats.kernels += 1
                if not c.next_kernel(t):
                    self._sequence_done(c, t)
                phase = c.phase
            if phase == HOST and c.ready_at <= t + EPS:
                c.phase = phase = READY
                c.queued_at = t
            if phase == IDLE and c.arr is not None:
                self._next_request(c, t)
                phase = c.phase
            if phase == READY and c.queued_at == t and not c.started and self._on_launch is not None:
                self._on_launch(t, i, clients)
            if phase >= READY:  # idle_since (as _replan marks it): -1 while a kernel is queued or running
                c.idle_since = -1.0
            elif c.idle_since < 0:
                c.idle_since = t

    def _sequence_done(self, c: ClientState, t: float) -> None:
        if c.arr is None:
            c.stats.iterations += 1
            c.begin_sequence(t)
            return
        c.stats.add_latency(t - c.arr[c.req], c.spec.slo_s, t - c.seq_start - c.issue[0])
        c.req += 1
        c.phase, c.idle_since, c.alloc, c.rate = IDLE, t, 0.0, 0.0
        self._next_request(c, t)

    def _next_request(self, c: ClientState, t: float) -> None:
        arr = c.arr
        if arr is not None and c.req < c.n_arr and arr[c.req] <= t + EPS:
            c.begin_sequence(t)
            if c.phase == READY:
                c.queued_at = t

    # -- sharing --------------------------------------------------------------------------------
    def _replan(self) -> None:
        t = self.t
        for c in self.clients:  # idle_since: -1 while a kernel is queued or running
            if c.phase >= READY:  # READY or RUN
                c.idle_since = -1.0
            elif c.idle_since < 0:
                c.idle_since = t
        self._plan()

    def _plan(self) -> None:
        """The mechanism's grants and the SM shares, once ``idle_since`` is marked (_replan, _handle)."""
        t = self.t
        grants, wake = self.mech.plan(t, self.clients)
        self.wake = wake if wake > t + EPS else INF  # a wake-up now would never advance time
        self._allocate(grants)

    def _allocate(self, grants: list[Grant]) -> None:
        clients, t = self.clients, self.t
        new = self._fill(grants)
        # the SMs held before this event: a kernel displaced (shrunk or preempted) frees its SMs only
        # as its blocks end; free = 1 - sum over holders of max(old, new share)
        # one pass: holders update (shrunk, preempted: keeps its progress) and their SMs are counted;
        # the kernels that get SMs now launch after it, in client order (launch_delay reads neither
        # shares nor phases of the others)
        displaced: list[int] = []
        launch: list[int] = []
        held = 0.0
        for i, c in enumerate(clients):
            a = new[i]
            phase = c.phase
            if phase == RUN:
                old = c.alloc
                if a < old - 1e-12:
                    displaced.append(i)
                if old > 0:
                    held += a if a > old else old
                if a == 0.0:
                    c.phase, c.queued_at = READY, t
            elif phase == READY and a > 0.0:
                launch.append(i)
            c.alloc = a
        if launch:
            free = 1.0 - held
            delay_of = self.mech.launch_delay
            for i in launch:
                c, a = clients[i], new[i]
                c.phase = RUN
                taken = a > free + 1e-12
                delay = delay_of(t, i, displaced if taken else (), clients)
                free -= a
                c.stall_until = stall = t + delay
                if not c.started:
                    c.started = True
                    st, wait = c.stats, stall - c.queued_at  # a kernel's first wait for SMs
                    st.waits += 1
                    if wait > st.max_wait_s:
                        st.max_wait_s = wait
        self._rate_all(grants)

    def _water_fill(self, grants: list[Grant]) -> list[float]:
        """SM shares: level by level (lower first), max-min fair within a level, each client up to
        its demand min(SM demand, cap)."""
        clients = self.clients
        if len(clients) == 2:  # every pair: the code below for two clients, without the lists
            return self._water_fill2(grants)
        new = [0.0] * len(clients)
        want, demand = [], []
        for i, c in enumerate(clients):
            if c.phase >= READY and grants[i].run:  # READY or RUN
                s, cap_i = c.sm[c.idx], grants[i].cap
                want.append(i)
                demand.append(cap_i if cap_i < s else s)  # min(SM demand, cap)
        if not want:
            return new
        if len(want) == 1:  # alone: min(demand, 1.0 / 1)
            d = demand[0]
            new[want[0]] = 1.0 if 1.0 < d else d
            return new
        if len(want) == 2:  # the loop below, unrolled
            (i, j), (di, dj) = want, demand
            new[i], new[j] = _two_shares(di, dj, grants[i].level, grants[j].level)
            return new
        dem = dict(zip(want, demand, strict=True))
        cap = 1.0
        for level in sorted({grants[i].level for i in want}):
            group = sorted((i for i in want if grants[i].level == level), key=dem.__getitem__)
            for k, i in enumerate(group):
                share = cap / (len(group) - k)
                a = share if share < dem[i] else dem[i]  # min(demand, fair share of what is left)
                new[i], cap = a, cap - a
        return new

    def _water_fill2(self, grants: list[Grant]) -> list[float]:
        """:meth:`_water_fill` for two clients (the same comparisons and the same arithmetic)."""
        c0, c1 = self.clients
        g0, g1 = grants
        w0 = c0.phase >= READY and g0.run
        w1 = c1.phase >= READY and g1.run
        if w0:
            s, cap = c0.sm[c0.idx], g0.cap
            d0 = cap if cap < s else s  # min(SM demand, cap)
        if w1:
            s, cap = c1.sm[c1.idx], g1.cap
            d1 = cap if cap < s else s
        if w0 and w1:  # _two_shares, inline
            l0, l1 = g0.level, g1.level
            if l0 == l1:
                if d1 < d0:  # the smaller demand first: min(demand, 1/2), the other min(demand, rest)
                    a = 0.5 if 0.5 < d1 else d1
                    rest = 1.0 - a
                    return [rest if rest < d0 else d0, a]
                a = 0.5 if 0.5 < d0 else d0
                rest = 1.0 - a
                return [a, rest if rest < d1 else d1]
            if l1 < l0:  # the lower level first: min(demand, 1), the other min(demand, rest)
                a = 1.0 if 1.0 < d1 else d1
                rest = 1.0 - a
                return [rest if rest < d0 else d0, a]
            a = 1.0 if 1.0 < d0 else d0
            rest = 1.0 - a
            return [a, rest if rest < d1 else d1]
        if w0:  # alone: min(demand, 1.0 / 1)
            return [1.0 if 1.0 < d0 else d0, 0.0]
        if w1:
            return [0.0, 1.0 if 1.0 < d1 else d1]
        return [0.0, 0.0]

    def _rates(self, grants: list[Grant]) -> None:
        """Progress rates (alone-time per second) of the running kernels; see :func:`rate`."""
        clients = self.clients
        running = []
        for i, c in enumerate(clients):
            c.rate = 0.0  # set again below where it runs
            if c.phase == RUN:
                running.append((i, c))
        if not running:
            return
        band = 0.0  # DRAM demand of the running kernels at their SM shares, in units of the GPU's peak
        for _, c in running:
            k = c.idx
            share = c.alloc / c.sm[k]
            band += c.mb[k] * (share if share < 1.0 else 1.0)  # mb = mem * busy, the same product
        over = band if band > 1.0 else 1.0  # max(1, band)
        # the co-runners with blocks pending that could take freed SMs (holding less than their demand
        # and their cap: blocks held back by the cap never win SMs)
        pending = ([(j, o) for j, o in running if o.alloc < min(o.sm[o.idx], grants[j].cap) - 1e-9]
                   if len(running) > 1 and self._co_run else [])
        # a group's members fill the SMs unevenly: alone or served second (at most one co-runner), each
        # member is held to its own ceiling (a full-GPU member under a cap, or beside a co-runner, is
        # slowed though the group's mean demand fits); otherwise the group's mean demand stands for them
        members = self._co_run and len(running) <= 2
        pair = len(running) == 2
        f = rate
        for i, c in running:
            k = c.idx
            g = grants[i]
            got = c.alloc / c.sm[k]
            mix = c.mix[k] if members else None
            if mix is not None:
                cap = g.cap
                if pair:  # member_ceiling, inline: the co-runner's demand and level
                    j, o = running[1] if running[0][0] == i else running[0]
                    go = grants[j]
                    so = o.sm[o.idx]
                    d_o = go.cap if go.cap < so else so
                    if g.level < go.level:
                        ceiling = -1.0
                    elif g.level == go.level:
                        sk = c.sm[k]
                        if (cap if cap < sk else sk) <= d_o:
                            ceiling = -1.0
                        else:
                            left = 1.0 - (d_o if d_o < 0.5 else 0.5)
                            ceiling = cap if cap < left else left
                    else:
                        left = 1.0 - (d_o if d_o < 1.0 else 1.0)
                        ceiling = cap if cap < left else left
                else:
                    ceiling = cap
                if 1e-12 < ceiling < mix.top:  # else no member is held back: the group's share above
                    got = mix.share(ceiling)
            wait = 0.0  # mean wait of one of its later kernels for SMs that others' pending blocks took
            if pending and c.cnt[k] > 1.0:
                level = g.level
                for j, o in pending:
                    if j == i:
                        continue
                    # its blocks win the SMs c's kernels free, and c's next kernel waits for one of
                    # them to end (mean residual: half a block) -- every kernel at the same level;
                    # only those issued after a host gap (share 1 - busy) when c's level comes first
                    share = (1.0 - c.busy[k]) if level < grants[j].level else 1.0
                    wait += share * o.alloc * 0.5 * o.block[o.idx]
            c.rate = f(got, c.mem[k], c.busy[k], c.cnt[k], c.dur[k], over, wait, g.slow)


    def _rates2(self, grants: list[Grant]) -> None:
        """:meth:`_rates` for two clients (the same comparisons and the same arithmetic, without the
        lists; a sum that starts at 0.0 is written from its first term, which it equals). The rates
        come from the module's :func:`rate`, looked up per call (tests replace it)."""
        c0, c1 = self.clients
        g0, g1 = grants
        run0, run1 = c0.phase == RUN, c1.phase == RUN
        c0.rate = c1.rate = 0.0
        co_run = self._co_run
        if run0 and run1:
            k0, k1 = c0.idx, c1.idx
            sm0, sm1 = c0.sm[k0], c1.sm[k1]
            s0, s1 = c0.alloc / sm0, c1.alloc / sm1
            band = c0.mb[k0] * (s0 if s0 < 1.0 else 1.0) + c1.mb[k1] * (s1 if s1 < 1.0 else 1.0)
            over = band if band > 1.0 else 1.0  # max(1, band)
            if not co_run:  # taking turns: no members held back, no waits
                c0.rate = rate(s0, c0.mem[k0], c0.busy[k0], c0.cnt[k0], c0.dur[k0], over, 0.0, g0.slow)
                c1.rate = rate(s1, c1.mem[k1], c1.busy[k1], c1.cnt[k1], c1.dur[k1], over, 0.0, g1.slow)
                return
            cap0, cap1 = g0.cap, g1.cap
            p0 = c0.alloc < (sm0 if sm0 <= cap0 else cap0) - 1e-9  # blocks pending: below min(demand, cap)
            p1 = c1.alloc < (sm1 if sm1 <= cap1 else cap1) - 1e-9
            for c, k, g, got, o, go, so, po in ((c0, k0, g0, s0, c1, g1, sm1, p1), (c1, k1, g1, s1, c0, g0, sm0, p0)):
                mix = c.mix[k]
                if mix is not None:  # member_ceiling beside the co-runner o
                    cap = g.cap
                    d_o = go.cap if go.cap < so else so
                    if g.level < go.level:
                        ceiling = -1.0
                    elif g.level == go.level:
                        sk = c.sm[k]
                        if (cap if cap < sk else sk) <= d_o:
                            ceiling = -1.0
                        else:
                            left = 1.0 - (d_o if d_o < 0.5 else 0.5)
                            ceiling = cap if cap < left else left
                    else:
                        left = 1.0 - (d_o if d_o < 1.0 else 1.0)
                        ceiling = cap if cap < left else left
                    if 1e-12 < ceiling < mix.top:
                        got = mix.share(ceiling)
                wait = 0.0
                if po and c.cnt[k] > 1.0:
                    share = (1.0 - c.busy[k]) if g.level < go.level else 1.0
                    wait = share * o.alloc * 0.5 * o.block[o.idx]
                c.rate = rate(got, c.mem[k], c.busy[k], c.cnt[k], c.dur[k], over, wait, g.slow)
        elif run0 or run1:
            c, g = (c0, g0) if run0 else (c1, g1)
            k = c.idx
            got = c.alloc / c.sm[k]
            band = c.mb[k] * (got if got < 1.0 else 1.0)
            over = band if band > 1.0 else 1.0
            if co_run:
                mix = c.mix[k]
                if mix is not None:
                    ceiling = g.cap
                    if 1e-12 < ceiling < mix.top:
                        got = mix.share(ceiling)
            c.rate = rate(got, c.mem[k], c.busy[k], c.cnt[k], c.dur[k], over, 0.0, g.slow)


def rate(share: float, mem: float, busy: float, count: float, dur: float, over: float, wait: float,
         slow: float = 1.0) -> float:
    """Progress rate of a kernel group beside others (1 = as alone).

    Its kernels' GPU time (``busy`` of its span alone) stretches by 1 / (slow · min(1, SM share of its
    demand)) and its memory-bound part (``mem``) by the DRAM oversubscription ``over`` = max(1, summed
    demand ÷ peak); each of its ``count`` − 1 later kernels first waits ``wait`` on average for SMs a
    co-runner's pending blocks won (running blocks are never preempted; the first kernel's wait is
    the mechanism's launch delay).
    Host gaps inside the span absorb the stretch: the group lasts max(span, stretched GPU time + waits).
    """
    gpu = busy * ((1.0 - mem) + mem * over) / (slow * (share if share < 1.0 else 1.0))
    if count > 1.0:
        gpu += (count - 1.0) * wait / dur
    return 1.0 / gpu if gpu > 1.0 else 1.0


def simulate(gpu: DeviceGpu, clients: Sequence[ClientSpec], mechanism: Mechanism, duration_s: float) -> RunStats:
    """Run ``clients`` on ``gpu`` under ``mechanism`` for ``duration_s`` simulated seconds."""
    if not duration_s > 0:
        raise ValueError(f"duration_s must be in (0, inf), got {duration_s}")
    return DeviceSim(gpu, clients, mechanism).run(duration_s)



