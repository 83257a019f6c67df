"""Who runs where: allocation bookkeeping and decision validation, shared by every backend.

The simulator and the real backend both keep one :class:`ClusterState`; it validates each batch of
decisions against the rules below and raises :class:`InvalidDecision` naming the broken rule.

Rules: ``job-unknown``, ``job-not-pending``, ``job-not-running``, ``duplicate-job``, ``gpu-count``,
``gpu-exists``, ``gpu-distinct``, ``gpu-down``, ``gpu-type``, ``max-jobs-per-gpu``, ``gpu-memory``,
``sharing-exclusive`` (an exclusive job shares no GPU), ``sharing-mix`` (MPS and whole-GPU tenants
do not mix on one GPU), ``sharing-mps-sum`` (MPS percentages on a GPU sum to at most 100 unless every
MPS tenant there allows oversubscription).
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpusched_env.topology import Topology
from gpusched_env.types import Decision, InvalidDecision, Job, Migrate, Preempt, Sharing, Start


def _first_place(i: Any, f: Any, b: Any, k: int, n: int, dmem: float, dshare: float, sign: int, all_up: bool) -> int:
    """The first call of :func:`place_k` (through the dispatcher, which compiles or loads it, with
    float sums whatever the job's fields are); it puts the compiled function for these argument
    types in :data:`_place_fn` for the calls after it (:func:`entry_point`: no type look-up)."""
    global _place_fn
    from gpusched_env.allocation_kernel import place_k  # (numba only where the compiled call is used)
    from gpusched_env.compiled import entry_point

    args = (i, f, b, k, n, float(dmem), float(dshare), sign, bool(all_up))
    out = place_k(*args)
    _place_fn = entry_point(place_k, args)
    return int(out)


_place_fn: Any = _first_place


@dataclass(frozen=True, slots=True)
class Allocation:
    """Where a running job is: its GPUs, how it shares them and when it (re)started there."""

    gpus: tuple[int, ...]
    sharing: Sharing
    since_s: float


_new = object.__new__
_slots = vars(Allocation)
_set_gpus, _set_sharing, _set_since = _slots["gpus"].__set__, _slots["sharing"].__set__, _slots["since_s"].__set__
"""An :class:`Allocation` built field by field through its slots (what the frozen dataclass's
``__init__`` does, without its call and ``object.__setattr__`` look-ups; the same object)."""


@dataclass
class Applied:
    """The effect of one batch of decisions, for the backend to act on."""

    started: list[int] = field(default_factory=list)
    preempted: list[int] = field(default_factory=list)
    migrated: list[int] = field(default_factory=list)
    plain: bool = False
    """Only starts, each on GPUs that held no job (:meth:`ClusterState._plain_starts`): each GPU
    the batch touched now holds one job, started now."""

    @property
    def touched_gpus_empty(self) -> bool:
        return not (self.started or self.preempted or self.migrated)


def readonly(a: np.ndarray) -> np.ndarray:
    """A read-only view sharing memory with ``a`` (it sees later changes to ``a``)."""
    v = a.view()
    v.flags.writeable = False
    return v


def _pending_key(job: Job) -> tuple[float, int]:
    return (job.arrival_s, job.job_id)


class ClusterState:
    """Allocation state of one cluster: pending queue (arrival order), running jobs, per-GPU load."""

    def __init__(self, topology: Topology, max_jobs_per_gpu: int = 4) -> None:
        if max_jobs_per_gpu < 1:
            raise ValueError(f"cluster.max_jobs_per_gpu must be >= 1, got {max_jobs_per_gpu}")
        self.topology = topology
        self.max_jobs_per_gpu = max_jobs_per_gpu
        n = self._n = topology.n_gpus
        self.resident: list[list[int]] = [[] for _ in range(n)]
        # the per-GPU arrays, parts of three (one compiled call per placement updates them,
        # place_k): [n_resident | GPUs scratch], [mem_used | share_used], [free_mask | up]
        self._i = np.zeros(2 * n, dtype=np.int64)
        self._f = np.zeros(2 * n, dtype=np.float64)
        self._b = np.ones(2 * n, dtype=bool)
        self.all_up = True  # every GPU up (kept by set_up)
        self.n_free = n  # count of free_mask
        self.jobs: dict[int, Job] = {}
        # The queue, sorted by (arrival, id): deques, since a queue-order policy starts jobs from the
        # head of a queue that holds thousands (a list would move them all at every start).
        self.pending: deque[Job] = deque()
        self.pending_ids: deque[int] = deque()  # ids of ``pending``, same order
        # (arrival, id) of ``pending`` from index ``_k0`` on (a list, for bisect without a key
        # function; entries before ``_k0`` left from the head and are dropped in bulk)
        self._pending_keys: list[tuple[float, int]] = []
        self._k0 = 0
        self.pending_gpus = 0  # GPUs requested by the queue in all
        self.pending_sizes: dict[int, int] = {}  # GPU count -> queued jobs requesting it
        self.enqueued: list[int] = []  # every job id put in the queue, in order (arrival, preemption, requeue)
        self.dequeued: list[int] = []  # every job id taken from the queue (started), in order
        self.running: dict[int, Allocation] = {}
        self._ro: dict[str, np.ndarray] = {}
        self._views()

    def _views(self) -> None:
        """The per-GPU arrays as views of their parts: ``n_resident`` (jobs per GPU), ``mem_used``
        (memory held by the resident jobs, GB), ``share_used`` (sum of their requested GPU
        fractions), ``free_mask`` (up and holding no job), ``up``; and a memoryview of the GPUs
        scratch part for :meth:`_place`'s writes (a memoryview item write costs half a numpy one)."""
        n, i, f, b = self._n, self._i, self._f, self._b
        self.n_resident, self.mem_used, self.share_used = i[:n], f[:n], f[n:]
        self.free_mask, self.up = b[:n], b[n:]
        self._gpus_mv: Any = i.data[n:]

    def __getstate__(self) -> dict[str, object]:
        state = self.__dict__.copy()
        state["_ro"] = {}  # copies and pickles make their own views of their own arrays
        for name in ("n_resident", "mem_used", "share_used", "free_mask", "up", "_gpus_mv"):
            del state[name]  # (views: remade from the pickled arrays; memoryviews do not pickle)
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self._views()

    def readonly(self, name: str) -> np.ndarray:
        """A read-only view of the per-GPU array ``name`` (made once; it sees every later change:
        these arrays are only ever updated in place)."""
        v = self._ro.get(name)
        if v is None:
            v = self._ro[name] = readonly(getattr(self, name))
        return v

    # -- queue -------------------------------------------------------------------------------
    def submit(self, job: Job) -> None:
        if job.job_id in self.jobs:
            raise ValueError(f"job id {job.job_id} submitted twice")
        self.jobs[job.job_id] = job
        key, keys = (job.arrival_s, job.job_id), self._pending_keys
        if self.pending and not key > keys[-1]:
            self._enqueue(job)
            return
        keys.append(key)  # a new arrival joins the tail: _enqueue's common case, written out
        self.pending.append(job)
        self.pending_ids.append(job.job_id)
        self.enqueued.append(job.job_id)
        n = job.num_gpus
        self.pending_gpus += n
        sizes = self.pending_sizes
        sizes[n] = sizes.get(n, 0) + 1

    def _enqueue(self, job: Job) -> None:
        key, keys = _pending_key(job), self._pending_keys
        if not self.pending or key > keys[-1]:  # the common case: a new arrival joins the tail
            keys.append(key)
            self.pending.append(job)
            self.pending_ids.append(job.job_id)
        else:
            i = bisect.bisect_right(keys, key, self._k0)
            keys.insert(i, key)
            i -= self._k0
            self.pending.insert(i, job)
            self.pending_ids.insert(i, job.job_id)
        self.enqueued.append(job.job_id)
        self.pending_gpus += job.num_gpus
        self.pending_sizes[job.num_gpus] = self.pending_sizes.get(job.num_gpus, 0) + 1

    def _dequeue(self, job: Job) -> None:
        jid, ids = job.job_id, self.pending_ids
        if ids and ids[0] == jid:  # (_pending_index, written out)
            i = 0
        else:
            i = bisect.bisect_left(self._pending_keys, (job.arrival_s, jid), self._k0) - self._k0
            if not (i < len(ids) and ids[i] == jid):
                raise InvalidDecision("job-not-pending", f"job {jid} is not in the queue")
        if i == 0:
            self.pending.popleft()
            self.pending_ids.popleft()
            self._k0 += 1
            k0 = self._k0
            if k0 > 1024 and 2 * k0 > len(self._pending_keys):  # drop the keys that left, in bulk
                del self._pending_keys[:k0]
                self._k0 = 0
        else:
            del self.pending[i]
            del self.pending_ids[i]
            del self._pending_keys[self._k0 + i]
        self.pending_gpus -= job.num_gpus
        left = self.pending_sizes[job.num_gpus] - 1
        if left:
            self.pending_sizes[job.num_gpus] = left
        else:
            del self.pending_sizes[job.num_gpus]
        self.dequeued.append(job.job_id)

    def _pending_index(self, job: Job) -> int | None:
        """Position of ``job`` in the queue (binary search on (arrival, id)), or None."""
        ids = self.pending_ids
        if ids and ids[0] == job.job_id:
            return 0
        i = bisect.bisect_left(self._pending_keys, (job.arrival_s, job.job_id), self._k0) - self._k0  # (_pending_key)
        return i if i < len(ids) and ids[i] == job.job_id else None

    def is_pending(self, job_id: int) -> bool:
        job = self.jobs.get(job_id)
        if job is None or job_id in self.running:
            return False
        return self._pending_index(job) is not None

    # -- GPU load ----------------------------------------------------------------------------
    compiled = False
    """A placement's per-GPU counts, sums and free flags updated by one compiled call
    (:func:`gpusched_env.allocation_kernel.place_k`; the simulator sets it) instead of the plain
    Python steps (:meth:`_place_plain`, the same floats; tests compare the two). Off by default: the
    real backend and the lab-cluster service place a few jobs a round, where numba's import and
    first call would cost more than they save."""

    def _place(self, job: Job, gpus: tuple[int, ...], sign: int) -> None:
        """Add (``sign`` +1) or remove (-1) ``job`` on ``gpus``: residents, counts, sums, free flags."""
        if not self.compiled:
            self._place_plain(job, gpus, sign)
            return
        jid, resident, gpu_of = job.job_id, self.resident, self._gpus_mv
        k = 0
        if sign > 0:
            for g in gpus:
                resident[g].append(jid)
                gpu_of[k] = g
                k += 1
        else:
            for g in gpus:
                resident[g].remove(jid)
                gpu_of[k] = g
                k += 1
        self.n_free += _place_fn(self._i, self._f, self._b, k, self._n, sign * job.mem_gb, sign * job.gpu_fraction,
                                 sign, self.all_up)

    def _place_plain(self, job: Job, gpus: tuple[int, ...], sign: int) -> None:
        """:meth:`_place` in Python, one GPU at a time (the definition the compiled call transcribes)."""
        dmem, dshare, jid = sign * job.mem_gb, sign * job.gpu_fraction, job.job_id
        for g in gpus:
            here = self.resident[g]
            if sign > 0:
                if not here:
                    if self.up[g]:
                        self.n_free -= 1
                    self.free_mask[g] = False
                here.append(jid)
            else:
                here.remove(jid)
                self.free_mask[g] = not here and bool(self.up[g])
                self.n_free += int(self.free_mask[g])
            self.n_resident[g] = len(here)
            if dmem:
                self.mem_used[g] += dmem
            self.share_used[g] += dshare

    def release(self, job_id: int) -> Allocation:
        """Remove a running job from its GPUs (finish, failure); it does not return to the queue."""
        alloc = self.running.pop(job_id)
        self._place(self.jobs[job_id], alloc.gpus, -1)
        return alloc

    def requeue(self, job_id: int) -> None:
        """Put a job that was released back in the queue (failure restart)."""
        self._enqueue(self.jobs[job_id])

    def finish(self, job_id: int) -> Allocation:
        """Remove a finished job (:meth:`release`, and it leaves ``jobs``)."""
        alloc = self.running.pop(job_id)
        self._place(self.jobs.pop(job_id), alloc.gpus, -1)
        return alloc

    def set_up(self, gpus: list[int], up: bool) -> None:
        """Mark GPUs up or down (node failure and repair)."""
        self.up[gpus] = up
        self.all_up = bool(self.up.all())
        self.free_mask[gpus] = (self.n_resident[gpus] == 0) & up
        self.n_free = int(np.count_nonzero(self.free_mask))

    # -- decisions ---------------------------------------------------------------------------
    def _check_gpus(self, job: Job, gpus: tuple[int, ...]) -> None:
        topo = self.topology
        if len(gpus) != job.num_gpus:
            raise InvalidDecision(
                "gpu-count", f"job {job.job_id} needs {job.num_gpus} GPU(s), decision gives {len(gpus)}"
            )
        if len(set(gpus)) != len(gpus):
            raise InvalidDecision("gpu-distinct", f"job {job.job_id} given GPUs {gpus} with repeats")
        for g in gpus:
            if not 0 <= g < topo.n_gpus:
                raise InvalidDecision("gpu-exists", f"GPU {g} does not exist (cluster has {topo.n_gpus})")
        if not self.all_up:
            for g in gpus:
                if not self.up[g]:
                    raise InvalidDecision("gpu-down", f"GPU {g} is down (node failure)")
        if job.gpu_type is not None:
            for g in gpus:
                if topo.gpu_type_of(g) != job.gpu_type:
                    raise InvalidDecision(
                        "gpu-type", f"job {job.job_id} needs {job.gpu_type}, GPU {g} is {topo.gpu_type_of(g)}"
                    )

    def _job(self, job_id: int) -> Job:
        job = self.jobs.get(job_id)
        if job is None:
            raise InvalidDecision("job-unknown", f"job {job_id} is not in the system")
        return job

    def apply(self, decisions: Iterable[Decision], now: float) -> Applied:
        """Validate and apply a batch: preemptions, then migrations, then starts.

        Capacity rules are checked on the state the whole batch would leave, so a batch may swap
        jobs between GPUs. Everything is checked before anything changes: on error the state is
        unchanged.
        """
        decisions = list(decisions)
        if not decisions:
            return Applied()
        starts = self._plain_starts(decisions)
        if starts is not None:  # shown valid: the checks below would pass
            applied = _new(Applied)  # Applied(plain=True), its fields set here (no __init__ call)
            applied.started, applied.preempted, applied.migrated, applied.plain = [], [], [], True
            running, started = self.running, applied.started
            compiled, resident, gpu_of = self.compiled, self.resident, self._gpus_mv
            for job, s in starts:
                self._dequeue(job)
                gpus = s.gpus
                if compiled:  # self._place(job, gpus, +1), written out
                    jid, k = job.job_id, 0
                    for g in gpus:
                        resident[g].append(jid)
                        gpu_of[k] = g
                        k += 1
                    self.n_free += _place_fn(self._i, self._f, self._b, k, self._n, 1 * job.mem_gb, 1 * job.gpu_fraction,
                                             1, self.all_up)
                else:
                    self._place(job, gpus, +1)
                a = _new(Allocation)  # Allocation(gpus, s.sharing, now) without the frozen __init__
                _set_gpus(a, gpus)
                _set_sharing(a, s.sharing)
                _set_since(a, now)
                running[s.job_id] = a
                started.append(s.job_id)
            return applied
        seen: set[int] = set()
        for d in decisions:
            if d.job_id in seen:
                raise InvalidDecision("duplicate-job", f"job {d.job_id} appears twice in one batch")
            seen.add(d.job_id)
            job = self._job(d.job_id)
            if isinstance(d, Start):
                if d.job_id in self.running or self._pending_index(job) is None:  # = not is_pending
                    raise InvalidDecision("job-not-pending", f"Start for job {d.job_id}, which is not queued")
                self._check_gpus(job, d.gpus)
            else:
                if d.job_id not in self.running:
                    kind = type(d).__name__
                    raise InvalidDecision("job-not-running", f"{kind} for job {d.job_id}, which is not running")
                if isinstance(d, Migrate):
                    self._check_gpus(job, d.gpus)
        self._check_capacity(decisions)
        applied = Applied()
        moves = [d for d in decisions if isinstance(d, Migrate)]
        for d in decisions:
            if isinstance(d, Preempt):
                self.release(d.job_id)
                self._enqueue(self.jobs[d.job_id])
                applied.preempted.append(d.job_id)
        for m in moves:
            self.release(m.job_id)
        for m in moves:
            self._place(self.jobs[m.job_id], m.gpus, +1)
            self.running[m.job_id] = Allocation(m.gpus, m.sharing, now)
            applied.migrated.append(m.job_id)
        for d in decisions:
            if isinstance(d, Start):
                job = self.jobs[d.job_id]
                self._dequeue(job)
                self._place(job, d.gpus, +1)
                self.running[d.job_id] = Allocation(d.gpus, d.sharing, now)
                applied.started.append(d.job_id)
        return applied

    def _plain_starts(self, decisions: list[Decision]) -> list[tuple[Job, Start]] | None:
        """The batch as (job, start) pairs when it is shown valid in one pass: only starts, of
        distinct queued jobs that name no GPU type and fit the smallest GPU's memory, each on as many
        distinct existing GPUs as it needs, up and holding no job, no GPU used twice in the batch
        (every rule of :meth:`apply` then holds: each GPU gets one job). None means "not shown
        here", not "invalid": :meth:`apply`'s full checks then decide (and name the broken rule)."""
        jobs, running, resident = self.jobs, self.running, self.resident
        n_gpus, min_mem = self.topology.n_gpus, self.topology.min_gpu_mem_gb
        up = None if self.all_up else self.up
        ids: set[int] = set()
        used: set[int] = set()
        out: list[tuple[Job, Start]] = []
        queue, keys, k0 = self.pending_ids, self._pending_keys, self._k0
        for d in decisions:
            if type(d) is not Start:
                return None
            jid = d.job_id
            job = jobs.get(jid)
            if job is None or jid in ids or jid in running or job.gpu_type is not None or job.mem_gb > min_mem:
                return None
            gpus = d.gpus
            if len(gpus) != job.num_gpus:
                return None
            for g in gpus:
                if type(g) is not int or not 0 <= g < n_gpus or g in used or resident[g]:
                    return None
                if up is not None and not up[g]:
                    return None
                used.add(g)
            if not (queue and queue[0] == jid):  # queued: _pending_index, written out
                i = bisect.bisect_left(keys, (job.arrival_s, jid), k0) - k0
                if not (i < len(queue) and queue[i] == jid):
                    return None
            ids.add(jid)
            out.append((job, d))
        return out

    def _one_tenant_fit(self, decisions: list[Decision]) -> bool:
        """Fast capacity check for the common batch: every GPU a job joins is used once in the batch
        and holds no job that stays (all its residents leave in this batch), and no joining job needs
        more memory than the smallest GPU has. Each such GPU then holds one job: count, memory and
        sharing rules hold. False means "not shown here", not "invalid": the full check then decides."""
        leaving = {d.job_id for d in decisions if type(d) is not Start}
        resident, jobs, used = self.resident, self.jobs, set()
        min_mem = self.topology.min_gpu_mem_gb
        for d in decisions:
            if isinstance(d, Preempt):
                continue
            if jobs[d.job_id].mem_gb > min_mem:
                return False
            for g in d.gpus:
                if g in used:
                    return False
                for j in resident[g]:
                    if j not in leaving:
                        return False
                used.add(g)
        return True

    def _check_capacity(self, decisions: list[Decision]) -> None:
        """Check per-GPU job count, memory and sharing on the state the batch would leave."""
        if self._one_tenant_fit(decisions):
            return
        dn: dict[int, int] = {}
        dmem: dict[int, float] = {}
        leaving: set[int] = set()
        joining: dict[int, list[tuple[int, Sharing]]] = {}

        def add(job: Job, gpus: tuple[int, ...], sign: int) -> None:
            for g in gpus:
                dn[g] = dn.get(g, 0) + sign
                dmem[g] = dmem.get(g, 0.0) + sign * job.mem_gb

        for d in decisions:
            job = self.jobs[d.job_id]
            if not isinstance(d, Start):
                add(job, self.running[d.job_id].gpus, -1)
                leaving.add(d.job_id)
            if not isinstance(d, Preempt):
                add(job, d.gpus, +1)
                for g in d.gpus:
                    joining.setdefault(g, []).append((d.job_id, d.sharing))
        for g in sorted(joining):
            if int(self.n_resident[g]) + dn[g] < 2:
                continue  # one tenant: nothing to share
            tenants = [(j, self.running[j].sharing) for j in self.resident[g] if j not in leaving]
            self._check_sharing(g, tenants + joining[g])
        for g in sorted(dn):
            n = int(self.n_resident[g]) + dn[g]
            if n > self.max_jobs_per_gpu:
                raise InvalidDecision(
                    "max-jobs-per-gpu",
                    f"GPU {g} would hold {n} jobs (limit {self.max_jobs_per_gpu}); resident now: {self.resident[g]}",
                )
            mem = float(self.mem_used[g]) + dmem[g]
            if mem > self.topology.gpu_mem_gb[g] + 1e-9:
                raise InvalidDecision(
                    "gpu-memory", f"GPU {g} would use {mem:.1f} GB of {self.topology.gpu_mem_gb[g]:.1f} GB"
                )

    @staticmethod
    def _check_sharing(g: int, tenants: list[tuple[int, Sharing]]) -> None:
        """The sharing rules for the tenants GPU ``g`` would hold (see the module docstring)."""
        if len(tenants) < 2:
            return
        for jid, sh in tenants:
            if sh.kind == "exclusive":
                raise InvalidDecision("sharing-exclusive", f"GPU {g}: job {jid} runs exclusive, but would share with "
                                      f"{[j for j, _ in tenants if j != jid]}")
        mps = [sh.is_mps for _, sh in tenants]
        if any(mps) and not all(mps):
            raise InvalidDecision("sharing-mix", f"GPU {g} would mix MPS and whole-GPU tenants: "
                                  f"{[(j, sh.kind) for j, sh in tenants]}")
        if all(mps):
            total = sum(sh.sm_pct for _, sh in tenants)
            if total > 100.0 + 1e-9 and not all(sh.oversubscribe for _, sh in tenants):
                raise InvalidDecision("sharing-mps-sum", f"GPU {g}: MPS percentages would sum to {total:g} > 100 "
                                      "(oversubscription needs oversubscribe=True on every MPS tenant)")
