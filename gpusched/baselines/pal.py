"""PAL (Jain et al., SC'24) and its PM-First baseline, as CALIBRATION.md describes them.

Read from the authors' artifact ``hal-uw/blox-pal`` (``placement/pal.py``, ``placement/pmfirst.py``,
``schedulers/fifo.py``, ``fifo_pal.py``) to pin details; this is an independent implementation.

**Offline clustering** (:func:`cluster_factors`, once per distinct ``view.slowdown`` matrix, cached).
For each performance class (column A..D of the n_gpus x 4 slowdown profile, >1 = slower):

1. outliers = GPUs with value > mean + 3 sigma (sample std, ddof=1, as pandas in the artifact);
2. K1 = the k in 2..10 with the best silhouette score of K-Means on the non-outlier values
   (scikit-learn). ``k1=2`` reproduces the artifact, whose search returns from inside its loop
   after k=2 and so always yields 2. k is capped so that the silhouette is defined;
3. K-Means with k = K1 + #outliers on all values (capped at the number of distinct values);
   deterministic: ``init="k-means++"``, ``n_init=10`` (the artifact's scikit-learn default at the
   time), ``random_state=1`` (the artifact's);
4. a GPU's slowdown factor sf = its centroid / median of the centroids.

**L x V order** per class: for every distinct sf value s, the entries (s, within-node, s) and
(s, across-node, s x lf), sorted by the product (ties: smaller s first, then within before across).
``lf`` defaults to 1.7 (CALIBRATION.md); it may be a per-class mapping. The artifact
(``placement/pal.py``, ``get_slowdown_factors``) defines a per-class ``lf_model`` (A 1.16, B 1.0,
C 1.0, D 1.10) but does not use it: ``lf_across = locality_penalty`` (the ``--locality-penalty``
argument, default 1.7), the same constant its simulator charges a job that spans nodes
(``blox_manager._get_locality_penalty``). ``lf=ARTIFACT_LF`` gives the unused per-class variant.

**Placement of one job** (:class:`PALPlacement`, N GPUs, class c, on the eligible free GPUs):
if 1 < N <= GPUs per node (the largest node), walk the L x V order: a within-node entry (s) takes the
node whose eligible GPUs with sf <= s include N, minimising the max sf of the chosen N (ties: the
node with more such GPUs, then the lowest node id, as the artifact's ``value_counts`` order) and
takes the lexicographically first N GPU ids of that node with sf <= that max (the artifact takes the
first minimising combination in ``itertools.combinations`` order); an across-node entry (s) runs
PM-First on the eligible GPUs with sf <= s if there are at least N. Otherwise (N = 1 or N larger
than a node) PM-First on all eligible GPUs. PM-First: :func:`gpusched.baselines.placement.pm_first_gpus`.

**Rounds** (every 360 s, non-sticky, :class:`gpusched.baselines.scheduler.QueueScheduler`): release all GPUs;
take the longest FIFO prefix (arrival order) whose GPU demand fits the usable GPUs; place it in class
order A<B<C<D (stable, FIFO inside a class); the first job that cannot be placed stops the round
(head-of-line); running jobs placed on exactly their GPUs get no decision, others migrate or are
preempted. ``events=False``: like the artifact, decisions happen only at round boundaries. The
artifact then also tries the jobs after the prefix in FIFO order; the first of them cannot fit by
construction (its demand exceeds what the prefix left), so stopping after the prefix is the same.

``pm_first``: the artifact's PM-First policy runs exactly the PAL round (non-sticky, class-ordered
prefix) but places every job with PM-First on the same clustered factors; so does this one.

The scheduler sees only the clustered factors; the backend keeps using the true per-GPU values.
"""

from __future__ import annotations

import hashlib
import warnings
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from gpusched.baselines.ordering import FifoOrder
from gpusched.baselines.placement import MEMO_MAX, PMFirstPlacement, pm_first_gpus
from gpusched.baselines.scheduler import QueueScheduler
from gpusched_env.placement import GpuSet, Placement, PlacementContext
from gpusched_env.topology import Topology
from gpusched_env.types import PERF_CLASSES, Job
from gpusched_env.view import ClusterView

DEFAULT_LF = 1.7
"""Locality penalty for across-node entries of the L x V order (CALIBRATION.md)."""

ARTIFACT_LF: dict[str, float] = {"A": 1.16, "B": 1.0, "C": 1.0, "D": 1.10}
"""The per-class ``lf_model`` defined (but commented out of use) in the artifact's ``placement/pal.py``."""

