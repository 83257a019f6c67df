"""EaCO (Haghshenas & Hashemi, arXiv 2412.08294): energy-aware co-location with deadline checks.

Objective (CALIBRATION.md): minimise alpha x energy + (1 - alpha) x average time per epoch, subject
to every co-located job meeting its deadline (``Job.deadline_s``; None = no SLO) and per-GPU
utilisation < ``util_thr`` and memory use < ``mem_thr``. Implemented as the paper's greedy:

**Schedule(job)** (pending jobs in FIFO order, head-of-line stop by default):

1. High-priority jobs (``job.priority > 0``) get exclusive GPUs (packed placement on free GPUs), and
   nobody is ever co-located onto a GPU that holds a high-priority job.
2. Candidate GPU sets of the requested size N, built from GPUs that already hold jobs, are up, hold
   fewer than ``max_jobs_per_gpu`` jobs, have utilisation < ``util_thr`` (default 0.8, a choice: the
   paper does not publish it), memory use / capacity < ``mem_thr`` (default 0.9, a choice) and free
   memory (capacity - resident jobs' memory) >= the job's ``mem_gb``, and are of the job's GPU type.
   Sets: the GPUs of every running job of size N whose GPUs all qualify (co-locate with it), the N
   most utilised qualifying GPUs of each node, and the N most utilised qualifying GPUs overall;
   ordered MOST utilised first (mean utilisation, then fewer nodes, then ids; consolidation), at most
   ``max_candidates``. Sets this job already failed are skipped.
3. For a candidate, every affected job (the newcomer and each job resident on those GPUs) gets a
   predicted slowdown at its new co-location degree (max residents over its GPUs) from the history:
   the mean of observed slowdowns of that model at that degree; else the profiled pair slowdown
   ``pair_slowdown[(model, other_model)]`` at degree 2 (e.g. Gavel pair entries, passed by the
   caller); else the prior ``colo_slowdown`` by degree (default 2: 1.03, 3: 1.078, 4: 1.19 from
   EaCO's 3-7.8 % for 2-3 jobs and 19 % for 4; degree d > 4: 1 + 0.19 (d - 1) / 3, a choice).
   Predicted JCT = now + remaining_iters x slowdown / alone speed. The alone speed is the job's own
   observed ``iters_per_s`` when it ran alone, else its observed speed x its current predicted
   slowdown, else the catalogue (``1 / base_iter_s`` x GPU speed); unknown models skip the check.
   The candidate is rejected if it makes a deadline miss that would be met without it. The weight
   alpha enters as a gate: reject if (1 - alpha) x (mean relative slowdown of the affected jobs)
   > alpha x ``energy_saving`` (default 0.3, the low end of EaCO's measured 30-44 % single-node
   saving from co-location). The first accepted candidate is taken.
4. If no candidate is accepted: exclusive packed placement on free GPUs; else the job waits.

**Observe and undo.** A co-located newcomer is on trial for one epoch: ``epoch_s`` seconds (default
3600 s, a documented choice: the paper observes one training epoch; ImageNet epochs on V100 take
tens of minutes to an hour) or, if ``epoch_iters`` is set, that many of its iterations. At the
first decision point after the epoch (round ticks every ``round_s`` = 300 s by default make this the
"next epoch boundary"), the observed speeds (``view.progress(id).iters_per_s``) of the newcomer
and its co-residents update the history (slowdown = alone speed / observed speed, at least 1) and
the deadlines are re-checked with the observed speeds. If one would now be missed (and would be met
alone), the co-location is undone from a checkpoint: the newcomer migrates to the next accepted
candidate, else to exclusive free GPUs, else it is preempted back to the queue (it will not retry
the failed GPU sets).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from gpusched.baselines.gandiva import model_util, util_estimate
from gpusched.baselines.placement import packed_gpus
from gpusched_env.catalog import EACO_COLO_SLOWDOWN, gpu_spec, model_spec
from gpusched_env.placement import GpuSet
from gpusched_env.types import Decision, Job, Migrate, Preempt, Start
from gpusched_env.view import ClusterView

DEFAULT_COLO_SLOWDOWN: dict[int, float] = {k + 1: s for k, s in enumerate(EACO_COLO_SLOWDOWN)}


@dataclass
class _Trial:
    gpus: GpuSet
    start_s: float
    start_done: float


class _Work:
    """Working copy of the per-GPU load for one decide call."""

    def __init__(self, view: ClusterView) -> None:
        topo = view.topology
        self.view = view
        self.up = np.asarray(view.up)
        self.n_res = np.array(view.n_resident, dtype=np.int64)
        self.mem_total = np.asarray(topo.gpu_mem_gb, dtype=np.float64)
        self.mem_used = np.array(view.mem_used_gb, dtype=np.float64)
        self.util = util_estimate(view)
        self.gpus_of: dict[int, GpuSet] = {j: a.gpus for j, a in view.running.items()}
        self.hp = np.zeros(topo.n_gpus, dtype=bool)
        for j, g in self.gpus_of.items():
            if view.job(j).priority > 0:
                self.hp[list(g)] = True
        self._res: dict[int, list[int]] = {}

    def residents(self, g: int) -> list[int]:
        r = self._res.get(g)
        if r is None:
            r = self._res[g] = list(self.view.resident(g))
        return r

    def degree(self, gpus: GpuSet) -> int:
        return int(self.n_res[list(gpus)].max())

    def add(self, jid: int, gpus: GpuSet, job: Job) -> None:
        idx = list(gpus)
        self.n_res[idx] += 1
        self.mem_used[idx] += job.mem_gb
        self.util[idx] = np.minimum(1.0, self.util[idx] + model_util(job.model))
        if job.priority > 0:
            self.hp[idx] = True
        for g in gpus:
            self.residents(g).append(jid)
        self.gpus_of[jid] = gpus

    def remove(self, jid: int, gpus: GpuSet, job: Job) -> None:
        idx = list(gpus)
        self.n_res[idx] -= 1
        self.mem_used[idx] -= job.mem_gb
        self.util[idx] = np.maximum(0.0, self.util[idx] - model_util(job.model))
        for g in gpus:
            self.residents(g).remove(jid)
        del self.gpus_of[jid]


class EaCO:
    """Energy-aware co-location (module docstring)."""

    name = "eaco"
    events = True
    round_s: float | None

    def __init__(
        self,
        alpha: float = 0.5,
        util_thr: float = 0.8,
        mem_thr: float = 0.9,
        epoch_s: float = 3600.0,
        epoch_iters: float | None = None,
        round_s: float = 300.0,
        energy_saving: float = 0.3,
        colo_slowdown: Mapping[int, float] | None = None,
        pair_slowdown: Mapping[tuple[str, str], float] | None = None,
        max_candidates: int = 32,
        head_of_line: bool = True,
    ) -> None:
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"eaco.alpha must be in [0, 1], got {alpha}")
        if not (0 < util_thr <= 1 and 0 < mem_thr <= 1):
            raise ValueError(f"eaco.util_thr and mem_thr must be in (0, 1], got {util_thr}, {mem_thr}")
        if epoch_s <= 0 or round_s <= 0 or (epoch_iters is not None and epoch_iters <= 0):
            raise ValueError("eaco.epoch_s, round_s and epoch_iters must be > 0")
        self.alpha, self.util_thr, self.mem_thr = alpha, util_thr, mem_thr
        self.epoch_s, self.epoch_iters, self.round_s = float(epoch_s), epoch_iters, float(round_s)
        self.energy_saving = energy_saving
        self.colo_slowdown = dict(DEFAULT_COLO_SLOWDOWN if colo_slowdown is None else colo_slowdown)
        self.pair_slowdown = dict(pair_slowdown or {})
        self.max_candidates = max_candidates
        self.head_of_line = head_of_line
        self.history: dict[tuple[str, int], list[float]] = {}  # (model, degree) -> [sum, count]
        self.trials: dict[int, _Trial] = {}
        self.tried: dict[int, set[frozenset[int]]] = {}
        self._alone: dict[int, float] = {}

    # -- prediction ------------------------------------------------------------------------------
    def slowdown(self, model: str, degree: int, others: list[str] | None = None) -> float:
        if degree <= 1:
            return 1.0
        h = self.history.get((model, degree))
        if h is not None and h[1] > 0:
            return h[0] / h[1]
        if degree == 2 and others and len(others) == 1 and (model, others[0]) in self.pair_slowdown:
            return self.pair_slowdown[(model, others[0])]
        s = self.colo_slowdown.get(degree)
        if s is not None:
            return s
        return 1.0 + 0.19 * (degree - 1) / 3.0

    def _record(self, model: str, degree: int, slowdown: float) -> None:
        h = self.history.setdefault((model, degree), [0.0, 0.0])
        h[0] += max(1.0, slowdown)
        h[1] += 1.0

    def _alone_speed(self, view: ClusterView, jid: int, job: Job, gpus: GpuSet) -> float | None:
        a = self._alone.get(jid)
        if a is not None:
            return a
        alloc = view.running.get(jid)
        if alloc is not None:
            ips = view.progress(jid).iters_per_s
            if ips > 0:
                deg = int(np.asarray(view.n_resident)[list(alloc.gpus)].max())
                if deg <= 1:
                    self._alone[jid] = ips
                    return ips
                return ips * self.slowdown(job.model, deg)
        return self._catalog_speed(view, job, gpus)

    @staticmethod
    def _catalog_speed(view: ClusterView, job: Job, gpus: GpuSet) -> float | None:
        """Alone speed from the catalogue: GPU speed / base iteration time; None for unknown models."""
        try:
            base = model_spec(job.model).base_iter_s
        except KeyError:
            return None
        try:
            speed = gpu_spec(view.topology.gpu_type_of(gpus[0])).speed
        except KeyError:
            speed = 1.0
        return speed / base

    # -- candidates ------------------------------------------------------------------------------
    def _static(self, view: ClusterView, job: Job) -> np.ndarray:
        topo = view.topology
        m = np.asarray(topo.gpu_mem_gb) >= job.mem_gb - 1e-9
        if job.gpu_type is not None:
            t = topo.gpu_types.index(job.gpu_type) if job.gpu_type in topo.gpu_types else -1
            m &= topo.gpu_type_idx == t
        return m

    def candidates(self, view: ClusterView, w: _Work, job: Job) -> list[GpuSet]:
        n = job.num_gpus
        free_mem = w.mem_total - w.mem_used
        ok = (
            w.up
            & (w.n_res >= 1)
            & (w.n_res < view.max_jobs_per_gpu)
            & (w.util < self.util_thr)
            & (w.mem_used < self.mem_thr * w.mem_total)
            & (free_mem >= job.mem_gb - 1e-9)
            & ~w.hp
            & self._static(view, job)
        )
        idx = np.flatnonzero(ok)
        if idx.size < n:
            return []
        sets: set[GpuSet] = set()
        for gpus in w.gpus_of.values():
            if len(gpus) == n and bool(ok[list(gpus)].all()):
                sets.add(tuple(sorted(gpus)))
        node = view.topology.gpu_node
        by_util = idx[np.lexsort((idx, -w.util[idx]))]
        sets.add(tuple(sorted(int(g) for g in by_util[:n])))
        for k in np.unique(node[idx]):
            on_k = by_util[node[by_util] == k]
            if on_k.size >= n:
                sets.add(tuple(sorted(int(g) for g in on_k[:n])))
        ranked = sorted(
            sets, key=lambda s: (-float(w.util[list(s)].mean()), np.unique(node[list(s)]).size, s)
        )
        return ranked[: self.max_candidates]

    def feasible(self, view: ClusterView, w: _Work, job: Job, gpus: GpuSet) -> bool:
        """Deadline and alpha checks for co-locating ``job`` on ``gpus`` (module docstring, step 3)."""
        now = view.now
        on = set(gpus)
        affected: set[int] = set()
        for g in gpus:
            affected.update(w.residents(g))
        deltas: list[float] = []
        items: list[tuple[int, Job, GpuSet, int, int]] = [(job.job_id, job, gpus, 1, w.degree(gpus) + 1)]
        for a in sorted(affected):
            ga = w.gpus_of[a]
            after = max(int(w.n_res[g]) + (1 if g in on else 0) for g in ga)
            items.append((a, view.job(a), ga, w.degree(ga), after))
        for a, ja, ga, before, after in items:
            others = None
            if self.pair_slowdown and after == 2:
                if a == job.job_id:
                    mates = set(affected)
                else:
                    mates = {j for g in ga for j in w.residents(g) if j != a} | {job.job_id}
                others = [job.model if m == job.job_id else view.job(m).model for m in mates]
            alone = self._alone_speed(view, a, ja, ga)
            s_before = self.slowdown(ja.model, before)
            s_after = self.slowdown(ja.model, after, others)
            deltas.append(s_after / s_before - 1.0)
            if ja.deadline_s is None:
                continue
            if alone is None or alone <= 0:
                continue
            rem = view.progress(a).remaining_iters
            if now + rem * s_after / alone > ja.deadline_s and now + rem * s_before / alone <= ja.deadline_s:
                return False
        mean_delta = sum(deltas) / len(deltas)
        return (1.0 - self.alpha) * mean_delta <= self.alpha * self.energy_saving + 1e-12

    def _choose(self, view: ClusterView, w: _Work, job: Job) -> tuple[GpuSet | None, bool]:
        if job.priority <= 0:
            tried = self.tried.get(job.job_id, set())
            for s in self.candidates(view, w, job):
                if frozenset(s) not in tried and self.feasible(view, w, job, s):
                    return s, True
        free = w.up & (w.n_res == 0) & self._static(view, job)
        return packed_gpus(free, job.num_gpus, view.topology.node_first_gpu), False

    # -- decide ----------------------------------------------------------------------------------
    def decide(self, view: ClusterView) -> list[Decision]:
        if not view.pending and not self.trials:
            return []
        w = _Work(view)
        out: list[Decision] = []
        self._check_trials(view, w, out)
        for job in view.pending:
            gpus, colo = self._choose(view, w, job)
            if gpus is None:
                if self.head_of_line:
                    break
                continue
            w.add(job.job_id, gpus, job)
            out.append(Start(job.job_id, gpus))
            self._after_place(view, job, gpus, colo)
        return out

    def _after_place(self, view: ClusterView, job: Job, gpus: GpuSet, colo: bool) -> None:
        if colo:
            self.trials[job.job_id] = _Trial(gpus, view.now, view.progress(job.job_id).done_iters)
        else:
            self.tried.pop(job.job_id, None)

    def _due(self, view: ClusterView, jid: int, t: _Trial) -> bool:
        if self.epoch_iters is not None:
            return view.progress(jid).done_iters - t.start_done >= self.epoch_iters
        return view.now >= t.start_s + self.epoch_s - 1e-6

    def _check_trials(self, view: ClusterView, w: _Work, out: list[Decision]) -> None:
        now = view.now
        for jid, t in list(self.trials.items()):
            if jid not in view.running or set(view.running[jid].gpus) != set(t.gpus):
                del self.trials[jid]
                continue
            if not self._due(view, jid, t):
                continue
            del self.trials[jid]
            affected = {jid}
            for g in t.gpus:
                affected.update(w.residents(g))
            violated = False
            for a in sorted(affected):
                ja = view.job(a)
                p = view.progress(a)
                if p.iters_per_s <= 0:
                    continue
                deg = w.degree(w.gpus_of[a])
                alone = (
                    self._alone_speed(view, a, ja, w.gpus_of[a])
                    if a != jid
                    else self._alone.get(a) or self._catalog_speed(view, ja, w.gpus_of[a])
                )
                if alone is not None and deg > 1:
                    self._record(ja.model, deg, alone / p.iters_per_s)
                if ja.deadline_s is not None and now + p.remaining_iters / p.iters_per_s > ja.deadline_s:
                    if alone is None or now + p.remaining_iters / alone <= ja.deadline_s:
                        violated = True
            if not violated:
                self.tried.pop(jid, None)
                continue
            job = view.job(jid)
            self.tried.setdefault(jid, set()).add(frozenset(t.gpus))
            w.remove(jid, w.gpus_of[jid], job)
            gpus, colo = self._choose(view, w, job)
            if gpus is None:
                out.append(Preempt(jid))
                continue
            w.add(jid, gpus, job)
            out.append(Migrate(jid, gpus))
            self._after_place(view, job, gpus, colo)
