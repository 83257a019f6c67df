"""Compiled PAL placement (numba): the placement of :mod:`gpusched.baselines.pal` over integer arrays.

The same rules as :meth:`gpusched.baselines.pal.PALPlacement.reference_place` and
:func:`gpusched.baselines.placement.pm_first_gpus` (their docstrings define them), written as plain
loops. Every comparison is between integers (slowdown *levels*, counts, GPU and node ids), so the
compiled code picks exactly the GPUs the numpy code picks. ``tests/baselines/test_pal_kernel.py``
checks both against each other on hand-made and random inputs.

A non-sticky PAL round places dozens of jobs one after another on a shrinking free mask: one call
of :func:`place_batch` does the whole sequence (about 5 us per job instead of about 100 us in numpy
calls). Compiled code is cached on disk (``cache=True``): the first run on a machine compiles for a
few seconds, later runs load it.

Arrays: ``level`` (n_gpus,) int64, the job class's level of each GPU (0 = fastest);
``gpu_node`` (n_gpus,) int64; the L x V order of a class as ``order_level`` / ``order_within``
(its entries' level and within-node flag, in order). A result is written to ``out`` (GPU ids,
ascending) and its length returned; -1 = cannot be placed.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def pm_first_k(cand, n, level, gpu_node, n_nodes, n_levels, out):  # pragma: no cover (compiled)
    """PM-First over the candidate GPU ids ``cand`` (ascending): order by (level, |candidates
    sharing the GPU's (node, level) - n|, GPU id), take the first ``n``; write them ascending."""
    m = cand.size
    if m < n:
        return -1
    counts = np.zeros(n_nodes * n_levels, dtype=np.int64)
    for i in range(m):
        g = cand[i]
        counts[gpu_node[g] * n_levels + level[g]] += 1
    width = m + n + 1  # score <= m + n: (level, score) as one integer, as pm_first_gpus
    keys = np.empty(m, dtype=np.int64)
    for i in range(m):
        g = cand[i]
        c = counts[gpu_node[g] * n_levels + level[g]]
        score = c - n if c >= n else n - c
        keys[i] = (level[g] * width + score) * m + i  # the position i (ascending ids) breaks ties
    if n == 1:
        best = 0
        for i in range(1, m):
            if keys[i] < keys[best]:
                best = i
        out[0] = cand[best]
        return 1
    _sort(keys)  # keys are distinct (they end with the position), so any sort gives one order
    for i in range(n):
        out[i] = cand[keys[i] % m]
    _sort(out[:n])
    return n


@njit(cache=True, nogil=True)
def _sort(a):  # pragma: no cover (compiled)
    """Sort an int64 array in place (Shell sort, Ciura's gaps; a hand loop compiles in a fraction
    of the time numba needs for ``np.sort``/``np.argsort``)."""
    size = a.size
    for gap in (701, 301, 132, 57, 23, 10, 4, 1):
        for i in range(gap, size):
            x = a[i]
            j = i
            while j >= gap and a[j - gap] > x:
                a[j] = a[j - gap]
                j -= gap
            a[j] = x


@njit(cache=True, nogil=True)
def pal_place_k(
    level, order_level, order_within, n_levels, n, eligible, gpu_node, n_nodes, max_per_node, out
):  # pragma: no cover (compiled)
    """PAL's placement of one job of ``n`` GPUs on the ``eligible`` GPUs (module docstring)."""
    n_gpus = eligible.size
    m = 0
    for g in range(n_gpus):
        if eligible[g]:
            m += 1
    if m < n:
        return -1
    cand = np.empty(m, dtype=np.int64)
    k = 0
    for g in range(n_gpus):
        if eligible[g]:
            cand[k] = g
            k += 1
    if not (1 < n <= max_per_node):
        return pm_first_k(cand, n, level, gpu_node, n_nodes, n_levels, out)
    # cum[node, L]: candidates on the node with level <= L
    cum = np.zeros((n_nodes, n_levels), dtype=np.int64)
    for i in range(m):
        g = cand[i]
        cum[gpu_node[g], level[g]] += 1
    for nd in range(n_nodes):
        for lv in range(1, n_levels):
            cum[nd, lv] += cum[nd, lv - 1]
    total = np.zeros(n_levels, dtype=np.int64)
    most = np.zeros(n_levels, dtype=np.int64)
    for nd in range(n_nodes):
        for lv in range(n_levels):
            c = cum[nd, lv]
            total[lv] += c
            if c > most[lv]:
                most[lv] = c
    for e in range(order_level.size):
        cap = order_level[e]
        if total[cap] < n:
            continue
        if not order_within[e]:  # across nodes: PM-First on the candidates of level <= cap
            sub = np.empty(total[cap], dtype=np.int64)
            k = 0
            for i in range(m):
                if level[cand[i]] <= cap:
                    sub[k] = cand[i]
                    k += 1
            return pm_first_k(sub, n, level, gpu_node, n_nodes, n_levels, out)
        if most[cap] >= n:
            return _best_within_node_k(cand, level, gpu_node, cum, cap, n, out)
    return -1


@njit(cache=True, nogil=True)
def _best_within_node_k(cand, level, gpu_node, cum, cap, n, out):  # pragma: no cover (compiled)
    """The node whose candidates hold ``n`` with the smallest max level (ties: more candidates of
    level <= ``cap``, then the lower node id); its ``n`` lowest-id candidates of level <= that max."""
    best_node, best_worst, best_count = -1, 0, 0
    n_levels = cum.shape[1]
    for nd in range(cum.shape[0]):
        c = cum[nd, cap]
        if c < n:
            continue
        worst = 0
        while worst < n_levels and cum[nd, worst] < n:
            worst += 1
        if best_node < 0 or worst < best_worst or (worst == best_worst and c > best_count):
            best_node, best_worst, best_count = nd, worst, c
    k = 0
    for i in range(cand.size):
        g = cand[i]
        if gpu_node[g] == best_node and level[g] <= best_worst:
            out[k] = g
            k += 1
            if k == n:
                break
    return k


@njit(cache=True, nogil=True)
def place_batch(
    levels_t, order_level, order_within, order_len, n_levels, job_class, job_n, job_mask, masks,
    free, gpu_node, n_nodes, max_per_node, stop_at_none, out, out_len,
):  # pragma: no cover (compiled)
    """Place jobs one after another, as repeated :func:`pal_place_k` calls each followed by taking
    the GPUs it chose from ``free`` (updated in place).

    Job i: class ``job_class[i]``, ``job_n[i]`` GPUs, eligible = ``free`` and ``masks[job_mask[i]]``
    (``job_mask[i] < 0``: ``free`` alone). Per class c: ``levels_t[c]``, ``n_levels[c]`` and the
    first ``order_len[c]`` entries of ``order_level[c]`` / ``order_within[c]``. The GPUs of job i go
    to ``out[sum(job_n[:i]):][:job_n[i]]`` and ``out_len[i]`` = job_n[i], or -1 when it cannot be
    placed. With ``stop_at_none`` the first such job ends the batch. Returns the jobs handled.
    """
    n_gpus = free.size
    elig = np.empty(n_gpus, dtype=np.bool_)
    start = 0
    for i in range(job_n.size):
        c = job_class[i]
        mi = job_mask[i]
        for g in range(n_gpus):
            elig[g] = free[g] and (mi < 0 or masks[mi, g])
        n = job_n[i]
        ln = order_len[c]
        got = pal_place_k(
            levels_t[c], order_level[c, :ln], order_within[c, :ln], n_levels[c], n, elig, gpu_node, n_nodes,
            max_per_node, out[start:start + n],
        )
        out_len[i] = got
        if got < 0:
            if stop_at_none:
                return i + 1
        else:
            for k in range(start, start + n):
                free[out[k]] = False
        start += n
    return job_n.size
