"""Token observations of ``gpusched/Cluster-v0`` and ``gpusched/Cluster-v1`` (``tokens=True``): the cluster's nodes and the queue
window as sets of feature rows, so one set network (:mod:`gpusched.agents.set_extractor`) runs on any
cluster size and queue length.

The numbers are those of the flat observation (:mod:`gpusched_env.envs.observe`), regrouped:

- ``nodes``: ``(max_nodes, 8)``, one row per node (its 8 per-node features, all shares of the node
  or per-GPU means, so a row means the same on any node size), zero rows past the cluster's nodes;
- ``node_mask``: ``(max_nodes,)``, 1 for a real node, 0 for padding;
- ``slots``: ``(max_queue, 11)``, one row per queue-window slot (its 11 features; feature 0 is
  "present", so an empty slot is a zero row), zero rows past the window's ``queue_slots``;
- ``glob``: ``(8,)``, the global features.

Actions: ``Discrete(max_queue x P + 1)``: slot x placement option, then "done" (last). Slots past
``queue_slots`` are always masked. ``max_nodes`` and ``max_queue`` only size the padding (SB3 needs
fixed spaces); the set network's weights do not depend on them.
"""

from __future__ import annotations

import numpy as np
from gymnasium import spaces

from gpusched_env.envs.kernels import GLOBAL_FEATURES, NODE_FEATURES, SLOT_FEATURES
from gpusched_env.envs.observe import OBS_HIGH, OBS_LOW
from gpusched_env.envs.preempt import GLOBAL_FEATURES_V1, NODE_FEATURES_V1, SLOT_FEATURES_V1

DEFAULT_MAX_NODES = 64  # choice: covers 16x4, 16x8 and 48-GPU clusters of up to 64 nodes
DEFAULT_MAX_QUEUE = 32  # choice: twice the default window (queue_slots = 16)
DEFAULT_MAX_RUNNING = 16  # choice: twice Cluster-v1's default running window (running_slots = 8)
# Cluster-v1 token job rows: the flat slot's 17 features, then its two window ranks (to_tokens_v1)
RANK_FEATURES_V1 = 2
TOKEN_SLOT_FEATURES_V1 = SLOT_FEATURES_V1 + RANK_FEATURES_V1
_TIME_IN_SYSTEM, _ATTAINED = 7, 8  # slot features (gpusched_env/envs/preempt.py): log1p(h in system), log1p(GPU-h)


def check_sizes(n_nodes: int, k: int, max_nodes: int, max_queue: int) -> None:
    """ValueError naming the argument when the cluster or window does not fit the padding."""
    if max_nodes < n_nodes:
        raise ValueError(f"max_nodes must be >= the cluster's {n_nodes} nodes, got {max_nodes}")
    if max_queue < k:
        raise ValueError(f"max_queue must be >= queue_slots ({k}), got {max_queue}")


def token_space(max_nodes: int, max_queue: int) -> spaces.Dict:
    """The observation space of the token observation."""
    box = lambda *shape: spaces.Box(OBS_LOW, OBS_HIGH, shape, dtype=np.float32)  # noqa: E731
    return spaces.Dict({
        "nodes": box(max_nodes, NODE_FEATURES),
        "node_mask": spaces.Box(0.0, 1.0, (max_nodes,), dtype=np.float32),
        "slots": box(max_queue, SLOT_FEATURES),
        "glob": box(GLOBAL_FEATURES),
    })


def to_tokens(flat: np.ndarray, n_nodes: int, k: int, max_nodes: int, max_queue: int) -> dict[str, np.ndarray]:
    """The token observation of a flat observation of ``n_nodes`` nodes and ``k`` window slots."""
    nodes, a = _rows(flat, 0, n_nodes, NODE_FEATURES, max_nodes)
    slots, a = _rows(flat, a, k, SLOT_FEATURES, max_queue)
    glob = np.array(flat[a:], dtype=np.float32)
    return {"nodes": nodes, "node_mask": _node_mask(n_nodes, max_nodes), "slots": slots, "glob": glob}


def _rows(flat: np.ndarray, start: int, n: int, width: int, max_n: int) -> tuple[np.ndarray, int]:
    """``n`` rows of ``width`` features read from ``flat[start:]``, zero-padded to ``max_n`` rows, and
    the offset after them."""
    rows = np.zeros((max_n, width), dtype=np.float32)
    end = start + n * width
    rows[:n] = flat[start:end].reshape(n, width)
    return rows, end


def _node_mask(n_nodes: int, max_nodes: int) -> np.ndarray:
    mask = np.zeros(max_nodes, dtype=np.float32)
    mask[:n_nodes] = 1.0
    return mask


def pad_mask(mask: np.ndarray, k: int, n_opts: int, max_queue: int) -> np.ndarray:
    """A window mask ``(k x P + 1,)`` as a token-action mask ``(max_queue x P + 1,)``."""
    out = np.zeros(max_queue * n_opts + 1, dtype=np.bool_)
    out[: k * n_opts] = mask[: k * n_opts]
    out[-1] = mask[-1]
    return out


def window_action(action: int, k: int, n_opts: int, max_queue: int) -> int:
    """A token action as the window's action (``k x P`` = "done"; a padded slot maps past "done",
    which the builder treats as invalid)."""
    if action == max_queue * n_opts:
        return k * n_opts
    if action >= k * n_opts:
        return k * n_opts + 1 + action
    return action


