"""Placement by hand: packed (CALIBRATION.md definition), PM-First, PAL clustering and L x V order."""

from __future__ import annotations

import numpy as np
import pytest
from bl_helpers import job, make_state, make_view

from gpusched.baselines.pal import ARTIFACT_LF, PALPlacement, _FactorSource, cluster_factors
from gpusched.baselines.placement import PackedPlacement, packed_gpus, pm_first_gpus
from gpusched_env.placement import PlacementContext

FIRST_4x4 = np.array([0, 4, 8, 12, 16])


def free_mask(free: list[int], n: int = 16) -> np.ndarray:
    m = np.zeros(n, dtype=bool)
    m[free] = True
    return m


# node 0: GPUs 1,2,3 free (3); node 1: 4..7 (4); node 2: 8,9 (2); node 3: 12 (1)
MIXED = [1, 2, 3, 4, 5, 6, 7, 8, 9, 12]


@pytest.mark.parametrize(
    ("free", "n", "expected"),
    [
        (MIXED, 1, (12,)),  # node 3 has exactly 1 free
        (MIXED, 2, (8, 9)),  # node 2 has exactly 2
        (MIXED, 3, (1, 2, 3)),  # node 0 has exactly 3
        (MIXED, 4, (4, 5, 6, 7)),  # node 1 has exactly 4
        ([1, 2, 3, 4, 5, 6, 7], 2, (1, 2)),  # no node with exactly 2: smallest with >= 2 is node 0 (3)
        ([0, 1, 2, 3, 5, 6, 7], 1, (5,)),  # counts 4, 3: none with exactly 1; smallest >= 1 is node 1
        ([1, 2, 3, 6, 7, 11], 5, (1, 2, 3, 6, 7)),  # spread: node 0 (3), then node 1 (2)
        ([1, 2, 3, 6, 7, 11], 4, (1, 2, 3, 6)),  # spread: node 0 (3), then 1 from node 1 (2 free)
        ([3, 6, 11, 15], 2, (3, 6)),  # all nodes have 1: spread, lowest node ids on ties
        ([1, 2, 3], 4, None),
    ],
)
def test_packed_examples(free, n, expected):
    assert packed_gpus(free_mask(free), n, FIRST_4x4) == expected


def test_packed_respects_memory_and_type():
    s = make_state(2, 2, mem_gb=16.0)
    s.submit(job(0, 2, mem=20.0))  # larger than any GPU
    ctx = PlacementContext(make_view(s))
    assert PackedPlacement().place(s.jobs[0], ctx) is None


def test_pm_first_hand_example():
    # 2 nodes x 4 GPUs; levels (0 = fastest): node 0 = [0, 0, 1, 1], node 1 = [0, 1, 1, 1].
    level = np.array([0, 0, 1, 1, 0, 1, 1, 1])
    node = np.repeat([0, 1], 4)
    cand = np.arange(8)
    # Groups (node, level) -> size: (0,0)=2 {0,1}, (1,0)=1 {4}, (0,1)=2 {2,3}, (1,1)=3 {5,6,7}.
    # N=1: keys (level, |size-1|, id): 4:(0,0) 0:(0,1) 1:(0,1) 2:(1,1) 3:(1,1) 5..7:(1,2) -> [4,0,1,2,3,5,6,7]
    assert pm_first_gpus(cand, 1, level, node) == (4,)
    # N=2: 0:(0,0) 1:(0,0) 4:(0,1) 2:(1,0) 3:(1,0) 5,6,7:(1,1) -> [0,1,4,2,3,5,6,7]
    assert pm_first_gpus(cand, 2, level, node) == (0, 1)
    # N=4: 0,1:(0,2) 4:(0,3) 5,6,7:(1,1) 2,3:(1,2) -> [0,1,4,5,6,7,2,3]
    assert pm_first_gpus(cand, 4, level, node) == (0, 1, 4, 5)
    # N=3: 0:(0,1) 1:(0,1) 4:(0,2) 5,6,7:(1,0) 2,3:(1,1) -> [0,1,4,5,6,7,2,3]
    assert pm_first_gpus(cand, 3, level, node) == (0, 1, 4)
    assert pm_first_gpus(cand, 5, level, node) == (0, 1, 4, 5, 6)
    assert pm_first_gpus(cand, 9, level, node) is None


