"""The Ray engine: one :class:`RayNodeAgent` actor per node of a Ray cluster runs that node's jobs.

Each agent is a detached, named actor pinned to its node (``NodeAffinitySchedulingStrategy``), so a
restarted service finds the same agents (and their job processes) again. A node's devices are its
``gpusched_devices`` resource (CPU stand-ins: ``ray start --resources='{"gpusched_devices": 4}'``) or,
failing that, its ``GPU`` resource (NVIDIA, CUDA_VISIBLE_DEVICES per job). Launches started by an
agent die with it (a node that leaves the cluster takes its processes along), and the service
requeues that node's jobs. ``ray.init(address=...)`` joins an existing cluster; without an address
``ray.init()`` starts an embedded one-machine cluster. Without a shared filesystem, an agent packs a
stopped job's checkpoint folder (the tar returns through Ray's object store) and the next node's
agent unpacks it (:mod:`gpusched.real.service.checkpoints`). On a node of NVIDIA GPUs the agent also holds the
node's MPS daemon (started on its first MPS launch) and samples NVML every ``telemetry_s`` into the
node folder (:mod:`gpusched.real.service.gpus`); the agent outlives the service, and so do both.
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from gpusched.real.service.engine import NodeInfo, NodeLost
from gpusched.real.service.gpus import MpsShare
from gpusched.real.service.node import NodeRunner

DEVICES_RESOURCE = "gpusched_devices"
NAMESPACE = "gpusched"
CALL_TIMEOUT_S = 30.0  # choice: an agent that does not answer in this long counts as gone
MOVE_TIMEOUT_S = 600.0  # choice: packing or unpacking a checkpoint (up to checkpoint_max_mb) may take this long
NODES_EVERY_S = 1.0  # choice: how often the cluster's node list is read


@ray.remote(num_cpus=0, max_restarts=0)
class RayNodeAgent:
    """A node's job processes (a :class:`NodeRunner` on that node)."""

    def __init__(self, run_dir: str, name: str, n_devices: int, kind: str, telemetry_s: float = 1.0) -> None:
        self.runner = NodeRunner(run_dir, name, n_devices, kind, die_with_agent=True, telemetry_s=telemetry_s)

    def info(self) -> dict[str, object]:
        return self.runner.info()

    def launch(self, job_id: int, launch: int, argv: list[str], env: dict[str, str], cwd: str | None,
               local: list[int], checkpoint_dir: str, mps: MpsShare | None = None) -> int:
        return self.runner.launch(job_id, launch, argv, env, cwd, local, checkpoint_dir, mps)

    def status(self, job_id: int, launch: int) -> tuple[str, int | None, bool]:
        return self.runner.status(job_id, launch)

    def signal(self, job_id: int, launch: int, sig: int) -> None:
        self.runner.signal(job_id, launch, sig)

    def tail(self, job_id: int, n: int) -> list[str]:
        return self.runner.tail(job_id, n)

    def free_port(self) -> int:
        return self.runner.free_port()

    def pack_checkpoint(self, checkpoint_dir: str, max_bytes: int) -> tuple[int, bytes | None]:
        """The result (the tar) travels back through Ray's object store."""
        return self.runner.pack_checkpoint(checkpoint_dir, max_bytes)

    def unpack_checkpoint(self, checkpoint_dir: str, data: bytes) -> None:
        self.runner.unpack_checkpoint(checkpoint_dir, data)

    def stop_all(self) -> None:
        """Kill the node's launches, stop its telemetry and its MPS daemon."""
        self.runner.stop_all()


def node_devices(resources: dict[str, float]) -> tuple[int, str]:
    """(device count, kind) of a Ray node from its resources."""
    if resources.get(DEVICES_RESOURCE, 0) >= 1:
        return int(resources[DEVICES_RESOURCE]), "cpu"
    return int(resources.get("GPU", 0)), "nvidia"


