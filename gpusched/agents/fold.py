"""A flat cluster model on a cluster of another node count: :class:`NodeFold`.

A flat ``gpusched/Cluster-v0`` or ``Cluster-v1`` observation is a per-node block (``n_nodes x 8``) followed
by the window slots and the globals; only the node block depends on the node count. Its actions are
(window slot x placement option, then lifts and "done"): they name no node, so a model trained on
``N`` nodes decides on a cluster of ``M`` nodes once its node block is shown as ``N`` node slots. The
slot and global features are already shares of the cluster they are computed on (the job's GPUs over
``log2(1 + n_gpus)``, GPUs per working free GPU, busy and free shares, demand / ``n_gpus``) or
log-scaled counts (queue, running, starts, lifts): they are copied as they are
(``gpusched_env/envs/observe.py``, ``gpusched_env/envs/preempt.py``).

The 8 node features (``gpusched_env.envs.kernels.fill_observation`` for Cluster-v0, ``PreemptBuilder.observe``
for v1, the same definitions) are, for a node of ``s`` GPUs: ``free / s``, ``up / s``, per class A..D
the mean ``sf - 1`` over its *free* GPUs (``sum / max(free, 1)``: 0 when none is free), mean GPU power
/ 300 W (``watts / (300 s)``), job slots used (``n_resident / (max_jobs_per_gpu s)``).

- ``M > N``: node slot ``i`` shows a contiguous group of nodes (the first ``M mod N`` slots one node more
  than the others) as if it were one node of ``S = sum s`` GPUs: free share ``sum free / S``, up share
  ``sum up / S``, power and job slots ``sum(f s) / S`` (GPU-weighted means), slowdown of class ``c``
  ``sum(f_c free) / sum free`` (weighted by free GPUs, 0 when the group has none). Free and up counts
  are read back as integers (``rint(f s)``); a group of one node keeps its row exactly.
- ``M < N``: the ``M`` nodes in the first slots, the other ``N - M`` slots absent: all 8 features 0. That is
  what the observation shows of a node that is down (``Simulator.fail_node``: not up, so no GPU free,
  slowdown 0 "when none is free", no resident job) except the power, which a failed node's idle GPUs still
  draw and an absent node does not: a slot no job can go to.
- ``M == N``: the observation itself (byte-identical).

Computed in float64 from the float32 observation, then rounded to float32: a folded row equals the row
of a node of the group's size and state up to float32 rounding of the means (tested).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gpusched_env.envs.kernels import NODE_FEATURES
from gpusched_env.envs.preempt import NODE_FEATURES_V1
from gpusched_env.topology import Topology

if not NODE_FEATURES == NODE_FEATURES_V1 == 8:  # the fold reads both envs' node rows by these columns
    raise ImportError(f"NodeFold reads 8 node features; the envs have {NODE_FEATURES} and {NODE_FEATURES_V1}")
_FREE, _UP, _SLOW, _POWER, _SLOTS = 0, 1, slice(2, 6), 6, 7


@dataclass(frozen=True)
class NodeFold:
    """Shows the node block of a cluster of ``len(node_sizes)`` nodes as ``model_nodes`` node slots."""

    model_nodes: int  # N: the node rows the model was trained with
    node_sizes: tuple[int, ...]  # GPUs of each of the cluster's M nodes
    starts: tuple[int, ...] = field(init=False)  # M > N: first node of each slot's group

    def __post_init__(self) -> None:
        n, m = self.model_nodes, len(self.node_sizes)
        if n < 1 or m < 1 or min(self.node_sizes) < 1:
            raise ValueError(f"NodeFold: model_nodes {n} and the cluster's {m} nodes must be >= 1, each node "
                             f"with >= 1 GPU (got {self.node_sizes})")
        q, r = divmod(m, n)
        starts = tuple(i * q + min(i, r) for i in range(n)) if m > n else ()
        object.__setattr__(self, "starts", starts)

    @classmethod
    def of(cls, model_nodes: int, topo: Topology) -> NodeFold:
        return cls(model_nodes, tuple(int(s) for s in topo.node_sizes))

    @property
    def cluster_nodes(self) -> int:
        return len(self.node_sizes)

    def groups(self) -> list[range]:
        """The cluster's nodes each node slot shows (``M < N``: one node, then empty ranges)."""
        m, n = self.cluster_nodes, self.model_nodes
        if m <= n:
            return [range(i, i + 1) if i < m else range(m, m) for i in range(n)]
        ends = (*self.starts[1:], m)
        return [range(a, b) for a, b in zip(self.starts, ends, strict=True)]

    def describe(self) -> str:
        """The one-line note for the log."""
        m, n = self.cluster_nodes, self.model_nodes
        how = "grouped into" if m > n else "shown in"
        return (f"model trained on {n} nodes; this cluster's {m} nodes are {how} {n} node slots"
                + (f" ({n - m} absent)" if m < n else ""))

    def apply(self, obs: np.ndarray) -> np.ndarray:
        """The observation of the cluster (node block of M rows first) as the model's (N rows first)."""
        m, n, f = self.cluster_nodes, self.model_nodes, NODE_FEATURES
        if m == n:
            return obs
        rest = obs[m * f:]
        out = np.empty(n * f + rest.size, dtype=obs.dtype)
        out[n * f:] = rest
        if m < n:
            out[: m * f] = obs[: m * f]
            out[m * f: n * f] = 0.0  # choice: an absent slot is a node that is down and draws nothing (docstring)
            return out
        rows = obs[: m * f].reshape(m, f).astype(np.float64)
        size = np.asarray(self.node_sizes, dtype=np.float64)
        free = np.rint(rows[:, _FREE] * size)
        at = np.asarray(self.starts)
        g_size = np.add.reduceat(size, at)
        g_free = np.add.reduceat(free, at)
        block = np.empty((n, f))
        block[:, _FREE] = g_free / g_size
        block[:, _UP] = np.add.reduceat(np.rint(rows[:, _UP] * size), at) / g_size
        block[:, _SLOW] = np.add.reduceat(rows[:, _SLOW] * free[:, None], at, axis=0) / np.maximum(g_free, 1.0)[:, None]
        for c in (_POWER, _SLOTS):
            block[:, c] = np.add.reduceat(rows[:, c] * size, at) / g_size
        ones = np.flatnonzero(np.diff(np.append(at, m)) == 1)  # a group of one node keeps its row as it is
        out[: n * f] = block.astype(obs.dtype).ravel()
        node_rows = out[: n * f].reshape(n, f)
        node_rows[ones] = obs[: m * f].reshape(m, f)[at[ones]]
        return out
