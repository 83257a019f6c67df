"""TGS (Wu et al., NSDI'23, "Transparent GPU Sharing in Container Clouds for Deep Learning Workloads"):
MPS-like concurrency, with the opportunistic (BE) client's kernel launches throttled by an adaptive
rate control driven by the production (HP) client's measured throughput.

From the authors' artifact (pkusys/TGS, ``hijack/src/high_priority_hijack_call.c`` and
``hijack/src/low_priority_hijack_call.c``) and from Tally's port of it, the baseline Tally's
evaluation ran (tally-project/tally at de153ca, ``src/tally/scheduler/tgs.cpp``):

- HP counts the thread blocks of every kernel it launches; every ``report_s`` (5 s) it reports the
  count of the last 5 s to BE's limit manager.
- BE counts the blocks it launches per ``be_window_s`` (50 ms) window; a kernel launches only while
  the window's count is <= the limit (the one that crosses it still launches whole), else BE sleeps
  in ``tick_s`` (10 ms) ticks until the window is reset.
- The limit manager (:class:`TgsControl`) first profiles HP's maximum rate (>= 5 reports, the limit
  held at 0), then adjusts the limit at each report, TCP-like: slow start (x1.5 while HP's rate is
  within 3 % of its max, else /1.5 and congestion avoidance); congestion avoidance (+max(0.025 % of
  the max rate, 1000) while within 3 %, else -max(8 %, 1000); a deviation >= 9 % divides by 10 and
  returns to slow start); 20 reports >= 12 % off lower the max by 20 % and halve the limit; a windowed
  rate (the largest mean of two consecutive of the last 5 reports) off the max by > 20 % restarts
  profiling; an idle HP (> 2 of the last 5 reports under 1000 blocks) lifts the limit.
- ``spin``: pkusys/TGS's limit manager blocks on the socket, so it steps once per report, the first at
  5 s (False, the default); Tally's port reads the shared counter in a loop with no wait, from the
  start (0 until HP's first report), so after every change it steps until its state repeats (at most
  ``spin_steps``). Tally's port also polls (``tick_s`` 0: BE resumes the moment its window is reset)
  and caps profiling at 100 steps (``max_profile_reports``).

A kernel group's blocks: SM demand x SMs x duration / block duration (one resident block per SM at a
time: choice, the engine's block model). BE's blocks are counted as it progresses (a throttled BE
launches about as fast as it runs), HP's at launch. Tally's port also keeps <= 20 BE kernels in flight;
the engine runs BE one kernel group at a time, so that rule is not modelled.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from gpusched_env.device.gpus import DeviceGpu
from gpusched_env.device.mechanism import READY, BaseMechanism, ClientSpec, ClientView, Grant

SLOW_START, CONG_AVOID = 0, 1
UPPER_LIMIT = 100_000_000_000_000  # pkusys/TGS low_priority_hijack_call.c: UPPER_LIMIT
SPENT = 1e-3  # choice: a window counts as spent within 0.1 % of a kernel's blocks (bounds the re-plans)


@dataclass(frozen=True)
class TgsConfig:
    report_s: float = 5.0  # pkusys/TGS high_priority_hijack_call.c: rate_monitor / rate_watcher, 5000 ms
    be_window_s: float = 0.05  # pkusys/TGS low_priority_hijack_call.c: rate_watcher, 50 ms
    tick_s: float = 0.01  # pkusys/TGS hijack.h: TIME_TICK 10 ms (0: poll, as Tally's port does)
    limit_init: float = 20000.0  # pkusys/TGS: LIMIT_INITIALIZER (blocks per 50 ms window)
    rate_min: float = 1000.0  # pkusys/TGS: RATE_MIN (blocks)
    threshold: float = 0.03  # pkusys/TGS update_rate_limit: threshold
    window: int = 5  # pkusys/TGS: WINDOW_SIZE (reports)
    profile_reports: int = 5  # pkusys/TGS: PROFILE_TIME
    max_profile_reports: int = 1_000_000  # pkusys/TGS: unbounded (a number no run reaches); Tally's port: MAX_PROFILE_TIME 100
    spin: bool = False  # pkusys/TGS: False (blocking read); Tally's port: True (a loop with no wait)
    spin_steps: int = 1_000_000  # choice: bound on the steps of one spin (the loop stops where its state repeats)

    def __post_init__(self) -> None:
        for k in ("report_s", "be_window_s", "limit_init", "rate_min", "threshold"):
            if not getattr(self, k) > 0:
                raise ValueError(f"tgs {k} must be in (0, inf), got {getattr(self, k)}")
        if not self.tick_s >= 0:
            raise ValueError(f"tgs tick_s must be in [0, inf), got {self.tick_s}")
        for k in ("window", "profile_reports", "max_profile_reports", "spin_steps"):
            if not (isinstance(getattr(self, k), int) and getattr(self, k) >= 1):
                raise ValueError(f"tgs {k} must be an integer >= 1, got {getattr(self, k)!r}")


def _rel(a: float, b: float) -> float:
    """(a - b) / b as C's doubles give it: b = 0 gives nan (a = 0) or +-inf."""
    if b != 0.0:
        return (a - b) / b
    return math.nan if a == 0.0 else math.copysign(math.inf, a)