def test_pal_clustering_and_lv_order():
    sd = np.ones((8, 4))
    sd[:, 0] = [1.0, 1.0, 1.0, 1.0, 1.2, 1.2, 1.2, 1.2]
    f = cluster_factors(sd, k1=2)
    a = f.classes[0]
    # centroids 1.0 and 1.2, median centroid 1.1 -> sf 1/1.1 and 1.2/1.1
    fast, slow = 1.0 / 1.1, 1.2 / 1.1
    np.testing.assert_allclose(a.sf, [fast] * 4 + [slow] * 4)
    assert a.n_outliers == 0
    got = [(round(e.sf, 4), e.within, round(e.product, 4)) for e in a.lv_order]
    assert got == [
        (round(fast, 4), True, round(fast, 4)),  # 0.9091 within
        (round(slow, 4), True, round(slow, 4)),  # 1.0909 within
        (round(fast, 4), False, round(fast * 1.7, 4)),  # 1.5455 across
        (round(slow, 4), False, round(slow * 1.7, 4)),  # 1.8545 across
    ]
    b = f.classes[1]  # all equal: one cluster, sf 1
    assert [(e.sf, e.within, e.product) for e in b.lv_order] == [(1.0, True, 1.0), (1.0, False, 1.7)]
    # artifact's per-class lf: class A across penalty 1.16
    fa = cluster_factors(sd, k1=2, lf=ARTIFACT_LF)
    assert [round(e.product, 4) for e in fa.classes[0].lv_order] == [0.9091, 1.0545, 1.0909, 1.2655]


def test_pal_silhouette_search_vs_artifact_k1_and_outliers():
    sd = np.ones((8, 4))
    sd[:, 0] = [1.0, 1.0, 1.0, 1.1, 1.1, 1.1, 1.3, 1.3]
    assert cluster_factors(sd).classes[0].k1 == 3  # silhouette picks the three groups
    assert cluster_factors(sd, k1=2).classes[0].k1 == 2  # artifact: always 2
    sd2 = np.ones((21, 4))
    sd2[:, 0] = [1.0] * 10 + [1.05] * 10 + [2.0]  # 2.0 > mean + 3 sigma
    c = cluster_factors(sd2, k1=2).classes[0]
    assert c.n_outliers == 1
    assert c.values.size == 3  # k = K1 + 1 outlier
    np.testing.assert_allclose(c.values, [1.0 / 1.05, 1.0, 2.0 / 1.05])


def _pal_ctx(free: list[int], lf: float = 1.7):
    # 3 nodes x 4 GPUs; class A: node 0 = F F S S, node 1 = F S S S, node 2 = S S S S
    s = make_state(3, 4)
    sd = np.full((12, 4), 1.2)
    sd[[0, 1, 4], 0] = 1.0
    view = make_view(s, slowdown=sd)
    m = np.zeros(12, dtype=bool)
    m[free] = True
    return PALPlacement(_FactorSource(2, 3.0, lf)), PlacementContext(view, m)


def test_pal_placement_walks_lv_order():
    j = job(0, 2)
    pal, ctx = _pal_ctx(list(range(12)))
    assert pal.place(j, ctx) == (0, 1)  # within-node, fast
    # GPU 0 busy: no node has 2 fast GPUs; lf 1.7 -> next entry is (slow, within):
    # every node reaches max = slow; ties -> more eligible GPUs (nodes 1, 2 have 4), lowest id -> node 1
    pal, ctx = _pal_ctx(list(range(1, 12)))
    assert pal.place(j, ctx) == (4, 5)
    # with lf 1.1, (fast, across, 1.0) precedes (slow, within, 1.09): PM-First over fast GPUs 1 and 4
    pal, ctx = _pal_ctx(list(range(1, 12)), lf=1.1)
    assert pal.place(j, ctx) == (1, 4)
    # N = 1 and N > GPUs per node use PM-First over all eligible GPUs
    assert pal.place(job(1, 1), ctx) == (1,)  # fast, alone of its level on node 0 (best fit)
    assert pal.place(job(2, 6), ctx) is not None


def test_pal_placement_memo_follows_mask_and_factors():
    s = make_state(3, 4)
    sd = np.full((12, 4), 1.2)
    sd[[0, 1, 4], 0] = 1.0  # class A: node 0 = F F S S, node 1 = F S S S, node 2 = S S S S
    pal, j = PALPlacement(_FactorSource(2, 3.0, 1.7)), job(0, 2)
    ctx = PlacementContext(make_view(s, slowdown=sd), np.ones(12, dtype=bool))
    assert pal.place(j, ctx) == (0, 1)
    ctx.take((0,))
    assert pal.place(j, ctx) == (4, 5)  # another eligible mask: placed again, not remembered
    # the same cluster, job and mask under other factors (node 2 now holds the fast GPUs): placed again
    sd2 = np.full((12, 4), 1.2)
    sd2[8:, 0] = 1.0
    assert pal.place(j, PlacementContext(make_view(s, slowdown=sd2), np.ones(12, dtype=bool))) == (8, 9)
