"""Compiled inner loops of the decision builder (numba): one call per observation instead of about
thirty small numpy operations, which cost more in call overhead than in arithmetic at this size.

Plain loops over GPUs, nodes and window slots. The features are defined in the docstring of
:mod:`gpusched_env.envs.observe`; ``tests/envs/test_observation_kernel.py`` checks this code against
a plain numpy transcription of that definition. :func:`least_interference_k` is the
``least_interference`` placement option in one call (``tests/envs/test_env_step_paths.py`` checks it
against the numpy rule in :mod:`gpusched_env.envs.options`); :func:`take_k` is a start's update of
the working state (``tests/envs/test_env_step_paths.py`` checks it against scalar updates). Compiled code is cached on disk
(``cache=True``): the first run on a machine compiles for about a second, later runs load it.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from gpusched_env.compiled import sort_head

NODE_FEATURES = 8
SLOT_FEATURES = 11
GLOBAL_FEATURES = 8


OBS_LOW, OBS_HIGH = -1.0, 10.0
"""Every observation entry is clipped to ``[OBS_LOW, OBS_HIGH]`` (compiled in as constants)."""
ARRIVAL_COL = 6
"""Column of a job's static slot row that holds its arrival time in hours (the kernel writes the
wait there)."""


@njit(cache=True, nogil=True)
def fill_observation(  # one flat call: numba takes arrays and scalars, not objects; each argument
    obs, gpu_node, node_scale, free, up, power, n_res, slowdown,  # costs its type check at the call
    slot, win, now_h, n_free, g0, g1, g3, g4, g5, g6, g7,
):
    """Write the whole observation into ``obs`` (float32).

    Node block from the per-GPU arrays (``free`` and ``n_res`` are the working copies of the
    decision point) and the per-node scales ``node_scale`` (rows: 1 / GPUs, 1 / (300 W x GPUs),
    1 / (job slots x GPUs)); slot block from the static per-job rows ``slot`` (arrival in hours in
    column :data:`ARRIVAL_COL`) plus the dynamic columns: ``win`` holds the window's job ids (a
    negative id: an empty slot, as are the slots past them), then as many fit codes (bit 0 an
    exclusive option fits, bit 1 a shared one); wait, GPUs per free GPU.
    Global block from the scalars ``g0, g1, g3..g7`` with the busy-GPU share (index 2) counted here.
    Every entry is then clipped to ``[OBS_LOW, OBS_HIGH]``; NaN becomes 0.
    """
    low, high = OBS_LOW, OBS_HIGH
    inv_size, scale_power, scale_jobs = node_scale[0], node_scale[1], node_scale[2]
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
    n_win = win.size // 2
    for s in range(k):
        row = a + s * SLOT_FEATURES
        j = win[s] if s < n_win else -1
        if j < 0:  # no job in this slot
            for f in range(SLOT_FEATURES):
                obs[row + f] = 0.0
            continue
        for f in range(SLOT_FEATURES):
            obs[row + f] = slot[j, f]
        wait = now_h - slot[j, ARRIVAL_COL]
        obs[row + ARRIVAL_COL] = np.log1p(max(wait, 0.0))
        fit = win[n_win + s]
        obs[row + 8] = 1.0 if fit & 1 else 0.0
        obs[row + 9] = 1.0 if fit & 2 else 0.0
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


@njit(cache=True)
def least_interference_k(  # the ``least_interference`` option (gpusched_env/envs/options.py), compiled
    up, n_res, max_jobs, mem_used, mem, mem_cap, allowed, util, slowdown, cls, n, out,
):
    """Write into ``out[:n]`` (ascending) the ``n`` GPUs that ``least_interference`` picks and return
    ``n``; return -1 when fewer than ``n`` GPUs qualify, -2 when a candidate's ``util`` or slowdown
    (``slowdown[:, cls]``) is NaN (the caller then takes the numpy path, whose sort puts NaN last).

    Candidates: up, ``n_res < max_jobs``, ``mem_used + mem <= mem_cap + 1e-9``, ``allowed``. Order:
    fewest resident jobs, then lowest utilisation, then lowest slowdown, then lowest id — the
    ``np.lexsort`` of the numpy path (a total order: ids differ), taken n times by selection."""
    n_gpus = up.size
    slow = slowdown[:, cls]
    cand = np.empty(n_gpus, dtype=np.int64)
    m = 0
    for g in range(n_gpus):
        if up[g] and n_res[g] < max_jobs and mem_used[g] + mem <= mem_cap[g] + 1e-9 and allowed[g]:
            if util[g] != util[g] or slow[g] != slow[g]:
                return -2
            cand[m] = g
            m += 1
    if m < n:
        return -1
    for i in range(n):  # selection: the i-th smallest (n_res, util, slow, id) among cand[i:m]
        best = i
        for p in range(i + 1, m):
            a, b = cand[p], cand[best]
            if n_res[a] != n_res[b]:
                if n_res[a] < n_res[b]:
                    best = p
            elif util[a] != util[b]:
                if util[a] < util[b]:
                    best = p
            elif slow[a] != slow[b]:
                if slow[a] < slow[b]:
                    best = p
            elif a < b:
                best = p
        t = cand[i]
        cand[i] = cand[best]
        cand[best] = t
    for i in range(n):
        out[i] = cand[i]
    sort_head(out, n)
    return n


@njit(cache=True, nogil=True)
def take_k(free, n_res, mem_used, gpus, mem):  # WorkingState.take (gpusched_env/envs/options.py), compiled
    """Start a job of ``mem`` GB per GPU on the (distinct) GPU ids ``gpus``: clear ``free``, add one
    resident job and ``mem`` to each; return how many of them were free. The same IEEE additions,
    one per GPU, as the scalar updates."""
    was_free = 0
    for i in range(gpus.size):
        g = gpus[i]
        if free[g]:
            was_free += 1
            free[g] = False
        n_res[g] += 1
        mem_used[g] += mem
    return was_free
