"""Observation, action mask and action decoding of one decision point — shared by the env and the
agent adapter (:mod:`gpusched.agents.adapter`), so a model sees exactly the same numbers in both.

A :class:`DecisionBuilder` wraps a read-only :class:`~gpusched_env.view.ClusterView` and the
decisions taken so far at this decision point (a working copy of free GPUs / job slots). ``observe``
returns ``(obs, mask)``; ``act(a)`` turns a valid action into a :class:`~gpusched_env.types.Start`.

Queue window (``K`` slots): the first ``fifo_slots`` pending jobs in arrival order, then the
pending jobs with the least work estimate (``work_iters`` x the model's base iteration time, oracle
knowledge as SJF) not already shown; jobs started in this batch leave the window. So both FIFO
heuristics (PAL, packed) and shortest-first ones (SJF) find their choice in the window, and a
policy may skip the head of the line (backfill).

Observation (float32, every entry finite and clipped to ``[-1, 10]``), concatenated:

- per node (n_nodes x 8): working free-GPU share, up share, mean slowdown factor of its free GPUs
  per class A..D (``sf - 1``, 0 when none is free), mean GPU power / 300 W, mean job slots used
  (``n_resident / max_jobs_per_gpu``);
- per window slot (K x 11): present, ``log2(1 + GPUs) / log2(1 + n_gpus)``, class one-hot (4),
  ``log1p(wait h)``, ``log1p(work estimate h)``, fits an exclusive option now, fits
  ``least_interference`` now, GPUs / working free GPUs (clipped);
- global (8): time of day (sin, cos), busy-GPU share, working free share, ``log1p(queue)/5``,
  ``log1p(running)/5``, queued GPU demand / n_gpus (clipped), ``log1p(starts in this batch)/3``.
"""

from __future__ import annotations

import bisect
import math
from array import array
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import islice
from operator import attrgetter
from typing import Any

import numpy as np

from gpusched_env.catalog import base_iter_s
from gpusched_env.compiled import entry_point
from gpusched_env.envs.kernels import (
    ARRIVAL_COL,
    GLOBAL_FEATURES,
    NODE_FEATURES,
    OBS_HIGH,
    OBS_LOW,
    SLOT_FEATURES,
    fill_observation,
)
from gpusched_env.envs.options import MASK_MEMO_MAX, OptionSet, WorkingState
from gpusched_env.placement import PlacementContext
from gpusched_env.topology import Topology
from gpusched_env.types import WHOLE_GPU, Job, Start
from gpusched_env.view import ClusterView

_FIELDS = tuple(map(attrgetter, ("job_id", "num_gpus", "work_iters", "mem_gb", "arrival_s", "model", "perf_class",
                                  "gpu_type")))

__all__ = ["OBS_HIGH", "OBS_LOW", "DecisionBuilder", "JobCache", "obs_size"]
_DAY_S = 86400.0
_new = object.__new__
_set_job, _set_gpus, _set_sharing = (vars(Start)[n].__set__ for n in ("job_id", "gpus", "sharing"))
"""A :class:`Start` built field by field through its slots (what the frozen dataclass's ``__init__``
does, without its call and ``object.__setattr__`` look-ups; the same object)."""
_F32 = np.dtype(np.float32)


def obs_size(n_nodes: int, k: int) -> int:
    return n_nodes * NODE_FEATURES + k * SLOT_FEATURES + GLOBAL_FEATURES


def count_table(fit: int, n_free: int) -> bytes:
    """The 256-byte table mapping a GPU count to ``fit`` if it is at most ``n_free`` (>= 0), else to 0
    (``bytes([fit if g <= n_free else 0 for g in range(256)])``, in two C calls)."""
    n = min(n_free + 1, 256)
    return bytes((fit,)) * n + bytes(256 - n)


