"""A generic queue scheduler: an order key + a placement + a few switches (Blox-style separation).

``QueueScheduler(order, placement, sticky, preemptive, round_s, head_of_line)`` runs in one of two
modes; it never looks at its own name.

**Event-driven** (``round_s=None``; e.g. ``fifo``, ``sjf``): at every decision point walk the pending
queue in key order and start each job the placement can place on free GPUs. With
``head_of_line=True`` (default) the walk stops at the first job that cannot be placed (strict
FIFO/SJF order, no backfilling: a documented choice that matches PAL's baselines and Blox); with
``head_of_line=False`` it skips that job and tries the later ones. Nothing is ever preempted.
Cost when nothing fits: only the head job is checked (one count of the free mask).

**Round-based** (``round_s`` set; e.g. ``las``, ``srtf``, ``tiresias``, PAL's study baselines): at
each round, sort running + pending jobs by the key (only pending ones if ``preemptive=False``, the
running ones then keep their GPUs), select the longest prefix whose GPU demand fits the usable GPUs
(with ``head_of_line=False``: skip jobs that do not fit and keep going), preempt running jobs that
were not selected, then

- ``sticky=True``: selected running jobs keep their GPUs; the selected pending jobs are placed,
  in order, on the free GPUs (including those the preempted jobs released);
- ``sticky=False``: all GPUs are released and every selected job is placed again, in order. A
  running job placed on exactly its current GPUs gets no decision (no restart); one placed
  elsewhere gets a :class:`Migrate`; one that could not be placed is preempted.

A job the placement cannot place stops the round (head-of-line) or is skipped.
``placement_order`` optionally re-sorts the selected jobs (stable) before placement (PAL sorts
the selected FIFO prefix by performance class A<B<C<D).

**Idle rounds** (performance, no change of decisions): a round is a pure function of the active jobs
(pending + running), the running allocations, the up mask and ``view.slowdown`` when the order key is
static and the placement is deterministic (``placement.deterministic``; the random placement is
not). Applying a round's decisions to its own outcome gives no decision (every selected job is
already where it would be placed; the head-of-line job still does not fit). So after each round the
scheduler remembers the state its decisions lead to, and the next round returns ``[]`` at once
when the view still shows exactly that state (no arrival, completion, failure or factor change).

Round detection: the backend calls ``decide`` every ``round_s`` seconds and, if ``events`` is True,
at events too. A call is a round when at least ``round_s`` (minus 1 ms) has passed since the last
round (the first call is a round): :class:`gpusched_env.rounds.RoundClock`, the rule Cluster-v1
uses too. With ``events=True`` the calls between rounds run a fill-only pass: pending jobs in key
order onto free GPUs, no preemption (so arrivals and freed GPUs are used before the next round).
With ``events=False`` every call is a round.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable, Iterable, Iterator

import numpy as np

from gpusched.baselines.ordering import Key, OrderKey
from gpusched_env.placement import GpuSet, Placement, PlacementContext
from gpusched_env.rounds import RoundClock
from gpusched_env.types import WHOLE_GPU, Decision, Job, Migrate, Preempt, Start
from gpusched_env.view import ClusterView

PlaceBatch = Callable[[list[Job], PlacementContext, bool], list[GpuSet | None]]
"""``place_batch(jobs, ctx, stop_at_none)`` of a placement that has one: ``place`` for each job in
turn, each placed job's GPUs taken from ``ctx.free``; with ``stop_at_none`` the list ends at the
first job that cannot be placed (included, as None)."""

_new = object.__new__
_slots = vars(Start)
_set_job, _set_gpus, _set_sharing = _slots["job_id"].__set__, _slots["gpus"].__set__, _slots["sharing"].__set__
"""A :class:`Start` built field by field through its slots (what the frozen dataclass's ``__init__``
does, without its call and ``object.__setattr__`` look-ups; the same object)."""


def _arrival(job: Job) -> tuple[float, int]:
    return (job.arrival_s, job.job_id)


def _first(item: tuple[Key, Job]) -> Key:
    return item[0]


def _merge(first: list[tuple[Key, Job]], second: Iterable[tuple[Key, Job]]) -> Iterator[Job]:
    """The jobs of two key-sorted (key, job) sequences in key order, lazily (keys are distinct:
    every key ends with the job id)."""
    i, n = 0, len(first)
    for k, job in second:
        while i < n and first[i][0] < k:
            yield first[i][1]
            i += 1
        yield job
    for _, job in first[i:]:
        yield job


class _PendingOrder:
    """Queued jobs sorted by the order key, kept between calls (so SJF, SRTF, LAS and Tiresias do
    not re-key and re-sort the whole queue at every decision point).

    Valid for keys that do not change while a job waits (``pending_static``: they depend on the job
    and on progress, which only moves while a job runs). A job is (re)keyed when it enters the
    queue: the calls read what entered since the last one from ``view.enqueued`` (arrivals,
    preemptions, failure requeues, whoever caused them). Entries of jobs that have left the queue
    since (started, finished) are dropped when met. Rebuilt when the counts show something is
    missing, or to purge stale entries.
    """

    def __init__(self, key: OrderKey) -> None:
        self.key = key
        self.entries: list[tuple[Key, int]] = []  # (key, job id), sorted
        self.key_of: dict[int, Key] = {}  # job id -> its key in ``entries``
        self.seen = -1  # len(view.enqueued) at the last call; -1: rebuild

    def _drop(self, jid: int) -> None:
        k = self.key_of.pop(jid, None)
        if k is not None:
            entries = self.entries
            i = bisect.bisect_left(entries, (k, jid))
            del entries[i]

    def _rebuild(self, view: ClusterView) -> None:
        self.key_of = {j.job_id: self.key(view, j) for j in view.pending}
        self.entries = sorted((k, jid) for jid, k in self.key_of.items())

    def _update(self, view: ClusterView) -> None:
        log = view.enqueued
        if self.seen >= 0:
            running = view.running
            for jid in log[self.seen:]:
                self._drop(jid)
                if jid in running:
                    continue  # queued and started again since
                try:
                    job = view.job(jid)
                except KeyError:  # finished since
                    continue
                k = self.key_of[jid] = self.key(view, job)
                bisect.insort(self.entries, (k, jid))
        n_pend = len(view.pending)
        if self.seen < 0 or len(self.key_of) < n_pend or len(self.key_of) > 2 * n_pend + 1024:
            self._rebuild(view)
        self.seen = len(log)

    def iter_pending(self, view: ClusterView) -> Iterable[Job]:
        """The queued jobs in key order (lazily: a caller that stops early pays for what it read)."""
        self._update(view)
        running = view.running
        entries = self.entries
        k = 0
        while k < len(entries):
            jid = entries[k][1]
            if jid in running:  # started since it was keyed: re-keyed when it returns to the queue
                del self.key_of[jid]
                del entries[k]
                continue
            try:
                job = view.job(jid)
            except KeyError:  # finished
                del self.key_of[jid]
                del entries[k]
                continue
            yield job
            k += 1

    def keyed_pending(self, view: ClusterView) -> Iterable[tuple[Key, Job]]:
        """(key, job) of the queued jobs in key order."""
        for job in self.iter_pending(view):
            yield self.key_of[job.job_id], job


class _RoundOutcome:
    """The cluster state a round's decisions lead to (for the idle-round check).

    The queue is compared by counts, not by ids (its length can be in the thousands): a job leaves
    the queue only by a start, and every job that enters it is logged in ``view.enqueued``. So when
    the log holds exactly the entries the round's preemptions add and the queue is as long as
    predicted, no job entered since, none left but by the round's starts, and the queue is the one
    predicted."""

    __slots__ = ("n_pending", "n_enqueued", "running", "up", "slowdown")

    def __init__(
        self, n_pending: int, n_enqueued: int, running: dict[int, GpuSet], up: bytes, slowdown: np.ndarray
    ) -> None:
        self.n_pending, self.n_enqueued = n_pending, n_enqueued
        self.running, self.up, self.slowdown = running, up, slowdown

    @classmethod
    def after(cls, view: ClusterView, decisions: list[Decision]) -> _RoundOutcome:
        running = {jid: tuple(a.gpus) for jid, a in view.running.items()}
        n_pending, n_enqueued = len(view.pending), len(view.enqueued)
        for d in decisions:
            if isinstance(d, Preempt):
                del running[d.job_id]
                n_pending += 1
                n_enqueued += 1
            else:  # Start or Migrate
                if d.job_id not in running:
                    n_pending -= 1
                running[d.job_id] = tuple(d.gpus)
        up, slowdown = np.asarray(view.up).tobytes(), np.array(view.slowdown)
        return cls(n_pending, n_enqueued, running, up, slowdown)

    def matches(self, view: ClusterView) -> bool:
        running = view.running
        if len(running) != len(self.running) or len(view.pending) != self.n_pending:
            return False
        if len(view.enqueued) != self.n_enqueued:
            return False
        mine = self.running
        for jid, alloc in running.items():
            g = mine.get(jid)
            if g is None or tuple(alloc.gpus) != g:
                return False
        if np.asarray(view.up).tobytes() != self.up:
            return False
        s = view.slowdown
        return bool(np.array_equal(s, self.slowdown))


class QueueScheduler:
    """Order x placement x (sticky, preemptive, round_s, head_of_line); see the module docstring."""

    def __init__(
        self,
        name: str,
        order: OrderKey,
        placement: Placement,
        *,
        sticky: bool = True,
        preemptive: bool = False,
        round_s: float | None = None,
        head_of_line: bool = True,
        events: bool = True,
        placement_order: Callable[[Job], float] | None = None,
    ) -> None:
        if round_s is not None and round_s <= 0:
            raise ValueError(f"{name}.round_s must be > 0, got {round_s}")
        if round_s is None and not events:
            raise ValueError(f"{name}: an event-driven scheduler (round_s=None) needs events=True")
        if not sticky and not preemptive:
            raise ValueError(f"{name}: sticky=False re-places running jobs, so it needs preemptive=True")
        self.name = name
        self.order = order
        self.placement = placement
        self.sticky = sticky
        self.preemptive = preemptive
        self.round_s = None if round_s is None else float(round_s)
        self.head_of_line = head_of_line
        self.events = events
        self.placement_order = placement_order
        self._clock = RoundClock(round_s)
        pending_static = getattr(order, "pending_static", order.static)
        self._cache = _PendingOrder(order) if pending_static and not order.is_arrival_order else None
        self._memo_ok = bool(order.static and getattr(placement, "deterministic", False))
        self._memo: _RoundOutcome | None = None
        # non-sticky rounds place every selected job afresh on the same free GPUs: with a
        # deterministic placement, the jobs that lead the order as in the last round get the same GPUs
        self._replay_ok = not sticky and bool(getattr(placement, "deterministic", False))
        self._replay: tuple[bytes, list[tuple[int, GpuSet | None]]] | None = None
        # a placement that places a whole sequence in one call (PAL's compiled placement)
        self._batch: PlaceBatch | None = getattr(placement, "place_batch", None)

    # -- entry point -------------------------------------------------------------------------
    def decide(self, view: ClusterView) -> list[Decision]:
        if self.round_s is None:
            return self._fill(view)
        now = view.now
        if not self.events or self._clock.tick(now):
            return self._round(view)
        return self._fill(view)

    def can_start(self, view: ClusterView) -> bool:
        """False only where :meth:`decide` returns ``[]`` without reading or changing anything else:
        an event-driven pass with nothing queued, no free GPU, or (head-of-line, arrival order) a
        queue head needing more GPUs than are free. Reads only ``view.pending`` and ``view.n_free``
        (:func:`gpusched_env.policy.run_policy` skips the decision points it rules out)."""
        if self.round_s is not None:
            return True
        pend = view.pending
        if not pend:
            return False
        n_free = view.n_free
        if n_free == 0:
            return False
        return not (self.head_of_line and self.order.is_arrival_order and pend[0].num_gpus > n_free)

    # -- non-preemptive pass -----------------------------------------------------------------
    def _pending_in_order(self, view: ClusterView) -> Iterable[Job]:
        if self.order.is_arrival_order:
            return view.pending
        if self._cache is not None:
            return self._cache.iter_pending(view)
        return sorted(view.pending, key=lambda j: self.order(view, j))

    def _fill(self, view: ClusterView) -> list[Decision]:
        pend = view.pending
        if not pend:
            return []
        n_free = view.n_free  # = count of view.free (kept by the backend)
        if n_free == 0:
            return []
        if self.head_of_line and self.order.is_arrival_order and pend[0].num_gpus > n_free:
            return []  # fast path: the head cannot start
        ctx = PlacementContext(view)
        out: list[Decision] = []
        for job in self._pending_in_order(view):
            if n_free == 0:
                break
            gpus = self.placement.place(job, ctx) if job.num_gpus <= n_free else None
            if gpus is None:
                if self.head_of_line:
                    break
                continue
            ctx.take(gpus)
            n_free -= len(gpus)
            d = _new(Start)  # Start(job.job_id, gpus) without the frozen dataclass's __init__
            _set_job(d, job.job_id)
            _set_gpus(d, gpus)
            _set_sharing(d, WHOLE_GPU)
            out.append(d)
        return out

    # -- round -------------------------------------------------------------------------------
    def _select(self, jobs: Iterable[Job], capacity: int) -> list[Job]:
        selected: list[Job] = []
        used = 0
        for job in jobs:
            if used + job.num_gpus <= capacity:
                selected.append(job)
                used += job.num_gpus
            elif self.head_of_line:
                break
        return selected

    def _round(self, view: ClusterView) -> list[Decision]:
        running = view.running
        if not view.pending and (self.sticky or not running):
            return []  # nothing waits: a sticky round cannot change anything
        if self._memo is not None and self._memo.matches(view):
            return []  # same state as the last round left: same (empty) outcome
        out = self._round_decisions(view)
        if self._memo_ok:
            self._memo = _RoundOutcome.after(view, out)
        return out

    def _replay_from(self, ctx: PlacementContext, view: ClusterView) -> list[tuple[int, GpuSet | None]] | None:
        """Last round's placements, in order, when this round starts from the same free GPUs and
        slowdown profile (a deterministic placement then repeats them for the same leading jobs)."""
        if not self._replay_ok:
            return None
        sig = ctx.free.tobytes() + np.ascontiguousarray(view.slowdown).tobytes()
        last = self._replay
        self._replay = (sig, [])
        return last[1] if last is not None and last[0] == sig else None

    def _place_all(
        self, jobs: list[Job], ctx: PlacementContext, view: ClusterView, placed: dict[int, GpuSet]
    ) -> None:
        """Place ``jobs`` in order on ``ctx`` into ``placed``; a job that cannot be placed stops the
        rest (head-of-line) or is skipped. The leading jobs that repeat last round's sequence on the
        same free GPUs get last round's GPUs; the others go to the placement, all in one call when
        it has ``place_batch``."""
        replay = self._replay_from(ctx, view)
        record: list[tuple[int, GpuSet | None]] = []
        i = 0
        if replay is not None:
            for job, (jid, gpus) in zip(jobs, replay, strict=False):
                if job.job_id != jid:
                    break
                record.append((jid, gpus))  # same job on the same free GPUs as last round: same GPUs
                i += 1
                if gpus is None:
                    if self.head_of_line:
                        break
                    continue
                ctx.take(gpus)
                placed[jid] = gpus
            if record and record[-1][1] is None and self.head_of_line:
                i = len(jobs)  # stopped where last round stopped
        rest = jobs[i:]
        if self._batch is not None:
            results = self._batch(rest, ctx, self.head_of_line)
        else:
            results = []
            for job in rest:
                gpus = self.placement.place(job, ctx)
                results.append(gpus)
                if gpus is not None:
                    ctx.take(gpus)
                elif self.head_of_line:
                    break
        for job, gpus in zip(rest, results, strict=False):
            record.append((job.job_id, gpus))
            if gpus is not None:
                placed[job.job_id] = gpus
        if self._replay is not None:
            self._replay = (self._replay[0], record)

    def _round_decisions(self, view: ClusterView) -> list[Decision]:
        running = view.running
        up = np.asarray(view.up)
        key = self.order
        run_jobs = [view.job(j) for j in running] if self.preemptive else []
        if self.preemptive:
            capacity = int(np.count_nonzero(up))
        else:
            capacity = int(np.count_nonzero(up)) - sum(len(a.gpus) for a in running.values())
        if key.is_arrival_order and self.head_of_line:
            # pending is already in arrival order: merge lazily and stop at the first misfit
            run_jobs.sort(key=_arrival)
            selected = self._select(heapq.merge(run_jobs, view.pending, key=_arrival), capacity)
        elif self._cache is not None:
            # the queue is kept in key order: merge it lazily with the (few) running jobs
            keyed_run = sorted(((key(view, j), j) for j in run_jobs), key=_first)
            selected = self._select(_merge(keyed_run, self._cache.keyed_pending(view)), capacity)
        else:
            active = run_jobs + list(view.pending)
            active.sort(key=lambda j: key(view, j))
            selected = self._select(active, capacity)
        chosen = {j.job_id for j in selected}
        preempt = [jid for jid in running if self.preemptive and jid not in chosen]
        if self.placement_order is not None:
            selected.sort(key=self.placement_order)

        if self.sticky:  # the GPUs of the preempted jobs are free again
            n_res = np.array(view.n_resident, dtype=np.int64)
            for jid in preempt:
                n_res[list(running[jid].gpus)] -= 1
            ctx = PlacementContext(view, up & (n_res == 0))
        else:  # every running job releases its GPUs: every up GPU is free
            ctx = PlacementContext(view, up)

        placed: dict[int, GpuSet] = {}
        to_place = [j for j in selected if j.job_id not in running] if self.sticky else selected
        self._place_all(to_place, ctx, view, placed)  # selected running jobs of a sticky round keep their GPUs
        out: list[Decision] = [Preempt(jid) for jid in preempt]
        if not self.sticky:
            for jid in running:
                if jid in chosen and jid not in placed:
                    out.append(Preempt(jid))  # selected but not re-placed (head-of-line stop)
        for jid, gpus in placed.items():
            if jid in running:
                if set(gpus) != set(running[jid].gpus):
                    out.append(Migrate(jid, gpus))
            else:
                out.append(Start(jid, gpus))
        return out