class TgsControl:
    """BE's limit manager, one loop iteration per :meth:`step` (pkusys/TGS ``limit_manager`` and
    ``update_rate_limit``, Tally's port the same): HP's last reported block count in, BE's block limit
    per window out. ``max_rate`` is what HP sent when BE connected (its max so far; 0 at the start)."""

    def __init__(self, cfg: TgsConfig, max_rate: float = 0.0) -> None:
        self.cfg = cfg
        self.max_rate = max_rate
        self.window = [0.0] * cfg.window  # choice: C leaves it uninitialised; zeros
        self.limit = 0  # g_rate_limit = 0 while profiling
        self.profiling, self.t, self.cont = True, 1, False
        self.cnt, self.state, self.sign, self.diff_count = 0, -1, 0, 0
        self.recv_rate = 1.0

    def key(self) -> tuple:
        """The state that decides later steps (``cnt`` only up to where it stops mattering)."""
        return (self.limit, self.max_rate, tuple(self.window), self.profiling, self.t if self.profiling else 0,
                self.cont, min(self.cnt, 16), self.state, self.sign, self.diff_count)

    def _shift(self, rate: float) -> float:
        w = self.window
        best = 0.0
        for i in range(len(w) - 1, 0, -1):
            mean = (w[i] + w[i - 1]) / 2
            best = best if best > mean else mean
            w[i] = w[i - 1]
        w[0] = rate
        return best

    def step(self, recv: float, be_rate: float = 0.0) -> int:
        """One iteration on HP's report ``recv`` (blocks in the last report period); ``be_rate`` is BE's
        count of its last window (``g_current_rate``, in the limit's caps). Returns the limit."""
        self.recv_rate = recv = recv if recv >= 1.0 else 1.0
        mwr = self._shift(recv)
        md = _rel(mwr, self.max_rate)
        if self.profiling:
            if -0.05 <= md <= 0.05:
                self.max_rate = max(self.max_rate, mwr)
                self.cont = abs(int(self.max_rate - mwr)) < 1e-5  # C's int abs(): |difference| < 1 block
            else:
                self.max_rate = max(self.max_rate, mwr * 0.975) if md > 0.05 else min(self.max_rate, mwr * 1.025)
                self.cont = True
            self.t += 1
            cfg = self.cfg
            if not (self.t <= cfg.profile_reports or (self.cont and self.t <= cfg.max_profile_reports)):
                self.profiling = False
            return self.limit
        if -0.1 <= md <= 0.1:
            self.max_rate = max(self.max_rate, mwr)
        elif md > 0.2 or md < -0.2:
            self.max_rate = max(self.max_rate, mwr * 0.975) if md > 0.2 else min(self.max_rate, mwr * 1.025)
            self.profiling, self.t = True, 1  # goto profile (the limit is kept)
            return self.limit
        self.cnt += 1
        if self.cnt == 1:
            self.limit, self.state = int(self.cfg.limit_init), SLOW_START
            return self.limit
        zeros = sum(1 for w in self.window if w < 1000)
        if zeros <= self.cfg.window // 5 * 2 or self.cnt < 15:
            if zeros == 2 and self.cnt > 15:
                self.limit, self.state = int(self.cfg.limit_init), SLOW_START
            else:
                self._update(be_rate)
        else:  # HP idle: no limit
            self.limit, self.state = min(UPPER_LIMIT, max(int(3 * be_rate), 65536 * 65536)), SLOW_START
        return self.limit

    def _update(self, be_rate: float) -> None:
        """pkusys/TGS ``update_rate_limit`` (C's long long arithmetic: truncation)."""
        cfg, lim = self.cfg, self.limit
        delta = abs(_rel(self.recv_rate, self.max_rate))
        thr = cfg.threshold
        if self.state == SLOW_START:
            if delta <= thr:
                lim = min(int(lim * 1.5 + 1), min(UPPER_LIMIT, max(int(3 * be_rate), 1 << 40)))
            else:
                lim, self.sign, self.state = int(lim / 1.5), -1, CONG_AVOID
        elif self.state == CONG_AVOID:
            cap = min(UPPER_LIMIT, max(int(3 * be_rate), 65536 * 65536))
            if (self.sign == -1 and delta <= thr) or (self.sign == 1 and delta < thr):
                lim, self.sign = min(lim + max(int(self.max_rate * 0.00025), int(cfg.rate_min)), cap), 1
            else:
                lim, self.sign = min(lim - max(int(lim * 0.08), int(cfg.rate_min)), cap), -1
            if delta >= 3 * thr:
                self.state, lim = SLOW_START, int(lim / 10)
        if delta >= 0.12:
            self.diff_count += 1
            if self.diff_count >= 20:
                self.max_rate *= 0.8
                self.diff_count, self.state, lim = 0, SLOW_START, int(lim / 2)
        else:
            self.diff_count = 0
        self.limit = lim if lim > 0 else 0

    def report(self, recv: float, be_rate: float = 0.0) -> int:
        """A new HP report: one step (pkusys/TGS), or steps until the state repeats (Tally's port spins
        on the unchanged counter), at most ``spin_steps``."""
        seen: list[tuple] = []
        n = self.cfg.spin_steps if self.cfg.spin else 1
        while n > 0:
            self.step(recv, be_rate)
            n -= 1
            if n > 0 and self._additive(recv):  # the additive increase repeats unchanged: jump ahead
                inc = max(int(self.max_rate * 0.00025), int(self.cfg.rate_min))
                cap = min(UPPER_LIMIT, max(int(3 * be_rate), 65536 * 65536))
                jump = min(n, max(0, (cap - self.limit) // inc))
                self.limit, self.cnt, n = self.limit + jump * inc, self.cnt + jump, n - jump
            k = self.key()
            if k in seen:  # a fixed point or a 2-cycle: further spins change nothing that matters
                break
            seen = [seen[-1], k] if seen else [k]
        return self.limit

    def _additive(self, recv: float) -> bool:
        """The next steps on ``recv`` would each add the same increment (congestion avoidance, HP
        within the threshold, the window full of ``recv`` so the max rate stays)."""
        return (not self.profiling and self.state == CONG_AVOID and self.sign == 1 and self.cnt >= 15
                and self.recv_rate >= 1000 and all(w == self.recv_rate for w in self.window)
                and abs(_rel(self.recv_rate, self.max_rate)) < self.cfg.threshold
                and self.recv_rate <= self.max_rate and self.diff_count == 0)


class Tgs(BaseMechanism):
    name = "tgs"

    def __init__(self, cfg: TgsConfig | None = None) -> None:
        self.cfg = cfg or TgsConfig()

    def reset(self, clients: Sequence[ClientSpec], gpu: DeviceGpu) -> None:
        super().reset(clients, gpu)
        self.be = [c.role == "be" for c in clients]
        self.ctl = TgsControl(self.cfg)  # BE connects at the start: HP has no max rate yet (0)
        self.hp_blocks = 0.0  # HP's blocks in the current report period
        self.next_report = self.cfg.report_s
        self.win_end, self.win_used, self.be_rate = self.cfg.be_window_s, 0.0, 0.0
        self.blocked_at = -1.0  # when BE found its window spent (sleeping until resume_at)
        self.resume_at = 0.0
        self.seen: dict[int, tuple[float, int, float]] = {}  # BE client -> (sequence start, kernel, done)
        self.held = [Grant(False, c.sm_cap) for c in clients]
        if self.cfg.spin:  # Tally's port: the loop reads HP's count (0: nothing published yet) at once
            self.ctl.report(0.0)
        self.count = [c.seq.count.tolist() for c in clients]  # kernels per group

    def _blocks_per_s(self, c: ClientView, k: int) -> float:
        """Blocks per second of alone-time progress of kernel group ``k`` (choice: one block per SM)."""
        return c.sm[k] * self.gpu.sms / c.block[k]

    def on_launch(self, t: float, i: int, clients: Sequence[ClientView]) -> None:
        c = clients[i]
        if c.spec.role == "hp":
            k = c.idx
            self.hp_blocks += self._blocks_per_s(c, k) * c.dur[k]

    def _be_progress(self, i: int, c: ClientView) -> None:
        """Count the blocks BE ran since the last look (a group ends only at an event, so at most the
        rest of the previous group and the start of the current one)."""
        k = c.idx
        done = c.dur[k] - c.remaining  # progress kept while held; 0 before it starts
        prev = self.seen.get(i)
        if prev is not None:
            s0, k0, d0 = prev
            if (s0, k0) == (c.seq_start, k):
                self.win_used += (done - d0) * self._blocks_per_s(c, k)
            else:
                self.win_used += (c.dur[k0] - d0) * self._blocks_per_s(c, k0) + done * self._blocks_per_s(c, k)
        self.seen[i] = (c.seq_start, k, done)

    def plan(self, t: float, clients: Sequence[ClientView]) -> tuple[list[Grant], float]:
        cfg = self.cfg
        for i, c in enumerate(clients):
            if self.be[i]:
                self._be_progress(i, c)
        while t >= self.win_end - 1e-12:  # BE's 50 ms window ends: its count becomes its current rate
            self.be_rate, self.win_used = self.win_used, 0.0
            self.win_end += cfg.be_window_s
        while t >= self.next_report - 1e-12:  # HP reports its last period's blocks
            self.ctl.report(self.hp_blocks, self.be_rate)
            self.hp_blocks, self.next_report = 0.0, self.next_report + cfg.report_s
        grants = list(self.grants)
        wake = self.next_report
        for i, c in enumerate(clients):
            if not self.be[i] or c.phase < READY:
                continue
            if self.blocked_at >= 0 and t < self.resume_at - 1e-12:  # asleep
                grants[i] = self.held[i]
                wake = min(wake, self.resume_at)
                continue
            self.blocked_at = -1.0
            k = c.idx
            per_s = self._blocks_per_s(c, k)
            kernel = per_s * c.dur[k] / self.count[i][k]  # blocks of one kernel of the group
            left = self.ctl.limit + kernel - self.win_used  # launches while used <= limit; the last one whole
            if left <= SPENT * kernel:  # spent: sleep in ticks until the window is reset
                self.blocked_at = t
                end = self.win_end
                self.resume_at = end if cfg.tick_s <= 0 else t + math.ceil((end - t) / cfg.tick_s - 1e-9) * cfg.tick_s
                grants[i] = self.held[i]
                wake = min(wake, self.resume_at)
            else:  # look again once the rest could be spent (progress is at most 1 s per s), and at
                x = t + left / per_s  # the window's end if that may come first
                wake = min(wake, x, self.win_end) if x < self.next_report else wake
        return grants, wake
