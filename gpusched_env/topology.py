"""Static cluster layout: GPU types, nodes, racks and the links between GPUs.

Link figures are datasheet facts or documented choices (see ``LinkSpec`` defaults and docs/CLUSTER.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np


@dataclass(frozen=True)
class LinkSpec:
    """Bandwidth (GB/s) and latency (s) of one locality level."""

    bandwidth_gbps: float
    latency_s: float


# Documented choices. Same node: NVLink 2 on V100-SXM2, 6 links x 25 GB/s per direction = 150 GB/s
# (datasheet). Same rack: 100 Gb/s InfiniBand EDR = 12.5 GB/s, 2 us. Cross-rack: one more switch hop,
# oversubscribed 2:1 = 6.25 GB/s, 5 us.
DEFAULT_LINKS: dict[str, LinkSpec] = {
    "node": LinkSpec(150.0, 1e-6),
    "rack": LinkSpec(12.5, 2e-6),
    "cross_rack": LinkSpec(6.25, 5e-6),
}


@dataclass(frozen=True)
class NodeGroup:
    """``count`` identical nodes with ``gpus_per_node`` GPUs of ``gpu_type``."""

    count: int  # number of such nodes
    gpus_per_node: int  # GPUs in each node
    gpu_type: str = "V100"  # a name in gpusched_env.catalog.GPUS
    gpu_mem_gb: float = 32.0  # memory of each GPU


@dataclass(frozen=True)
class Topology:
    """The cluster's static shape, as arrays indexed by GPU id (0..n_gpus-1).

    Build with :meth:`build`. GPUs of node ``k`` are contiguous; nodes fill racks in order.
    """

    gpu_node: np.ndarray  # (n_gpus,) int: node of each GPU
    gpu_rack: np.ndarray  # (n_gpus,) int: rack of each GPU
    gpu_type_idx: np.ndarray  # (n_gpus,) int: index into gpu_types
    gpu_mem_gb: np.ndarray  # (n_gpus,) float: memory capacity
    node_first_gpu: np.ndarray  # (n_nodes + 1,) int: GPU id range of each node
    node_rack: np.ndarray  # (n_nodes,) int
    gpu_types: tuple[str, ...]
    links: dict[str, LinkSpec] = field(default_factory=lambda: dict(DEFAULT_LINKS))

    @staticmethod
    def build(
        groups: list[NodeGroup], nodes_per_rack: int = 16, links: dict[str, LinkSpec] | None = None
    ) -> Topology:
        if not groups:
            raise ValueError("cluster.nodes: at least one node group is required")
        types: list[str] = []
        node_sizes: list[int] = []
        gpu_type_idx: list[int] = []
        mem: list[float] = []
        for i, g in enumerate(groups):
            if g.count < 1 or g.gpus_per_node < 1:
                raise ValueError(f"cluster.nodes[{i}]: count and gpus_per_node must be >= 1, got {g}")
            if g.gpu_type not in types:
                types.append(g.gpu_type)
            for _ in range(g.count):
                node_sizes.append(g.gpus_per_node)
                gpu_type_idx += [types.index(g.gpu_type)] * g.gpus_per_node
                mem += [g.gpu_mem_gb] * g.gpus_per_node
        if nodes_per_rack < 1:
            raise ValueError(f"cluster.nodes_per_rack must be >= 1, got {nodes_per_rack}")
        sizes = np.asarray(node_sizes, dtype=np.int64)
        first = np.concatenate([[0], np.cumsum(sizes)])
        node_of_gpu = np.repeat(np.arange(len(sizes)), sizes)
        node_rack = np.arange(len(sizes)) // nodes_per_rack
        return Topology(
            gpu_node=node_of_gpu,
            gpu_rack=node_rack[node_of_gpu],
            gpu_type_idx=np.asarray(gpu_type_idx, dtype=np.int64),
            gpu_mem_gb=np.asarray(mem, dtype=np.float64),
            node_first_gpu=first,
            node_rack=node_rack,
            gpu_types=tuple(types),
            links=dict(links or DEFAULT_LINKS),
        )

    @cached_property
    def n_gpus(self) -> int:
        return int(self.gpu_node.shape[0])

    @cached_property
    def n_nodes(self) -> int:
        return int(self.node_rack.shape[0])

    def node_gpus(self, node: int) -> range:
        return range(int(self.node_first_gpu[node]), int(self.node_first_gpu[node + 1]))

    def gpus_per_node(self, node: int) -> int:
        return int(self.node_first_gpu[node + 1] - self.node_first_gpu[node])

    @cached_property
    def node_sizes(self) -> np.ndarray:
        """(n_nodes,) float: GPUs per node."""
        return np.diff(self.node_first_gpu).astype(np.float64)

    @cached_property
    def max_gpus_per_node(self) -> int:
        return int(self.node_sizes.max())

    @cached_property
    def min_gpu_mem_gb(self) -> float:
        """Memory of the smallest GPU (a job needing no more fits on any GPU)."""
        return float(self.gpu_mem_gb.min())

    def gpu_type_of(self, gpu: int) -> str:
        return self.gpu_types[int(self.gpu_type_idx[gpu])]

    @cached_property
    def node_of_gpu(self) -> list[int]:
        """``gpu_node`` as a Python list (cheap scalar access in per-GPU loops)."""
        return self.gpu_node.tolist()

    @cached_property
    def rack_of_gpu(self) -> list[int]:
        """``gpu_rack`` as a Python list."""
        return self.gpu_rack.tolist()

    def locality(self, gpus: tuple[int, ...] | list[int]) -> str:
        """The widest level a GPU set spans: "node", "rack" or "cross_rack"."""
        node_of = self.node_of_gpu
        if len({node_of[g] for g in gpus}) <= 1:
            return "node"
        rack_of = self.rack_of_gpu
        return "rack" if len({rack_of[g] for g in gpus}) == 1 else "cross_rack"