ROUND_S = 360.0
KMEANS_SEED = 1  # the artifact's random_state
KMEANS_N_INIT = 10


@dataclass(frozen=True)
class LVEntry:
    """One entry of the L x V order: factor level, within-node?, factor x locality penalty."""

    level: int
    sf: float
    within: bool
    product: float


@dataclass(frozen=True)
class ClassFactors:
    """Clustering result for one performance class."""

    sf: np.ndarray  # (n_gpus,) float: slowdown factor = centroid / median centroid
    level: np.ndarray  # (n_gpus,) int: rank of sf among `values`
    values: np.ndarray  # (n_levels,) sorted distinct sf values
    k1: int
    n_outliers: int
    lv_order: tuple[LVEntry, ...]


@dataclass(frozen=True)
class ClusterFactors:
    """Clustered slowdown factors of all classes; ``levels`` is (n_gpus, 4) int."""

    classes: tuple[ClassFactors, ...]
    levels: np.ndarray


def _silhouette_k1(x: np.ndarray, k_max: int = 10) -> int:
    from sklearn.cluster import KMeans
    from sklearn.metrics import silhouette_score

    n_distinct = np.unique(x).size
    best_k, best_s = 2, -np.inf
    for k in range(2, min(k_max, n_distinct, x.size - 1) + 1):
        labels = KMeans(
            n_clusters=k, init="k-means++", n_init=KMEANS_N_INIT, random_state=KMEANS_SEED
        ).fit_predict(x.reshape(-1, 1))
        if not 2 <= np.unique(labels).size <= x.size - 1:
            continue
        s = float(silhouette_score(x.reshape(-1, 1), labels))
        if s > best_s:
            best_k, best_s = k, s
    return best_k


def _cluster_one(x: np.ndarray, k1: int | None, sigma: float, lf: float) -> ClassFactors:
    sf, level, values, k1_used, n_out = _cluster_sf(x, k1, sigma)
    return _with_lv_order(sf, level, values, k1_used, n_out, lf)


def _cluster_sf(x: np.ndarray, k1: int | None, sigma: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, int]:
    """The clustering of one class (no locality penalty): (sf, level, values, k1 used, outliers)."""
    from sklearn.cluster import KMeans

    x = np.asarray(x, dtype=np.float64)
    n_distinct = np.unique(x).size
    outliers = x > x.mean() + sigma * (x.std(ddof=1) if x.size > 1 else 0.0)
    n_out = int(outliers.sum())
    if k1 is None:
        inliers = x[~outliers]
        k1_used = _silhouette_k1(inliers) if np.unique(inliers).size >= 3 else 2
    else:
        k1_used = k1
    k = max(1, min(k1_used + n_out, n_distinct))
    if k == 1:
        sf = np.ones_like(x)
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            km = KMeans(n_clusters=k, init="k-means++", n_init=KMEANS_N_INIT, random_state=KMEANS_SEED)
            labels = km.fit_predict(x.reshape(-1, 1))
        centers = km.cluster_centers_[:, 0]
        sf = centers[labels] / float(np.median(centers))
    values, level = np.unique(sf, return_inverse=True)
    return sf, level.astype(np.int64), values, k1_used, n_out


def _with_lv_order(
    sf: np.ndarray, level: np.ndarray, values: np.ndarray, k1_used: int, n_out: int, lf: float
) -> ClassFactors:
    """One class's factors with its L x V order for the locality penalty ``lf``."""
    entries = [LVEntry(i, float(s), True, float(s)) for i, s in enumerate(values)]
    entries += [LVEntry(i, float(s), False, float(s) * lf) for i, s in enumerate(values)]
    entries.sort(key=lambda e: (e.product, e.sf, not e.within))
    return ClassFactors(sf, level, values, k1_used, n_out, tuple(entries))


_CACHE: dict[tuple[object, ...], ClusterFactors] = {}
_CACHE_MAX = 32
_SF_CACHE: dict[tuple[object, ...], tuple[tuple[np.ndarray, np.ndarray, np.ndarray, int, int], ...]] = {}
"""The clustering by profile, ``k1`` and ``sigma`` (the locality penalty only orders the L x V
entries: PAL and PM-First, which plan with different penalties, share one clustering)."""


