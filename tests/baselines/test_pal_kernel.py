"""The compiled PAL placement (gpusched.baselines.pal_kernel) picks the GPUs of its numpy definition
(PALPlacement.reference_place, pm_first_gpus): hand-made cases and random clusters, factors and
free masks, one job at a time and as a round's batch; so do PMFirstPlacement and the compiled packed
placement (gpusched.baselines.placement_kernel, against packed_gpus_numpy)."""

from __future__ import annotations

import numpy as np
import pytest
from bl_helpers import job, make_view

from gpusched.baselines.pal import ClassFactors, ClusterFactors, LVEntry, PALPlacement
from gpusched.baselines.pal_kernel import pal_place_k, pm_first_k
from gpusched.baselines.placement import PMFirstPlacement, packed_gpus, packed_gpus_numpy, pm_first_gpus
from gpusched_env.allocation import ClusterState
from gpusched_env.placement import GpuSet, PlacementContext
from gpusched_env.topology import NodeGroup, Topology
from gpusched_env.view import ClusterView


def _pm_first_kernel(cand: np.ndarray, n: int, level: np.ndarray, node: np.ndarray) -> GpuSet | None:
    out = np.empty(max(n, 1), dtype=np.int64)
    got = pm_first_k(cand.astype(np.int64), n, level.astype(np.int64), node.astype(np.int64),
                     int(node.max()) + 1, int(level.max()) + 1, out)
    return None if got < 0 else tuple(out[:got].tolist())


def test_pm_first_kernel_hand_example():
    """test_pm_first_hand_example's cluster (its expectations worked by hand), every size, with and without GPU 4."""
    level, node = np.array([0, 0, 1, 1, 0, 1, 1, 1]), np.repeat([0, 1], 4)
    for cand in (np.arange(8), np.array([0, 1, 2, 3, 5, 6, 7])):
        got = [_pm_first_kernel(cand, n, level, node) for n in range(1, 10)]
        assert got == [pm_first_gpus(cand, n, level, node) for n in range(1, 10)]
    assert got[2] == (0, 1, 5) and got[7:] == [None, None]  # without GPU 4: (0,0) {0,1}, then 5 (|3-3| = 0)


class _Source:
    """A factor source that returns given factors (no clustering)."""

    def __init__(self, factors: ClusterFactors) -> None:
        self.f = factors

    def factors(self, view: ClusterView) -> ClusterFactors:
        return self.f


def _class_factors(level: np.ndarray, values: np.ndarray, lf: float) -> ClassFactors:
    """Factors of one class from levels and sorted distinct values, the L x V order as _cluster_one builds it."""
    entries = [LVEntry(i, float(s), True, float(s)) for i, s in enumerate(values)]
    entries += [LVEntry(i, float(s), False, float(s) * lf) for i, s in enumerate(values)]
    entries.sort(key=lambda e: (e.product, e.sf, not e.within))
    return ClassFactors(values[level], level.astype(np.int64), values, 2, 0, tuple(entries))


def _factors(classes: list[ClassFactors]) -> ClusterFactors:
    return ClusterFactors(tuple(classes), np.stack([c.level for c in classes], axis=1))


def _ctx(topo: Topology, free: np.ndarray) -> PlacementContext:
    return PlacementContext(make_view(ClusterState(topo, 4)), free)


def test_pal_kernel_hand_example():
    # 3 nodes x 4 GPUs; class A levels: node 0 = 0 0 1 1, node 1 = 0 1 1 1, node 2 = 1 1 1 1
    topo = Topology.build([NodeGroup(3, 4)])
    level = np.array([0, 0, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1])
    cf = _class_factors(level, np.array([1.0, 1.2]), 1.7)
    pal = PALPlacement(_Source(_factors([cf] * 4)))  # type: ignore[arg-type]
    # within-node on the fast level: node 0 holds GPUs 0, 1
    assert pal.place(job(0, 2), _ctx(topo, np.ones(12, dtype=bool))) == (0, 1)
    # GPU 0 taken: next entry (level 1, within): every node reaches level 1; more eligible GPUs of
    # level <= 1 wins (nodes 1 and 2 have 4), then the lower id: node 1, its GPUs 4, 5
    free = np.ones(12, dtype=bool)
    free[0] = False
    assert pal.place(job(0, 2), _ctx(topo, free)) == (4, 5)
    # lf 1.1: (fast, across, 1.1) comes before (slow, within, 1.2): PM-First on fast GPUs 1 and 4
    pal11 = PALPlacement(_Source(_factors([_class_factors(level, np.array([1.0, 1.2]), 1.1)] * 4)))  # type: ignore[arg-type]
    assert pal11.place(job(0, 2), _ctx(topo, free)) == (1, 4)
    # the batch: the same jobs in turn on one mask; the 12-GPU job cannot fit, the batch stops there
    ctx = _ctx(topo, np.ones(12, dtype=bool))
    got = pal.place_batch([job(0, 2), job(1, 2), job(2, 12), job(3, 1)], ctx, True)
    # 2nd job: only GPU 4 is left at level 0; at level 1 every node holds 2, nodes 1 and 2 hold the
    # most (4 each), the lower id wins: node 1, GPUs 4, 5
    assert got == [(0, 1), (4, 5), None]
    assert ctx.free.tolist() == [False, False, True, True, False, False] + [True] * 6