# -- Cluster-v1 --------------------------------------------------------------------------------
def check_sizes_v1(n_nodes: int, k: int, r: int, max_nodes: int, max_queue: int, max_running: int) -> None:
    """:func:`check_sizes`, and ``max_running`` >= ``running_slots``."""
    check_sizes(n_nodes, k, max_nodes, max_queue)
    if max_running < r:
        raise ValueError(f"max_running must be >= running_slots ({r}), got {max_running}")


def token_space_v1(max_nodes: int, max_queue: int, max_running: int) -> spaces.Dict:
    """The observation space of Cluster-v1's token observation."""
    box = lambda *shape: spaces.Box(OBS_LOW, OBS_HIGH, shape, dtype=np.float32)  # noqa: E731
    return spaces.Dict({
        "nodes": box(max_nodes, NODE_FEATURES_V1),
        "node_mask": spaces.Box(0.0, 1.0, (max_nodes,), dtype=np.float32),
        "slots": box(max_queue, TOKEN_SLOT_FEATURES_V1),
        "running": box(max_running, TOKEN_SLOT_FEATURES_V1),
        "glob": box(GLOBAL_FEATURES_V1),
    })


def to_tokens_v1(flat: np.ndarray, n_nodes: int, k: int, r: int,
                 max_nodes: int, max_queue: int, max_running: int) -> dict[str, np.ndarray]:
    """The token observation of a flat Cluster-v1 observation (``n_nodes`` nodes, ``k`` start and
    ``r`` running slots); every job row also carries its window ranks (:func:`_with_ranks`)."""
    nodes, a = _rows(flat, 0, n_nodes, NODE_FEATURES_V1, max_nodes)
    slots, a = _rows(flat, a, k, SLOT_FEATURES_V1, max_queue)
    running, a = _rows(flat, a, r, SLOT_FEATURES_V1, max_running)
    slots, running = _with_ranks(slots), _with_ranks(running)
    glob = np.array(flat[a:], dtype=np.float32)
    return {"nodes": nodes, "node_mask": _node_mask(n_nodes, max_nodes), "slots": slots, "running": running,
            "glob": glob}


def _with_ranks(rows: np.ndarray) -> np.ndarray:
    """Job rows with two rank columns appended, among the present rows of the same set (start or
    running slots): the share of the others that have been in the system longer (0 = the oldest), and
    the share with less attained service (0 = the least served); zeros on empty rows and for a lone job.

    The flat observation carries this order in its slot positions (the window: the oldest jobs first,
    then the least attained); a set network sees the rows as an unordered set, and without the ranks
    it cannot tell which queued job heads a priority order. Tiresias stops starting at the first job
    of its order that does not fit, so its clone must know the head: without the ranks the set
    clone answered "done" to 60 of the teacher's 496 starts on a pal_philly episode (the flat clone:
    6; with the ranks: 23), idled GPUs, and never recovered (docs/AGENTS.md, issue 32)."""
    out = np.zeros((rows.shape[0], rows.shape[1] + RANK_FEATURES_V1), dtype=np.float32)
    out[:, : rows.shape[1]] = rows
    idx = np.flatnonzero(rows[:, 0] > 0.5)
    if idx.size > 1:
        t, att = rows[idx, _TIME_IN_SYSTEM], rows[idx, _ATTAINED]
        d = float(idx.size - 1)
        out[idx, rows.shape[1]] = np.count_nonzero(t[None, :] > t[:, None], axis=1) / d
        out[idx, rows.shape[1] + 1] = np.count_nonzero(att[None, :] < att[:, None], axis=1) / d
    return out


def pad_mask_v1(mask: np.ndarray, k: int, r: int, n_opts: int, max_queue: int, max_running: int) -> np.ndarray:
    """A Cluster-v1 window mask ``(k x P + r + 1,)`` as a token-action mask
    ``(max_queue x P + max_running + 1,)``."""
    out = np.zeros(max_queue * n_opts + max_running + 1, dtype=np.bool_)
    out[: k * n_opts] = mask[: k * n_opts]
    lift = max_queue * n_opts
    out[lift: lift + r] = mask[k * n_opts: k * n_opts + r]
    out[-1] = mask[-1]
    return out


def window_action_v1(action: int, k: int, r: int, n_opts: int, max_queue: int, max_running: int) -> int:
    """A Cluster-v1 token action as the window's action (a padded start or running slot maps past
    "done", which the builder treats as invalid)."""
    n_win = k * n_opts + r + 1
    lift = max_queue * n_opts
    if action == lift + max_running:
        return n_win - 1
    if action >= lift:
        i = action - lift
        return k * n_opts + i if i < r else n_win + action
    if action >= k * n_opts:
        return n_win + action
    return action


def token_action_v1(action: int, k: int, r: int, n_opts: int, max_queue: int, max_running: int) -> int:
    """A Cluster-v1 window action (``k x P + r + 1``) as the token action (:func:`window_action_v1`
    inverted)."""
    if action < k * n_opts:
        return action
    i = action - k * n_opts
    return max_queue * n_opts + (i if i < r else max_running)