def cluster_factors(
    slowdown: np.ndarray,
    k1: int | None = None,
    sigma: float = 3.0,
    lf: float | Mapping[str, float] = DEFAULT_LF,
) -> ClusterFactors:
    """PAL's offline clustering of an (n_gpus, 4) slowdown profile; cached per distinct input."""
    a = np.ascontiguousarray(slowdown, dtype=np.float64)
    lfs = tuple(float(lf[c]) if isinstance(lf, Mapping) else float(lf) for c in PERF_CLASSES)
    key = (hashlib.blake2b(a.tobytes(), digest_size=16).hexdigest(), a.shape, k1, sigma, lfs)
    hit = _CACHE.get(key)
    if hit is not None:
        return hit
    if a.ndim != 2 or a.shape[1] != len(PERF_CLASSES):
        raise ValueError(f"slowdown must be (n_gpus, {len(PERF_CLASSES)}), got {a.shape}")
    from threadpoolctl import threadpool_limits

    sf_key = key[:4]
    per_class = _SF_CACHE.get(sf_key)
    if per_class is None:
        with threadpool_limits(1):  # tiny 1-D problems: thread start-up costs more than the work
            per_class = tuple(_cluster_sf(a[:, c], k1, sigma) for c in range(len(PERF_CLASSES)))
        if len(_SF_CACHE) >= _CACHE_MAX:
            _SF_CACHE.pop(next(iter(_SF_CACHE)))
        _SF_CACHE[sf_key] = per_class
    classes = tuple(_with_lv_order(*per_class[c], lfs[c]) for c in range(len(PERF_CLASSES)))
    out = ClusterFactors(classes, np.stack([cf.level for cf in classes], axis=1))
    if len(_CACHE) >= _CACHE_MAX:
        _CACHE.pop(next(iter(_CACHE)))
    _CACHE[key] = out
    return out


class _FactorSource:
    """Clustered factors of the view's slowdown matrix, remembered for the last matrix seen."""

    def __init__(self, k1: int | None, sigma: float, lf: float | Mapping[str, float]) -> None:
        if k1 is not None and not 1 <= k1 <= 10:
            raise ValueError(f"pal.k1 must be in 1..10 or None (silhouette search), got {k1}")
        if sigma <= 0:
            raise ValueError(f"pal.outlier_sigma must be > 0, got {sigma}")
        import sklearn.cluster  # noqa: F401  (load the clustering library now, not at the first decision)
        lfs = lf.values() if isinstance(lf, Mapping) else [lf]
        if any(v < 1.0 for v in lfs):
            raise ValueError(f"pal.lf must be >= 1, got {lf}")
        if isinstance(lf, Mapping) and set(lf) != set(PERF_CLASSES):
            raise ValueError(f"pal.lf mapping must give classes {PERF_CLASSES}, got {sorted(lf)}")
        self.k1, self.sigma, self.lf = k1, sigma, lf
        self._last: tuple[tuple[object, ...], bytes, ClusterFactors] | None = None
        self._view: ClusterView | None = None  # the view last asked about (one per decision point)

    def factors(self, view: ClusterView) -> ClusterFactors:
        last = self._last
        if view is self._view and last is not None:
            return last[2]  # the same decision point: the same matrix
        s = view.slowdown
        key = s.tobytes()  # a byte compare: cheaper than array_equal on a small matrix
        self._view = view
        if last is not None and last[1] == key and last[0] == (s.dtype, s.shape):
            return last[2]
        f = cluster_factors(s, self.k1, self.sigma, self.lf)
        self._last = ((s.dtype, s.shape), key, f)
        return f

    def levels(self, view: ClusterView) -> np.ndarray:
        return self.factors(view).levels