def _random_case(rng: np.random.Generator) -> tuple[Topology, list[ClassFactors]]:
    sizes = rng.integers(1, 9, size=int(rng.integers(1, 7)))
    topo = Topology.build([NodeGroup(1, int(s)) for s in sizes])
    classes = []
    for _ in range(4):
        n_lv = int(rng.integers(1, 5))
        level = rng.integers(0, n_lv, size=topo.n_gpus)
        _, level = np.unique(level, return_inverse=True)  # every level used, as np.unique makes them
        n_lv = int(level.max()) + 1
        values = np.sort(rng.choice([0.8, 0.9, 1.0, 1.05, 1.2, 1.5, 2.0], size=n_lv, replace=False))
        classes.append(_class_factors(level, values, float(rng.choice([1.0, 1.1, 1.7, 3.0]))))
    return topo, classes


@pytest.mark.parametrize("seed", range(4))
def test_pal_kernel_matches_reference_on_random_inputs(seed):
    rng = np.random.default_rng(seed)
    for _ in range(60):
        topo, classes = _random_case(rng)
        n_gpus = topo.n_gpus
        node = topo.gpu_node.astype(np.int64)
        for _ in range(8):
            free = rng.random(n_gpus) < rng.random()
            ctx = _ctx(topo, free)
            c = int(rng.integers(0, 4))
            cf = classes[c]
            for n in range(1, n_gpus + 2):
                want = PALPlacement.reference_place(cf, n, free, ctx)
                out = np.empty(n, dtype=np.int64)
                lv = np.array([e.level for e in cf.lv_order], dtype=np.int64)
                within = np.array([e.within for e in cf.lv_order])
                got = pal_place_k(cf.level, lv, within, cf.values.size, n, free, node, topo.n_nodes,
                                  topo.max_gpus_per_node, out)
                assert (None if got < 0 else tuple(out[:got].tolist())) == want, (seed, n, free, cf.level)
                cand = np.flatnonzero(free)
                if cand.size:
                    assert _pm_first_kernel(cand, n, cf.level, node) == pm_first_gpus(cand, n, cf.level, node)