class JobCache:
    """Static numbers kept across decision points of one run: per job (dense arrays by job id:
    work estimate in hours, GPUs, class, the static slot features with the arrival in hours in
    column ``ARRIVAL_COL``), filled for the whole
    run at reset by the env (:meth:`fill`) or as jobs are first seen (:meth:`see`), and whether any
    known job constrains its GPUs (type or memory), which turns the exact fit check on.

    Filled for the whole run, it also ranks the run's jobs by (work estimate, arrival, id) — the
    window's least-work order, ties in queue order — and keeps the ranks of the queued jobs sorted
    from one decision point to the next (:meth:`queue_ranks`): new queue entries are read from the
    view's ``enqueued``, started jobs are reported by the env (:meth:`dequeued`), and any other
    change (a count that does not match the queue) rebuilds the list. A decision point then reads
    its least-work jobs from the front of that list instead of sorting its queue."""

    def __init__(self) -> None:
        self._layout: _Layout | None = None
        self.clear()

    def clear(self) -> None:
        self.slot = np.zeros((0, SLOT_FEATURES))  # static slot features by job id (fits: 0; arrival h)
        self.work = np.full(0, np.nan)
        self.gpus = np.zeros(0, dtype=np.int64)
        self.cls = np.zeros(0, dtype=np.int64)
        self.mem = np.zeros(0)
        self.gpus_l: list[int] = []  # Python mirrors of gpus, mem and work (scalar reads in the
        self.mem_l: list[float] = []  # mask and the window)
        self.work_l: list[float] = []
        self.constrained = False
        self._seen: set[int] = set()
        self.whole_run = False  # every job the run will show is known (skip the check in see)
        self.rank_l: list[int] | None = None  # by job id: rank by (work, arrival, id) in the run
        self.qrank_l: list[int] = []  # by job id: rank by (arrival, id), the queue's own order
        self.by_rank: list[int] = []  # job id of each rank
        self.qrank_by_rank: list[int] = []  # qrank_l of each rank's job (one read less per scanned rank)
        self._ranked: list[int] = []  # ranks of the queued jobs, ascending
        self._enq: Sequence[int] | None = None  # the state's ``enqueued`` list that _ranked follows
        self._enq_seen = 0  # entries of it already in _ranked
        self.rebuilds = 0  # times _ranked was rebuilt from a queue (once per run when in step)

    def layout(self, topo: Topology, max_jobs: int) -> _Layout:
        """The observation constants of ``topo`` (kept across runs on the same topology)."""
        lay = self._layout
        if lay is None or lay.topo is not topo or lay.max_jobs != max_jobs:
            lay = self._layout = _Layout(topo, max_jobs)
        return lay

    def _grow(self, top: int) -> None:
        size = max(top, 2 * self.work.size)
        for name, fill in (("work", np.nan), ("gpus", 0), ("cls", 0), ("mem", 0.0)):
            old = getattr(self, name)
            grown = np.full(size, fill, dtype=old.dtype)
            grown[: old.size] = old
            setattr(self, name, grown)
        slot = np.zeros((size, SLOT_FEATURES))
        slot[: self.slot.shape[0]] = self.slot
        self.slot = slot
        grow = size - len(self.gpus_l)
        self.gpus_l += [0] * grow
        self.mem_l += [0.0] * grow
        self.work_l += [math.nan] * grow

    def fill(self, jobs: Sequence[Job], topo: Topology, whole_run: bool = False) -> None:
        """Record the static numbers of ``jobs`` (one array operation per field; a run's whole
        job list at reset, ``whole_run=True``, or the jobs a view shows that are not known yet)."""
        first = whole_run and not self._seen
        self.whole_run |= whole_run
        self.rank_l = None  # ranked below when these are the run's jobs
        self._enq = None
        if not jobs:
            return
        n = len(jobs)
        # one list per field, read by attrgetter over the jobs (no Python frame per job: a reset fills
        # a run's thousands; and no tuple per job, which the collector would have to traverse)
        id_t, gpus_t, work_t, mem_t, arrival_t, models, classes, types = (list(map(f, jobs)) for f in _FIELDS)
        ids = np.array(id_t, dtype=np.int64)
        top = int(ids.max()) + 1
        if top > self.work.size:
            self._grow(top)
        per_model = {m: base_iter_s(m) for m in dict.fromkeys(models)}
        cls_of = {c: j.class_index for c, j in dict(zip(classes, jobs, strict=True)).items()}
        gpus = np.array(gpus_t, dtype=np.int64)
        cls = np.fromiter(map(cls_of.__getitem__, classes), dtype=np.int64, count=n)
        work = np.array(work_t, dtype=np.float64)
        work *= np.fromiter(map(per_model.__getitem__, models), dtype=np.float64, count=n)
        work /= 3600.0
        mem = np.array(mem_t, dtype=np.float64)
        arrival = np.array(arrival_t, dtype=np.float64)
        self.work[ids] = work
        self.gpus[ids] = gpus
        self.cls[ids] = cls
        self.mem[ids] = mem
        if first:  # the lists mirror the arrays: read them whole (the same values, one C call each)
            self.gpus_l, self.mem_l, self.work_l = self.gpus.tolist(), self.mem.tolist(), self.work.tolist()
        else:
            gpus_l, mem_l, work_l = self.gpus_l, self.mem_l, self.work_l
            for i, g, m, w in zip(id_t, gpus.tolist(), mem.tolist(), work.tolist(), strict=True):
                gpus_l[i] = g
                mem_l[i] = m
                work_l[i] = w
        block = np.zeros((len(jobs), SLOT_FEATURES))
        block[:, 0] = 1.0
        block[:, 1] = np.log2(1.0 + gpus) / math.log2(1.0 + topo.n_gpus)
        block[np.arange(len(jobs)), 2 + cls] = 1.0
        block[:, ARRIVAL_COL] = arrival / 3600.0
        block[:, 7] = np.log1p(work)
        block[:, 10] = gpus  # scaled by 1 / free GPUs when observed
        self.slot[ids] = block
        min_mem = topo.min_gpu_mem_gb
        self.constrained |= bool((mem > min_mem).any()) or types.count(None) != n
        self._seen.update(id_t)
        if first:
            by_rank = ids[np.lexsort((ids, arrival, work))]
            rank = np.full(self.work.size, -1, dtype=np.int64)
            rank[by_rank] = np.arange(len(jobs))
            qrank = np.full(self.work.size, -1, dtype=np.int64)
            qrank[ids[np.lexsort((ids, arrival))]] = np.arange(len(jobs))
            self.rank_l, self.qrank_l, self.by_rank = rank.tolist(), qrank.tolist(), by_rank.tolist()
            self.qrank_by_rank = qrank[by_rank].tolist()

    def queue_ranks(self, view: ClusterView) -> list[int] | None:
        """The ranks of the view's queued jobs, ascending (a list this cache keeps updating: copy
        it to keep it); None when the run's jobs are not ranked (not filled for the whole run)."""
        return self._queue_ranks(view.enqueued, view.pending_ids)

    def _queue_ranks(self, enq: Sequence[int], ids: Sequence[int]) -> list[int] | None:
        """:meth:`queue_ranks` of a queue ``ids`` and its log of entries ``enq`` (the view's)."""
        rank_l = self.rank_l
        if rank_l is None:
            return None
        ranked = self._ranked
        if enq is not self._enq:  # another run's state: start from its queue
            self._enq, self._enq_seen = enq, len(enq)
            ranked[:] = sorted(map(rank_l.__getitem__, ids))
            self.rebuilds += 1
            return ranked
        if len(enq) > self._enq_seen:
            for i in enq[self._enq_seen:]:
                bisect.insort(ranked, rank_l[i])
            self._enq_seen = len(enq)
        if len(ranked) != len(ids):  # left the queue unreported: rebuild
            ranked[:] = sorted(map(rank_l.__getitem__, ids))
            self.rebuilds += 1
        return ranked

    def dequeued(self, ids: Iterable[int]) -> None:
        """The jobs ``ids`` left the queue (started); a job not in the list is ignored."""
        rank_l, ranked = self.rank_l, self._ranked
        if rank_l is None or self._enq is None:
            return
        for i in ids:
            r = rank_l[i]
            at = bisect.bisect_left(ranked, r)
            if at < len(ranked) and ranked[at] == r:
                del ranked[at]

    def see(self, ids: Sequence[int], view: ClusterView) -> None:
        """Make sure the jobs ``ids`` (all in the view's system) are known."""
        if not self.whole_run and not self._seen.issuperset(ids):
            seen = self._seen
            self.fill([view.job(i) for i in ids if i not in seen], view.topology)