class PALPlacement:
    """PAL's locality x variability placement (module docstring).

    :meth:`reference_place` states the rule in numpy; :meth:`place` and :meth:`place_batch` run the
    compiled transcription of it (:mod:`gpusched.baselines.pal_kernel`, integer levels only, so the
    same GPUs). A placement is a pure function of the job's class and GPU count, its eligible GPUs
    and the clustered factors; :meth:`place` remembers the last
    :data:`gpusched.baselines.placement.MEMO_MAX` results by (class, count, eligible mask) for the
    current factors and topology. A non-sticky round places a long prefix again from the same free
    GPUs, so the same inputs recur (about a third of the calls on the Philly trace);
    :meth:`place_batch` places a round's whole sequence in one compiled call instead."""

    deterministic = True

    def __init__(self, source: _FactorSource) -> None:
        self.source = source
        self._memo: dict[tuple[int, int, bytes], GpuSet | None] = {}
        self._memo_of: tuple[object, object] | None = None  # (factors, topology) of the memo
        self._arrays: _KernelArrays | None = None

    def _kernel_arrays(self, factors: ClusterFactors, ctx: PlacementContext) -> _KernelArrays:
        a = self._arrays
        topo = ctx.view.topology
        if a is None or a.factors is not factors or a.topology is not topo:
            a = self._arrays = _KernelArrays.of(factors, topo)
        return a

    def place(self, job: Job, ctx: PlacementContext) -> GpuSet | None:
        factors = self.source.factors(ctx.view)
        topo = ctx.view.topology
        memo = self._memo
        of = self._memo_of
        if of is None or of[0] is not factors or of[1] is not topo:
            memo.clear()
            self._memo_of = (factors, topo)
        eligible = ctx.eligible(job)
        key = (job.class_index, job.num_gpus, eligible.tobytes())
        if key in memo:
            return memo[key]
        a = self._kernel_arrays(factors, ctx)
        c, n = job.class_index, job.num_gpus
        out = np.empty(n, dtype=np.int64)
        from gpusched.baselines.pal_kernel import pal_place_k  # numba: loaded by the first placement

        got = pal_place_k(
            a.levels_t[c], a.order_level[c, : a.order_len[c]], a.order_within[c, : a.order_len[c]],
            int(a.n_levels[c]), n, eligible, a.gpu_node, a.n_nodes, a.max_per_node, out,
        )
        gpus = None if got < 0 else tuple(out.tolist())
        if len(memo) >= MEMO_MAX:
            memo.clear()
        memo[key] = gpus
        return gpus

    def place_batch(self, jobs: list[Job], ctx: PlacementContext, stop_at_none: bool) -> list[GpuSet | None]:
        """:meth:`place` for each job in turn, each placed job's GPUs taken from ``ctx.free``; with
        ``stop_at_none`` the list ends at the first job that cannot be placed (included, as None)."""
        if not jobs:
            return []
        factors = self.source.factors(ctx.view)
        a = self._kernel_arrays(factors, ctx)
        k = len(jobs)
        job_class = np.empty(k, dtype=np.int64)
        job_n = np.empty(k, dtype=np.int64)
        job_mask = np.full(k, -1, dtype=np.int64)
        masks: list[np.ndarray] = []
        mask_of: dict[bytes, int] = {}
        for i, job in enumerate(jobs):
            job_class[i] = job.class_index
            job_n[i] = job.num_gpus
            m = ctx.static_mask(job)
            if m is not None:
                b = m.tobytes()
                mi = mask_of.get(b)
                if mi is None:
                    mi = mask_of[b] = len(masks)
                    masks.append(m)
                job_mask[i] = mi
        mask_arr = np.stack(masks) if masks else np.ones((1, ctx.free.size), dtype=bool)
        out = np.empty(int(job_n.sum()), dtype=np.int64)
        out_len = np.empty(k, dtype=np.int64)
        from gpusched.baselines.pal_kernel import place_batch

        done = place_batch(
            a.levels_t, a.order_level, a.order_within, a.order_len, a.n_levels, job_class, job_n, job_mask,
            mask_arr, ctx.free, a.gpu_node, a.n_nodes, a.max_per_node, stop_at_none, out, out_len,
        )
        flat = out.tolist()
        result: list[GpuSet | None] = []
        start = 0
        for i in range(done):
            n = int(job_n[i])
            result.append(tuple(flat[start : start + n]) if out_len[i] >= 0 else None)
            start += n
        return result

    @staticmethod
    def reference_place(cf: ClassFactors, n: int, eligible: np.ndarray, ctx: PlacementContext) -> GpuSet | None:
        """The placement of one job in numpy (the definition the compiled kernel transcribes)."""
        cand = np.flatnonzero(eligible)
        if cand.size < n:
            return None
        level = cf.level
        if not 1 < n <= ctx.view.topology.max_gpus_per_node:
            return pm_first_gpus(cand, n, level, ctx.gpu_node)
        # cum[k, L]: candidates on node k with level <= L (one count for every entry of the order)
        lv, nodes = level[cand], ctx.gpu_node[cand]
        n_lv, n_nodes = cf.values.size, ctx.node_first.size - 1
        cum = np.bincount(nodes * n_lv + lv, minlength=n_nodes * n_lv).reshape(n_nodes, n_lv).cumsum(axis=1)
        total = cum.sum(axis=0).tolist()  # candidates with level <= L
        most = cum.max(axis=0).tolist()  # the most candidates with level <= L on one node
        for e in cf.lv_order:
            if total[e.level] < n:
                continue
            if not e.within:
                return pm_first_gpus(cand[lv <= e.level], n, level, ctx.gpu_node)
            if most[e.level] >= n:  # some node holds n
                return _best_within_node(cand, lv, nodes, cum, e.level, n)
        return None