class RayEngine:
    """The engine on a Ray cluster (see the module docstring). Node names are Ray node ids (12 hex)."""

    def __init__(self, out_dir: str | Path, address: str | None = None, embedded_devices: int | None = None,
                 telemetry_s: float = 1.0) -> None:
        """``address``: join that cluster; None: start an embedded one on this machine, with
        ``embedded_devices`` CPU stand-in devices (None: its GPUs). ``telemetry_s``: NVML sampling
        period of the agents on NVIDIA nodes."""
        self.out = Path(out_dir).resolve()
        self.telemetry_s = telemetry_s
        self.owns_ray = not ray.is_initialized()
        # this engine's own one-machine cluster (ray.init without an address joins RAY_ADDRESS's where set)
        self.embedded = self.owns_ray and address is None and not os.environ.get("RAY_ADDRESS")
        if self.owns_ray:
            res = {DEVICES_RESOURCE: float(embedded_devices)} if address is None and embedded_devices else None
            ray.init(address=address, namespace=NAMESPACE, log_to_driver=False, include_dashboard=False,
                     resources=res)
        self.tag = hashlib.sha1(str(self.out).encode()).hexdigest()[:8]  # one set of agents per service folder
        self.agents: dict[str, Any] = {}
        self.infos: dict[str, NodeInfo] = {}
        self._nodes_t = -1.0
        self._alive: list[NodeInfo] = []

    def nodes(self) -> list[NodeInfo]:
        if time.monotonic() - self._nodes_t < NODES_EVERY_S:
            return self._alive
        alive = []
        for n in ray.nodes():
            count, kind = node_devices(n.get("Resources", {}))
            if not n.get("Alive") or count < 1:
                continue
            name = n["NodeID"][:12]
            if name not in self.agents:
                self.agents[name] = RayNodeAgent.options(  # type: ignore[attr-defined]
                    name=f"gpusched-{self.tag}-{name}", lifetime="detached", get_if_exists=True,
                    scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False),
                ).remote(str(self.out / "nodes" / name), name, count, kind, self.telemetry_s)
                # wait for the agent here, not in the node's first launch, whose recorded start would
                # otherwise come before its process by the agent's own start-up (3.9 s on an H200)
                try:
                    self._call(name, "info")
                except NodeLost:
                    continue
                self.infos[name] = NodeInfo(name, count, kind, n["NodeManagerAddress"])
            alive.append(self.infos[name])
        self._alive, self._nodes_t = alive, time.monotonic()
        return alive

    def _call(self, node: str, method: str, *args: Any, timeout: float = CALL_TIMEOUT_S) -> Any:
        agent = self.agents.get(node)
        if agent is None:
            raise NodeLost(node)
        try:
            return ray.get(getattr(agent, method).remote(*args), timeout=timeout)
        except (RayActorError, GetTimeoutError):
            self.agents.pop(node, None)
            self._nodes_t = -1.0
            raise NodeLost(node) from None

    def launch(self, node: str, job_id: int, launch: int, argv: list[str], env: dict[str, str],
               cwd: str | None, local: list[int], checkpoint_dir: str, mps: MpsShare | None = None) -> None:
        self._call(node, "launch", job_id, launch, argv, env, cwd, local, checkpoint_dir, mps)

    def status(self, node: str, job_id: int, launch: int) -> tuple[str, int | None, bool]:
        st, rc, stopped = self._call(node, "status", job_id, launch)
        return str(st), rc, bool(stopped)

    def signal(self, node: str, job_id: int, launch: int, sig: int) -> None:
        self._call(node, "signal", job_id, launch, sig)

    def tail(self, node: str, job_id: int, n: int) -> list[str]:
        return list(self._call(node, "tail", job_id, n))

    def free_port(self, node: str) -> int:
        return int(self._call(node, "free_port"))

    def pack_checkpoint(self, node: str, checkpoint_dir: str, max_bytes: int) -> tuple[int, bytes | None]:
        size, data = self._call(node, "pack_checkpoint", checkpoint_dir, max_bytes, timeout=MOVE_TIMEOUT_S)
        return int(size), data

    def unpack_checkpoint(self, node: str, checkpoint_dir: str, data: bytes) -> None:
        # the bytes go to the agent through Ray's object store
        self._call(node, "unpack_checkpoint", checkpoint_dir, ray.put(data), timeout=MOVE_TIMEOUT_S)

    def foreign_gpus(self) -> dict[str, int]:
        return {}  # a Ray cluster's GPUs are this service's alone

    def stop_agents(self) -> None:
        """Kill every job of this service's agents and the agents themselves (tests; uninstall)."""
        for name, agent in list(self.agents.items()):
            try:
                ray.get(agent.stop_all.remote(), timeout=CALL_TIMEOUT_S)
            except Exception:  # a dead agent has nothing left to stop
                pass
            try:
                ray.kill(agent)
            except Exception:  # already gone
                pass
            self.agents.pop(name)

    def close(self) -> None:
        """Disconnect (when this engine connected); on a cluster joined by address the detached agents
        and their jobs keep running for the next service. An embedded cluster ends here and takes its
        agents and their jobs along, so the agents stop first: an MPS daemon, which runs apart from
        its agent, would outlive them."""
        if self.owns_ray:
            if self.embedded:
                self.stop_agents()
            ray.shutdown()
