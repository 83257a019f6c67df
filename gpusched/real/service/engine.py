"""Engines: where the service's job processes run. :class:`LocalEngine` runs them on this machine
(one or more stand-in nodes); :class:`gpusched.real.service.ray_engine.RayEngine` runs them on the nodes of a
Ray cluster. Both answer the same calls, keyed by node name."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from gpusched.real.commands import CommandRunner
from gpusched.real.service.gpus import MpsShare
from gpusched.real.service.node import NodeRunner


class NodeLost(RuntimeError):
    """The node is gone (its agent died or it left the cluster)."""

    def __init__(self, node: str) -> None:
        super().__init__(f"node {node} left the cluster (its agent is gone)")
        self.node = node


@dataclass(frozen=True)
class NodeInfo:
    name: str
    n_devices: int
    kind: str
    address: str


class Engine(Protocol):
    def nodes(self) -> list[NodeInfo]:
        """The nodes alive now."""
        ...

    def launch(self, node: str, job_id: int, launch: int, argv: list[str], env: dict[str, str],
               cwd: str | None, local: list[int], checkpoint_dir: str, mps: MpsShare | None = None) -> None:
        """``mps``: the launch is an MPS client (the node's daemon, on NVIDIA nodes)."""
        ...

    def status(self, node: str, job_id: int, launch: int) -> tuple[str, int | None, bool]:
        """(running | exited | lost, exit code, stopped on request); NodeLost if the node is gone."""
        ...

    def signal(self, node: str, job_id: int, launch: int, sig: int) -> None: ...

    def tail(self, node: str, job_id: int, n: int) -> list[str]: ...

    def free_port(self, node: str) -> int: ...

    def pack_checkpoint(self, node: str, checkpoint_dir: str, max_bytes: int) -> tuple[int, bytes | None]:
        """(size, tar) of the node's checkpoint folder; (size, None) above ``max_bytes``."""
        ...

    def unpack_checkpoint(self, node: str, checkpoint_dir: str, data: bytes) -> None: ...

    def foreign_gpus(self) -> dict[str, int]:
        """GPUs per node held by work this service did not start (other users' Slurm jobs)."""
        ...

    def close(self) -> None: ...


class LocalEngine:
    """``n_nodes`` stand-in nodes on this machine, ``devices_per_node`` CPU stand-in devices each
    (``kind="nvidia"``: this machine's GPUs, one node, with MPS and NVML telemetry every
    ``telemetry_s``; ``gpu_runner``: their command layer, None: gpusched.real.commands auto). Files under
    ``out_dir/nodes/<name>/``."""

    def __init__(self, out_dir: str | Path, n_nodes: int = 1, devices_per_node: int = 4, kind: str = "cpu",
                 telemetry_s: float = 1.0, gpu_runner: CommandRunner | None = None) -> None:
        self.runners = {f"local{i}": NodeRunner(Path(out_dir) / "nodes" / f"local{i}", f"local{i}",
                                                devices_per_node, kind, telemetry_s=telemetry_s,
                                                gpu_runner=gpu_runner) for i in range(n_nodes)}

    def _r(self, node: str) -> NodeRunner:
        r = self.runners.get(node)
        if r is None:
            raise NodeLost(node)
        return r

    def nodes(self) -> list[NodeInfo]:
        return [NodeInfo(r.name, r.n_devices, r.kind, "127.0.0.1") for r in self.runners.values()]

    def launch(self, node: str, job_id: int, launch: int, argv: list[str], env: dict[str, str],
               cwd: str | None, local: list[int], checkpoint_dir: str, mps: MpsShare | None = None) -> None:
        self._r(node).launch(job_id, launch, argv, env, cwd, local, checkpoint_dir, mps)

    def status(self, node: str, job_id: int, launch: int) -> tuple[str, int | None, bool]:
        return self._r(node).status(job_id, launch)

    def signal(self, node: str, job_id: int, launch: int, sig: int) -> None:
        self._r(node).signal(job_id, launch, sig)

    def tail(self, node: str, job_id: int, n: int) -> list[str]:
        return self._r(node).tail(job_id, n)

    def free_port(self, node: str) -> int:
        return self._r(node).free_port()

    def pack_checkpoint(self, node: str, checkpoint_dir: str, max_bytes: int) -> tuple[int, bytes | None]:
        return self._r(node).pack_checkpoint(checkpoint_dir, max_bytes)

    def unpack_checkpoint(self, node: str, checkpoint_dir: str, data: bytes) -> None:
        self._r(node).unpack_checkpoint(checkpoint_dir, data)

    def foreign_gpus(self) -> dict[str, int]:
        return {}

    def close(self) -> None:
        """Leaves the jobs running (a restarted service re-attaches to them) and, while any runs, the
        MPS daemon; stops the telemetry."""
        for r in self.runners.values():
            r.close()
