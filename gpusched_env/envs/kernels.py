"""Compiled inner loops of the decision builder (numba): one call per observation instead of about
thirty small numpy operations, which cost more in call overhead than in arithmetic at this size.

Plain loops over GPUs, nodes and window slots. The features are defined in the docstring of
:mod:`gpusched_env.envs.observe`; ``tests/envs/test_observation_kernel.py`` checks this code against
a plain numpy transcription of that definition. Compiled code is cached on disk (``cache=True``):
the first run on a machine compiles for about a second, later runs load it.
"""

from __future__ import annotations

import numpy as np
from numba import njit

NODE_FEATURES = 8
SLOT_FEATURES = 11
GLOBAL_FEATURES = 8


@njit(cache=True, nogil=True)
def fill_observation(  # one flat call: numba takes arrays and scalars, not objects
    obs, gpu_node, inv_size, scale_power, scale_jobs, free, up, power, n_res, slowdown,
    slot, arrival_h, win_ids, fits, now_h, n_free, g0, g1, g3, g4, g5, g6, g7, low, high,
):
    """Write the whole observation into ``obs`` (float32).

    Node block from the per-GPU arrays (``free`` and ``n_res`` are the working copies of the
    decision point), slot block from the static per-job rows ``slot`` plus the dynamic columns
    (wait, fits: bit 0 of ``fits[s]`` an exclusive option, bit 1 a shared one; GPUs per free GPU),
    global block from the scalars ``g0, g1, g3..g7`` with the busy-GPU share (index 2) counted here.
    Every entry is then clipped to ``[low, high]``; NaN becomes 0.
    """
    n_nodes = inv_size.size
    n_gpus = gpu_node.size
    n_free_node = np.zeros(n_nodes)
    n_up = np.zeros(n_nodes)
    watts = np.zeros(n_nodes)
    slots_used = np.zeros(n_nodes)
    slow_sum = np.zeros((n_nodes, 4))
    busy = 0
    for g in range(n_gpus):
        nd = gpu_node[g]
        if up[g]:
            n_up[nd] += 1.0
        watts[nd] += power[g]
        slots_used[nd] += n_res[g]
        if n_res[g] > 0:
            busy += 1
        if free[g]:
            n_free_node[nd] += 1.0
            for c in range(4):
                slow_sum[nd, c] += slowdown[g, c] - 1.0
    for nd in range(n_nodes):
        row = nd * NODE_FEATURES
        obs[row] = n_free_node[nd] * inv_size[nd]
        obs[row + 1] = n_up[nd] * inv_size[nd]
        d = max(n_free_node[nd], 1.0)
        for c in range(4):
            obs[row + 2 + c] = slow_sum[nd, c] / d
        obs[row + 6] = watts[nd] * scale_power[nd]
        obs[row + 7] = slots_used[nd] * scale_jobs[nd]

    a = n_nodes * NODE_FEATURES
    k = (obs.size - a - GLOBAL_FEATURES) // SLOT_FEATURES
    per_free = np.float32(1.0 / max(n_free, 1))
    for s in range(k):
        row = a + s * SLOT_FEATURES
        if s >= win_ids.size:
            for f in range(SLOT_FEATURES):
                obs[row + f] = 0.0
            continue
        j = win_ids[s]
        for f in range(SLOT_FEATURES):
            obs[row + f] = slot[j, f]
        wait = now_h - arrival_h[j]
        obs[row + 6] = np.log1p(max(wait, 0.0))
        obs[row + 8] = 1.0 if fits[s] & 1 else 0.0
        obs[row + 9] = 1.0 if fits[s] & 2 else 0.0
        obs[row + 10] = np.float32(slot[j, 10]) * per_free  # the static column holds the GPU count

    b = a + k * SLOT_FEATURES
    obs[b] = g0
    obs[b + 1] = g1
    obs[b + 2] = busy / n_gpus
    obs[b + 3] = g3
    obs[b + 4] = g4
    obs[b + 5] = g5
    obs[b + 6] = g6
    obs[b + 7] = g7

    for i in range(obs.size):
        x = obs[i]
        if x != x:
            obs[i] = 0.0
        elif x > high:
            obs[i] = high
        elif x < low:
            obs[i] = low