@dataclass(frozen=True)
class _KernelArrays:
    """The clustered factors and node layout as the compiled placement takes them."""

    factors: ClusterFactors
    topology: Topology
    levels_t: np.ndarray  # (4, n_gpus) int64: level of each GPU per class
    order_level: np.ndarray  # (4, max entries) int64: the L x V order's levels per class
    order_within: np.ndarray  # (4, max entries) bool
    order_len: np.ndarray  # (4,) int64: entries per class
    n_levels: np.ndarray  # (4,) int64
    gpu_node: np.ndarray  # (n_gpus,) int64
    n_nodes: int
    max_per_node: int

    @classmethod
    def of(cls, factors: ClusterFactors, topo: Topology) -> _KernelArrays:
        classes = factors.classes
        width = max(len(cf.lv_order) for cf in classes)
        order_level = np.zeros((len(classes), width), dtype=np.int64)
        order_within = np.zeros((len(classes), width), dtype=bool)
        for c, cf in enumerate(classes):
            for i, e in enumerate(cf.lv_order):
                order_level[c, i] = e.level
                order_within[c, i] = e.within
        return cls(
            factors, topo,
            np.ascontiguousarray(np.stack([cf.level for cf in classes]), dtype=np.int64),
            order_level, order_within,
            np.array([len(cf.lv_order) for cf in classes], dtype=np.int64),
            np.array([cf.values.size for cf in classes], dtype=np.int64),
            np.ascontiguousarray(topo.gpu_node, dtype=np.int64),
            int(topo.node_first_gpu.size - 1), int(topo.max_gpus_per_node),
        )


def _best_within_node(cand: np.ndarray, lv: np.ndarray, nodes: np.ndarray, cum: np.ndarray, cap: int, n: int) -> GpuSet:
    """Among the candidates of level <= ``cap`` (some node holds n of them): the node whose
    candidates hold n with the smallest max level (ties: more such candidates, then the lower node
    id), and its n lowest-id GPUs of level <= that max. ``lv``, ``nodes``: level and node of each
    candidate; ``cum`` as in :meth:`PALPlacement.reference_place`."""
    counts = cum[:, cap]
    ok = np.flatnonzero(counts >= n)
    worst = np.argmax(cum[ok] >= n, axis=1)  # min over N-subsets of the max level, per node
    m = cand.size + 1  # (worst, -count) as one integer; argmin takes the first: the lowest node id
    best = int(np.argmin(worst * m + (m - counts[ok])))
    node, w = int(ok[best]), int(worst[best])
    g = cand[(nodes == node) & (lv <= w)]
    return tuple(g[:n].tolist())


def _class_rank(job: Job) -> float:
    return float(job.class_index)


def make_pal(
    round_s: float = ROUND_S,
    lf: float | Mapping[str, float] = DEFAULT_LF,
    k1: int | None = None,
    outlier_sigma: float = 3.0,
    class_order: bool = True,
) -> QueueScheduler:
    """PAL: FIFO prefix, class order, L x V placement, non-sticky rounds."""
    return _pal_round("pal", PALPlacement(_FactorSource(k1, outlier_sigma, lf)), round_s, class_order)


def make_pm_first(
    round_s: float = ROUND_S, k1: int | None = None, outlier_sigma: float = 3.0, class_order: bool = True
) -> QueueScheduler:
    """PM-First: the PAL round with PM-First placement on the clustered factors (as the artifact)."""
    src = _FactorSource(k1, outlier_sigma, DEFAULT_LF)
    return _pal_round("pm_first", PMFirstPlacement(src.levels), round_s, class_order)


def _pal_round(name: str, placement: Placement, round_s: float, class_order: bool) -> QueueScheduler:
    """PAL's round: FIFO prefix, non-sticky, head-of-line, optional class order for placement."""
    return QueueScheduler(
        name,
        FifoOrder(),
        placement,
        sticky=False,
        preemptive=True,
        round_s=round_s,
        head_of_line=True,
        events=False,
        placement_order=_class_rank if class_order else None,
    )