class _Layout:
    """Per-topology constants of the observation (one per :class:`JobCache`)."""

    def __init__(self, topo: Topology, max_jobs: int) -> None:
        self.topo, self.max_jobs = topo, max_jobs
        self.n_gpus = topo.n_gpus
        self.gpu_node = np.ascontiguousarray(topo.gpu_node, dtype=np.int64)
        inv = 1.0 / topo.node_sizes
        # rows: free and up GPU shares, mean GPU power / 300 W, job slots used (one kernel argument)
        self.node_scale = np.ascontiguousarray(np.stack([inv, inv / 300.0, inv / max_jobs]), dtype=np.float64)
        self.size = topo.n_nodes * NODE_FEATURES


class DecisionBuilder:
    """Observation + mask + action decoding at one decision point (see the module docstring).

    Aimed at every candidate decision point (the env keeps one per run and re-aims it with
    :meth:`aim`, so ``env.builder`` of a finished point shows the next point; read a point's
    ``decisions`` before it ends), so it does little up front: the queue window, its fit
    checks, the mask and the observation are computed on demand and cached until the next action;
    the working copy of the cluster (:class:`WorkingState`) is made at the first action. The window
    and its fit checks are short Python lists (a handful of jobs: scalar work is cheaper than numpy
    calls at that size); the observation is filled by one compiled call
    (:mod:`gpusched_env.envs.kernels`).
    """

    incremental_window = True  # after a start, continue the window's ranked scan (False: rescan)
    carried_window = True  # at the next point, carry the last point's window over (False: rescan)
    reuse_working_state = True  # a point's working copy made anew in the last one's objects (False: new)

    def __init__(
        self, view: ClusterView, options: OptionSet, k: int, fifo_slots: int, cache: JobCache
    ) -> None:
        self.options = options
        self.k = k
        self.fifo_slots = min(fifo_slots, k)
        self.cache = cache
        self.n_opts = len(options)
        self.done_action = k * self.n_opts
        self._need_sh = not options.all_exclusive
        self._masks = options.mask_memo(k)
        # the kernel's window argument: k job ids (-1: no job), then k fit codes, written into one
        # buffer per builder (array slices: no per-element conversion) that a numpy view reads
        self._win_buf = array("q", [-1] * (2 * k))
        self._win_np = np.frombuffer(self._win_buf, dtype=np.int64)
        self._no_job = [-1] * k
        self._code_rows: dict[bytes, array[int]] = {}  # fit codes padded to k, as int64 rows
        self._tables: dict[int, bytes] = {}  # count-only fit codes by GPU count, per free-GPU count
        self._state: object = None  # the cluster state the per-state constants below were read for
        # fill_observation's compiled function for the argument types of a point without and with a
        # working copy (the view's read-only arrays or the copy's own: two signatures), or None
        # before the first call (see gpusched_env.compiled.entry_point)
        self._fill: dict[bool, Callable[..., Any] | None] = {True: None, False: None}
        self._scanned: tuple[int, int, list[int]] | None = None  # the last ranked scan (see _refresh)
        self._gone: set[int] = set()
        self._mark = (0, -1, 0, 0)  # at the last aim: queue length, its last queue rank, enqueued, dequeued
        self.view = view
        self._power_w = view.gpu_power_w
        self._spare: WorkingState | None = None  # the working copy of the last point that made one
        self.aim(view)

    def aim(self, view: ClusterView) -> DecisionBuilder:
        """Point this builder at a new decision point (``view``), forgetting the last one's window,
        decisions and working copy: the env keeps one builder per run and re-aims it at every
        candidate point. The builder reads the view's queue and the cache's ranked queue in place
        (no copies): it is valid until the backend applies a batch or the cache moves to another
        point, as the view itself is."""
        if view is not self.view:
            self._power_w = view.gpu_power_w  # (a view's arrays stay its own)
        self.view = view
        cache = self.cache
        state = view._state  # noqa: SLF001 (same package: per-state constants are read once per state)
        # the last point's window, to carry over (see _carry) when the queue only lost its starts
        # and gained entries at its tail since
        last = self._scanned if state is self._state and self.carried_window else None
        started = self._gone
        if state is not self._state:
            self._state = state
            self.topo = view.topology
            self._lay = cache.layout(self.topo, view.max_jobs_per_gpu)
            self._exclusive_gpus = view.max_jobs_per_gpu == 1
            self._arrays = (view.free, view.up, view.n_resident)  # read-only views, updated in place
            self._running: Mapping[int, object] = state.running  # (the live dict, read only here: no proxy per read)
            self._jobs_of: Mapping[int, Job] = state.jobs  # (view.job's dict)
            self._tables.clear()
            # the fit code of a fitting job when fitting is a GPU count (see _fit_codes), else 0
            self._count_only = ((3 if self._need_sh else 1) if (not self._need_sh or self._exclusive_gpus)
                                else 0)
        self._ws: WorkingState | None = None
        self.decisions: list[Start] = []
        ids = state.pending_ids  # (the view's properties, read from its state)
        if not cache.whole_run:
            cache.see(ids, view)
        self._ids: Sequence[int] = ids  # this point's queue (read in place, see above)
        self._order: list[int] | None = None  # pending positions past the FIFO part by work (stable)
        enq, deq = state.enqueued, state.dequeued
        rank_l = cache.rank_l  # the ranked queue, kept in step with the queue at every point:
        ranked: list[int] | None
        if rank_l is not None and enq is cache._enq:  # cache._queue_ranks(enq, ids), its common case written out
            ranked = cache._ranked
            seen = cache._enq_seen
            if len(enq) > seen:
                for i in enq[seen:]:
                    bisect.insort(ranked, rank_l[i])
                cache._enq_seen = len(enq)
            if len(ranked) != len(ids):  # (left the queue unreported: rebuilt there)
                ranked = cache._queue_ranks(enq, ids)
        else:
            ranked = cache._queue_ranks(enq, ids)
        self._ranked = None if ranked is None or len(ids) <= self.fifo_slots else ranked
        self._gone = set()  # job ids started in this batch
        self._demand = float(state.pending_gpus)
        self._simple = simple = not cache.constrained
        self._count_fit = self._count_only if simple else 0
        self._n_free = n_free = state.n_free
        self._n_sh = 0 if not self._need_sh else n_free if self._exclusive_gpus else self._count_shareable()
        if ranked is None:
            self._refresh()
            return self
        if last is None or not self._carry(last, started, enq, deq):
            self._refresh()
        self._mark = (len(ids), cache.qrank_l[ids[-1]] if ids else -1, len(enq), len(deq))
        return self

    # -- working state -----------------------------------------------------------------------
    @property
    def ws(self) -> WorkingState:
        """The cluster as the starts taken so far leave it (made on first use)."""
        ws = self._ws
        if ws is None:
            ws = self._spare  # the last point's, made anew when it works on the same view
            if ws is not None and ws.ctx.view is self.view and self.reuse_working_state:
                ws.reset()
            else:
                ws = self._spare = WorkingState(PlacementContext(self.view))
            self._ws = ws
        return ws

    def _count_shareable(self) -> int:
        """GPUs with a free job slot (= free GPUs on exclusive clusters)."""
        if not self._need_sh:
            return 0
        if self._exclusive_gpus:
            return self._n_free
        if self._ws is None:
            view = self.view
            return int(np.count_nonzero(view.up & (view.n_resident < view.max_jobs_per_gpu)))
        ws = self._ws
        return int(np.count_nonzero(ws.up & (ws.n_res < ws.max_jobs)))

    # -- window ------------------------------------------------------------------------------
    def _refresh(self) -> None:
        """Recompute the window: the first ``fifo_slots`` jobs not started in this batch, then
        the ones with the least work among those after them. Plain lists: the window is short,
        and a scan of the work order skips at most ``fifo_slots`` + (started) entries. The work
        order is the cache's ranked queue when it has one, else a sort of this point's queue.

        A ranked scan remembers where it stopped, the FIFO part's last queue rank and the jobs it
        took (``_scanned``) for :meth:`_refresh_taken`."""
        ids = self._ids
        f, n, gone = self.fifo_slots, len(ids), self._gone
        if gone:  # the first f alive positions lie among the first f + len(gone)
            win = [i for i in islice(ids, f + len(gone)) if i not in gone][:f]
        else:
            win = list(islice(ids, f))
        need = self.k - len(win)
        self._scanned = None  # no ranked scan to continue
        if need > 0 and n - len(gone) > len(win):  # jobs left after the FIFO part
            ranked = self._ranked
            if ranked is not None:  # queued jobs by rank: skip the FIFO part and the started
                cache = self.cache
                by_rank, qbr = cache.by_rank, cache.qrank_by_rank
                cut = cache.qrank_l[win[-1]] if win else -1
                tail: list[int] = []
                pos = len(ranked)
                for r in ranked:
                    if qbr[r] > cut:
                        i = by_rank[r]
                        if i not in gone:
                            tail.append(i)
                            if len(tail) == need:
                                pos = bisect.bisect_left(ranked, r) + 1  # (ranks are distinct, ascending)
                                break
                self._scanned = (pos, cut, tail)
                win += tail
            else:
                ids = self._ids = list(ids)  # positions are read below: a list of this point's queue
                cut = ids.index(win[-1]) if win else -1
                if self._order is None:  # the positions after the FIFO part by work (stable); the
                    # FIFO part only moves later within a batch, so this order keeps every candidate
                    work = list(map(self.cache.work_l.__getitem__, ids))
                    self._order = sorted(range(cut + 1, n), key=work.__getitem__)
                head = self._order[: self.k + len(gone)]
                win += [ids[o] for o in head if o > cut and ids[o] not in gone][:need]
        self._win_ids = win
        self._fit: tuple[list[bool], list[bool]] | None = None
        self._codes: bytes | None = None  # _fit_codes
        self._valid: bool | None = None
        self._mask: np.ndarray | None = None
        self._obs: np.ndarray | None = None

    def _carry(self, last: tuple[int, int, list[int]], gone: set[int], enq: list[int], deq: list[int]) -> bool:
        """The window of this point from the last point's (its ranked scan ``last``, its started jobs
        ``gone``) when the queue changed only by losing those starts and
        gaining entries behind its last job (the state's ``dequeued`` and ``enqueued`` logs since the
        last :meth:`aim`): the FIFO part and its last queue rank stay, the entries join the
        least-work part by rank, and the scan's position moves to the new ranked queue. False (nothing
        set) when the queue changed otherwise; :meth:`_refresh` then rescans. The same window
        (``carried_window = False`` rescans at every point)."""
        n0, last_q, n_enq, n_deq = self._mark
        ranked, ng = self._ranked, len(gone)
        if ranked is None or len(deq) - n_deq != ng:
            return False
        n_new = len(enq) - n_enq
        if len(self._ids) != n0 - ng + n_new or (ng and not gone.issuperset(deq[n_deq:])):
            return False
        pos, cut, tail = last  # (tail: this list is the last point's; on False _refresh starts anew)
        need, rank_l = self.k - self.fifo_slots, self.cache.rank_l
        assert rank_l is not None  # (ranked: the run's jobs are ranked)
        if n_new:
            qrank_l, key = self.cache.qrank_l, rank_l.__getitem__
            for i in enq[n_enq:]:
                q = qrank_l[i]
                if q <= last_q:  # (queue ranks ascending, after the last job's: entries at the tail)
                    return False
                last_q = q
                if len(tail) < need or key(i) < key(tail[-1]):  # among the first need: joins at its rank
                    bisect.insort(tail, i, key=key)
                    if len(tail) > need:
                        tail.pop()
        if n_new or ng:  # (else the same queue: the same window and scan)
            # ranks up to the last one taken are read (taken or in the FIFO part); all when short
            pos = bisect.bisect_right(ranked, rank_l[tail[-1]]) if len(tail) == need else len(ranked)
            self._scanned = (pos, cut, tail)
            self._win_ids = self._win_ids[: self.fifo_slots] + tail
        self._fit = None
        self._codes = None
        self._valid = None
        self._mask = None
        self._obs = None
        return True

    def _scan_on(self, tail: list[int], pos: int, cut: int, need: int) -> int:
        """Go on with the ranked scan from ``pos``, appending to ``tail`` the jobs after the FIFO
        part (queue rank above ``cut``) not started, until it holds ``need``; the position after
        the last rank read."""
        cache, gone = self.cache, self._gone
        by_rank, qbr = cache.by_rank, cache.qrank_by_rank
        ranked = self._ranked
        assert ranked is not None  # (called when a ranked scan is continued)
        for r in islice(ranked, pos, None):
            if qbr[r] > cut:
                i = by_rank[r]
                if i not in gone:
                    tail.append(i)
                    if len(tail) == need:
                        return bisect.bisect_left(ranked, r) + 1
        return len(ranked)

    def _refresh_taken(self, job_id: int) -> None:
        """:meth:`_refresh` after ``job_id`` (in the window) was started, continuing the last ranked
        scan instead of repeating it: the ranks it passed and left stay left (the FIFO part's last
        queue rank only grows and started jobs stay started), the jobs it took are kept unless
        now started or in the FIFO part, and the scan goes on from where it stopped. The same
        window (``incremental_window = False`` takes :meth:`_refresh`)."""
        win = self._win_ids
        f = self.fifo_slots
        nf = min(f, len(win))  # (the FIFO part holds f jobs unless the queue is shorter)
        gone, ids, scanned = self._gone, self._ids, self._scanned
        if scanned is None or job_id not in win:
            self._refresh()  # (no scan to continue)
            return
        pos, cut, tail = scanned
        if job_id in win[:nf]:  # the FIFO part moves on by one: its next alive queued job joins it
            if len(ids) - len(gone) < f:  # (a FIFO part that shrinks: its last queue rank falls)
                self._refresh()
                return
            fifo = [i for i in islice(ids, f + len(gone)) if i not in gone][:f]
            qrank = self.cache.qrank_l
            cut = qrank[fifo[-1]]
            tail = [i for i in tail if qrank[i] > cut]
        else:  # the same FIFO part: the taken job leaves the least-work part
            fifo = win[:nf]
            tail.remove(job_id)
        need = self.k - len(fifo)
        if len(tail) < need and pos < len(self._ranked):  # type: ignore[arg-type]  # (scanned: ranked)
            pos = self._scan_on(tail, pos, cut, need)
        self._scanned = (pos, cut, tail)
        self._win_ids = fifo + tail
        self._fit = None
        self._codes = None
        self._valid = None
        self._mask = None
        self._obs = None

    @property
    def window(self) -> list[Job]:
        job = self.view.job
        return [job(i) for i in self._win_ids]

    # -- mask --------------------------------------------------------------------------------
    def mask(self) -> np.ndarray:
        """(K x P + 1,) bool. The last entry ("done") is True except when the cluster would sit
        idle: nothing running, nothing started in this batch, and some start valid (work-conserving
        rule: a policy cannot stall a run by waiting forever on an empty cluster)."""
        if self._mask is None:
            self._mask = self.take_mask()
        return self._mask

    def take_mask(self) -> np.ndarray:
        """:meth:`mask`, handed over: the caller owns the array (no copy; a later call before the
        next action builds a new one)."""
        m = self._mask
        if m is not None:
            self._mask = None
            return m
        codes = self._codes if self._codes is not None else self._fit_codes()
        valid = self._valid
        if valid is None:
            valid = self.any_valid()
        done = bool(self.decisions or self._running or not valid)  # (_done_valid, written out)
        memo = self._masks[done]  # the masks of the window patterns seen, by fit codes: copied out
        m = memo.get(codes)
        if m is None:
            if len(memo) >= MASK_MEMO_MAX:
                memo.clear()
            buf = bytearray(self.done_action + 1)
            if codes:
                body = self.options.mask_body(codes)
                buf[: len(body)] = body
            buf[-1] = done
            m = memo[codes] = np.frombuffer(bytes(buf), dtype=np.bool_)  # read-only
        return m.copy()

    def _done_valid(self) -> bool:
        """The mask's last entry: "done" is valid unless the cluster would sit idle."""
        return bool(self.decisions or self._running or not self.any_valid())

    def valid(self, action: int) -> bool:
        """``mask()[action]`` without building the mask: a slot's fit code has the option's bit
        (1: exclusive options, 2: shared ones); "done" by :meth:`_done_valid`."""
        if action == self.done_action:
            return self._done_valid()
        if not 0 <= action < self.done_action:
            return False
        slot, opt = divmod(action, self.n_opts)
        codes = self._fit_codes()
        return slot < len(codes) and bool(codes[slot] & self.options.fit_bits[opt])

    def _fits(self) -> tuple[list[bool], list[bool]]:
        """(fits an exclusive option, fits ``least_interference``) per window slot."""
        if self._fit is not None:
            return self._fit
        ids = self._win_ids
        gpus_l = self.cache.gpus_l
        sizes = [gpus_l[i] for i in ids]
        sh: list[bool]
        if self._simple:
            n_free = self._n_free
            ex = [n <= n_free for n in sizes]
            if self._need_sh and self._exclusive_gpus:
                sh = ex  # exclusive cluster, no job needs more memory than any GPU has: same test
            elif self._need_sh:
                n_sh, mem_l = self._n_sh, self.cache.mem_l
                sh = [n <= n_sh for n in sizes]
                for s, i in enumerate(ids):
                    if sh[s] and mem_l[i] != 0.0:
                        sh[s] = int(np.count_nonzero(self.ws.shareable(self.view.job(i)))) >= sizes[s]
            else:
                sh = [False] * len(ids)
        else:
            ws = self.ws
            ex = [False] * len(ids)
            sh = [False] * len(ids)
            for s, j in enumerate(self.window):
                ex[s] = ws.ctx.n_eligible(j) >= j.num_gpus
                if self._need_sh:
                    sh[s] = int(np.count_nonzero(ws.shareable(j))) >= j.num_gpus
        self._fit = (ex, sh)
        return self._fit

    def _fit_codes(self) -> bytes:
        """Per window slot: 1 if an exclusive option fits, + 2 if a shared one does. When fitting
        is a GPU count alone (no job constrains its GPUs, and the cluster is exclusive or no option
        shares) the codes come straight from the counts, else from :meth:`_fits`."""
        codes = self._codes
        if codes is None:
            fit = self._count_fit
            if fit:  # both tests are "GPUs <= free GPUs" (see _fits): the window's GPU counts as
                # bytes, mapped by a table of the free-GPU count
                n_free = self._n_free
                table = self._tables.get(n_free)
                if table is None:
                    table = self._tables[n_free] = count_table(fit, n_free)
                try:
                    codes = bytes(map(self.cache.gpus_l.__getitem__, self._win_ids)).translate(table)
                except ValueError:  # a job of 256 GPUs or more: not a byte
                    gpus_l = self.cache.gpus_l
                    codes = bytes([fit if gpus_l[i] <= n_free else 0 for i in self._win_ids])
            else:
                ex, sh = self._fits()
                codes = bytes([e + 2 * s for e, s in zip(ex, sh, strict=True)])
            self._codes = codes
        return codes

    def any_valid(self) -> bool:
        """Whether some start is valid now (the mask without "done" has a True)."""
        valid = self._valid
        if valid is None:
            codes = self._codes
            if codes is None:
                fit = self._count_fit
                table = self._tables.get(self._n_free) if fit else None
                if table is not None:  # _fit_codes' count-only codes, written out (its table made)
                    try:
                        codes = self._codes = bytes(map(self.cache.gpus_l.__getitem__, self._win_ids)).translate(table)
                    except ValueError:
                        codes = self._fit_codes()
                else:
                    codes = self._fit_codes()
            if not self._need_sh or self.options.any_exclusive:  # some slot fits some option
                valid = any(codes)
            else:  # only shared options: some slot fits a shared one
                valid = 2 in codes or 3 in codes
            self._valid = valid
        return valid

    # -- observation -------------------------------------------------------------------------
    def observe(self) -> np.ndarray:
        """The observation (module docstring), computed in one compiled call and cached until the
        next action."""
        if self._obs is None:
            self._obs = self.take_observation()
        return self._obs

    def take_observation(self) -> np.ndarray:
        """:meth:`observe`, handed over: the caller owns the array (no copy; a later call before
        the next action computes a new one)."""
        obs = self._obs
        if obs is not None:
            self._obs = None
            return obs
        view, lay, ws, cache = self.view, self._lay, self._ws, self.cache
        free, up, n_res = self._arrays
        if ws is not None:
            free, n_res = ws.ctx.free, ws.n_res
        codes = self._codes if self._codes is not None else self._fit_codes()
        k, win, buf = self.k, self._win_ids, self._win_buf
        row = self._code_rows.get(codes)
        if row is None:
            if len(self._code_rows) >= MASK_MEMO_MAX:
                self._code_rows.clear()
            row = self._code_rows[codes] = array("q", [*codes, *self._no_job[len(codes):]])
        buf[:k] = array("q", win + self._no_job[len(win):]) if len(win) < k else array("q", win)
        buf[k:] = row
        n_dec, n_gpus, now = len(self.decisions), lay.n_gpus, view.now
        tod = 2.0 * math.pi * (now % _DAY_S) / _DAY_S
        obs = np.empty(lay.size + k * SLOT_FEATURES + GLOBAL_FEATURES, _F32)
        args = (  # the global row's scalars one by one (a tuple argument costs more to pass)
            obs, lay.gpu_node, lay.node_scale, free, up, self._power_w, n_res, view.slowdown,
            cache.slot, self._win_np,  # k ids (-1: none), then k fit codes
            now / 3600.0, self._n_free,
            math.sin(tod), math.cos(tod), self._n_free / n_gpus,  # index 2 (busy share): the kernel's
            math.log1p(len(self._ids) - n_dec) / 5.0, math.log1p(len(self._running) + n_dec) / 5.0,
            self._demand / n_gpus, math.log1p(n_dec) / 3.0,
        )
        fill = self._fill[ws is None]
        if fill is None:  # first through the dispatcher, then its compiled function for these types
            fill_observation(*args)
            self._fill[ws is None] = entry_point(fill_observation, args)
        else:
            fill(*args)
        return obs

    # -- actions -----------------------------------------------------------------------------
    def decode(self, action: int) -> tuple[int, int] | None:
        """(slot, option) of a placement action, or None for "done"."""
        if action == self.done_action:
            return None
        return divmod(int(action), self.n_opts)

    def act(self, action: int) -> Start | None:
        """Apply a valid placement action to the working state; None if it is not valid now."""
        action = int(action)
        if not 0 <= action < self.done_action:  # ("done" or out of range: not a start)
            return None
        options = self.options
        slot, opt = divmod(action, self.n_opts)
        codes = self._codes if self._codes is not None else self._fit_codes()
        if slot >= len(codes) or not codes[slot] & options.fit_bits[opt]:  # (valid, written out)
            return None
        job = self._jobs_of[self._win_ids[slot]]  # (view.job)
        ws = self._ws if self._ws is not None else self.ws
        p = options._placements[opt]  # options.place(opt, job, ws), written out for an exclusive option
        gpus = p.place(job, ws.ctx) if p is not None else options.place(opt, job, ws)
        if gpus is None:  # cannot happen when the mask is right; stay safe
            return None
        self._n_free -= ws.take(job, gpus)
        d = _new(Start)  # Start(job.job_id, gpus), field by field
        _set_job(d, job.job_id)
        _set_gpus(d, gpus)
        _set_sharing(d, WHOLE_GPU)
        self.decisions.append(d)
        self._gone.add(job.job_id)
        self._demand -= len(gpus)
        if self._need_sh:
            self._n_sh = self._n_free if self._exclusive_gpus else self._count_shareable()
        if self.incremental_window:
            self._refresh_taken(job.job_id)
        else:
            self._refresh()
        return d

    def action_for(self, job_id: int, gpus: tuple[int, ...]) -> int | None:
        """The action that starts ``job_id`` on ``gpus`` if one does (else the first valid option
        for the job, or None when the job is not in the window) — maps heuristic decisions to actions."""
        for s, jid in enumerate(self._win_ids):
            if jid != job_id:
                continue
            j = self.view.job(jid)
            mask = self.mask()
            first = None
            for o in range(self.n_opts):
                a = s * self.n_opts + o
                if not mask[a]:
                    continue
                if first is None:
                    first = a
                if self.options.place(o, j, self.ws) == tuple(sorted(gpus)):
                    return a
            return first
        return None
