"""Compiled packed placement (numba): :func:`gpusched.baselines.placement.packed_gpus_numpy` as plain
loops over the nodes (a GPU-count rule: integer comparisons only, so the same GPUs).
``tests/baselines/test_pal_kernel.py`` checks the two against each other on hand-made and random
inputs. Compiled code is cached on disk (``cache=True``)."""

from __future__ import annotations

import numpy as np
from numba import njit

from gpusched_env.compiled import sort_head


@njit(cache=True, nogil=True)
def packed_k(eligible, n, node_first, out):  # pragma: no cover (compiled)
    """Packed placement of ``n`` GPUs over the ``eligible`` mask, nodes ``node_first[k]`` ..
    ``node_first[k + 1] - 1``: write the GPU ids ascending into ``out[:n]`` and return ``n``, or -1
    when fewer than ``n`` GPUs are eligible. The first node (lowest id) with exactly ``n`` eligible
    GPUs; else the node with the fewest eligible GPUs among those with more than ``n`` (lowest id
    on ties), its ``n`` lowest-id ones; else greedily the nodes with the most eligible GPUs (lowest
    id on ties), the lowest-id GPUs of each."""
    n_nodes = node_first.size - 1
    counts = np.zeros(n_nodes, dtype=np.int64)
    total = 0
    for k in range(n_nodes):
        c = 0
        for g in range(node_first[k], node_first[k + 1]):
            if eligible[g]:
                c += 1
        counts[k] = c
        total += c
    if total < n:
        return -1
    if n == 0:
        return 0
    best = -1
    for k in range(n_nodes):  # exactly n (for n = 1: the fewest eligible, the rule below gives the same)
        if counts[k] == n:
            best = k
            break
    if best < 0:
        for k in range(n_nodes):  # the fewest among those with more than n, the first on ties
            if counts[k] > n and (best < 0 or counts[k] < counts[best]):
                best = k
    if best >= 0:
        m = 0
        for g in range(node_first[best], node_first[best + 1]):
            if eligible[g]:
                out[m] = g
                m += 1
                if m == n:
                    break
        return n
    taken = np.zeros(n_nodes, dtype=np.bool_)
    m = 0
    while m < n:  # the node with the most eligible GPUs not yet used, the first on ties
        k = -1
        for j in range(n_nodes):
            if not taken[j] and counts[j] > 0 and (k < 0 or counts[j] > counts[k]):
                k = j
        taken[k] = True
        for g in range(node_first[k], node_first[k + 1]):
            if eligible[g]:
                out[m] = g
                m += 1
                if m == n:
                    break
    sort_head(out, n)  # ascending ids
    return n