@pytest.mark.parametrize("seed", range(3))
def test_pal_batch_matches_one_at_a_time(seed):
    rng = np.random.default_rng(100 + seed)
    for _ in range(40):
        topo, classes = _random_case(rng)
        n_gpus = topo.n_gpus
        pal = PALPlacement(_Source(_factors(classes)))  # type: ignore[arg-type]
        jobs = [job(i, int(rng.integers(1, max(2, n_gpus // 2) + 1)), cls=str(rng.choice(list("ABCD"))),
                    mem=float(rng.choice([0.0, 0.0, 40.0]))) for i in range(int(rng.integers(1, 9)))]
        mem = np.where(rng.random(n_gpus) < 0.5, 32.0, 48.0)
        topo = Topology(topo.gpu_node, topo.gpu_rack, topo.gpu_type_idx, mem, topo.node_first_gpu,
                        topo.node_rack, topo.gpu_types)
        free = rng.random(n_gpus) < 0.8
        for stop in (True, False):
            ctx = _ctx(topo, free)
            got = pal.place_batch(jobs, ctx, stop)
            ref_ctx = _ctx(topo, free)
            want: list[GpuSet | None] = []
            for j in jobs:
                g = PALPlacement.reference_place(classes[j.class_index], j.num_gpus, ref_ctx.eligible(j), ref_ctx)
                want.append(g)
                if g is None:
                    if stop:
                        break
                    continue
                ref_ctx.take(g)
            assert got == want
            assert ctx.free.tolist() == ref_ctx.free.tolist()
            # one job at a time through place() (memo and kernel) gives the same GPUs
            one_ctx = _ctx(topo, free)
            for j, g in zip(jobs, want, strict=False):
                assert pal.place(j, one_ctx) == g
                if g is not None:
                    one_ctx.take(g)


@pytest.mark.parametrize("seed", range(2))
def test_pm_first_placement_compiled_equals_numpy(seed):
    """PMFirstPlacement.place (the compiled PM-First on per-class level rows, remembered per levels
    array) picks what pm_first_gpus picks, on random clusters, levels, free masks and sizes; levels
    that are not non-negative integers take the numpy rule."""
    rng = np.random.default_rng(200 + seed)
    for _ in range(15):
        topo, classes = _random_case(rng)
        levels = _factors(classes).levels
        node = topo.gpu_node
        placement = PMFirstPlacement(lambda view, lv=levels: lv)
        for _ in range(6):
            free = rng.random(topo.n_gpus) < rng.random()
            ctx = _ctx(topo, free)
            cand = np.flatnonzero(free)
            for c in range(4):
                for n in range(1, topo.n_gpus + 2):
                    want = pm_first_gpus(cand, n, levels[:, c], node)
                    assert placement.place(job(0, n, cls="ABCD"[c]), ctx) == want, (seed, n, c, free)
        assert placement._rows is not None and placement._rows[2] is not None  # the compiled path ran
    shifted = PMFirstPlacement(lambda view: levels - 1)  # a negative level: the numpy rule and its error
    with pytest.raises(ValueError, match="negative"):
        shifted.place(job(0, 1), _ctx(topo, np.ones(topo.n_gpus, dtype=bool)))
    assert shifted._rows is not None and shifted._rows[2] is None


@pytest.mark.parametrize("seed", range(2))
def test_packed_compiled_equals_numpy(seed):
    """packed_gpus (one compiled call) picks what packed_gpus_numpy picks, on random clusters, free
    masks and sizes (every branch: exactly n, the fewest above n, spread, too few)."""
    rng = np.random.default_rng(300 + seed)
    branches = set()
    for _ in range(60):
        topo, _ = _random_case(rng)
        first = topo.node_first_gpu
        for _ in range(6):
            free = rng.random(topo.n_gpus) < rng.random()
            counts = np.diff(np.searchsorted(np.flatnonzero(free), first))
            for n in range(0, topo.n_gpus + 2):
                want = packed_gpus_numpy(free, n, first)
                assert packed_gpus(free, n, first) == want, (seed, n, free, first)
                if n and want is not None:
                    branches.add("exact" if (counts == n).any() else "fewest" if (counts > n).any() else "spread")
                elif n:
                    branches.add("none")
    assert branches == {"exact", "fewest", "spread", "none"}
    first = np.array([0, 2, 4])  # a layout that does not span the mask: the numpy rule
    assert packed_gpus(np.ones(5, dtype=bool), 5, first) == packed_gpus_numpy(np.ones(5, dtype=bool), 5, first)


def test_cluster_factors_share_one_clustering_across_penalties(monkeypatch):
    """Two locality penalties on one profile cluster it once (per class) and give what clustering
    afresh with each penalty gives (levels, factors, L x V order)."""
    from gpusched.baselines import pal

    rng = np.random.default_rng(7)
    s = 1.0 + 0.3 * rng.random((12, 4))
    monkeypatch.setattr(pal, "_CACHE", {})
    monkeypatch.setattr(pal, "_SF_CACHE", {})
    real, calls = pal._cluster_sf, []
    monkeypatch.setattr(pal, "_cluster_sf", lambda *a: calls.append(a) or real(*a))
    first = pal.cluster_factors(s, k1=2, lf=1.7)
    second = pal.cluster_factors(s, k1=2, lf=1.1)
    assert len(calls) == 4  # one clustering per class for both
    for got, lf in ((first, 1.7), (second, 1.1)):
        for c in range(4):
            fresh = pal._cluster_one(s[:, c], 2, 3.0, lf)
            cf = got.classes[c]
            assert cf.lv_order == fresh.lv_order and cf.level.tolist() == fresh.level.tolist()
            assert cf.sf.tolist() == fresh.sf.tolist() and cf.values.tolist() == fresh.values.tolist()
    assert first.classes[0].lv_order != second.classes[0].lv_order or first.classes[0].values.size == 1
