"""The job-speed seam of the cluster model and its implementations.

:class:`DataParallelSpeed` (the first): iteration time = base time of the job's model on the GPU
type × max over its GPUs of the GPU's *slowness* × locality multiplier + communication time. A
GPU's slowness for a job = variability factor for its class × co-location slowdown from the device
model × transient straggler factor ÷ GPU-type speed. Locality: PAL's constant penalty ``lf`` when a
job spans nodes, or a ring all-reduce of 4 B × parameters per iteration over the slowest link
spanned (``scenario.model.locality``).

Pipeline-parallel jobs (``Job.pipeline`` set; one GPU per stage, stage i on the i-th GPU of the
allocation): the iteration time comes from the pipeline level
(:func:`gpusched_env.pipeline.coupling.iteration_time_ms`) with each stage slowed by its GPU's
slowness and each stage-to-stage link delayed by the link the placement crosses (latency +
``activation_mb`` ÷ bandwidth), so a cluster policy sees the cost of splitting a pipeline over a
slow link, a straggling GPU or a shared GPU.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache
from typing import Protocol

import numpy as np

from gpusched_env.allocation import Allocation, ClusterState
from gpusched_env.catalog import GPUS, ModelSpec
from gpusched_env.cluster.model import LocalityConfig
from gpusched_env.device.seam import DeviceModel, DeviceOutcome, Tenant
from gpusched_env.pipeline.coupling import iteration_time_ms
from gpusched_env.pipeline.spec import PipelineSpec
from gpusched_env.topology import Topology
from gpusched_env.types import Job, Sharing

_LEVELS_MAX = 65536  # choice: GPU sets whose locality level is remembered (then forgotten at once)


class JobSpeed(Protocol):
    """How fast a running job iterates where it is placed."""

    def placement_cost(self, job: Job, gpus: tuple[int, ...]) -> tuple[float, float]:
        """(time multiplier, added seconds per iteration) of a placement, fixed while it runs there."""

    def iter_time(self, job: Job, alloc: Allocation, mult: float, comm_s: float) -> float:
        """Seconds per iteration now."""

    def set_factors(self, factors: np.ndarray) -> None:
        """New per-GPU, per-class variability factors (drift)."""

    def set_straggle(self, g: int, factor: float) -> None:
        """A transient slowdown of GPU ``g`` starts (factor > 1) or ends (1)."""


class DataParallelSpeed:
    """:class:`JobSpeed` of data-parallel jobs (see the module docstring)."""

    def __init__(
        self, topology: Topology, state: ClusterState, device: DeviceModel, locality: LocalityConfig,
        factors: np.ndarray, spec: Callable[[str], ModelSpec],
    ) -> None:
        self.topology, self.state, self.device, self.locality = topology, state, device, locality
        self.spec = spec
        types = [GPUS[t] for t in topology.gpu_types]
        self.speed = np.array([types[i].speed for i in topology.gpu_type_idx])
        self._straggle: list[float] = [1.0] * topology.n_gpus  # transient straggler factor per GPU
        self._speed_l: list[float] = self.speed.tolist()
        # per GPU: (resident ids, their Sharing, the device model's outcome for them)
        self._outcome: list[tuple[tuple[int, ...], tuple[Sharing, ...], DeviceOutcome] | None] = (
            [None] * topology.n_gpus
        )
        self._levels: dict[tuple[int, ...], str] = {}  # GPU set -> Topology.locality of it
        # node and rack of each GPU when neither ever decreases with the GPU id (Topology.build
        # numbers GPUs node by node and nodes rack by rack): a GPU set then spans the nodes and racks
        # from its lowest GPU's to its highest's, so its ends give Topology.locality; else None
        ordered = bool((np.diff(topology.gpu_node) >= 0).all() and (np.diff(topology.gpu_rack) >= 0).all())
        self._ends = (topology.node_of_gpu, topology.rack_of_gpu) if ordered else None
        self.set_factors(factors)

    def set_factors(self, factors: np.ndarray) -> None:
        """Refresh ``_slow[g][c]`` = factor x straggle / speed for every GPU (Python lists: cheap
        scalar access)."""
        self.factors = factors
        straggle = np.array(self._straggle)
        self._slow: list[list[float]] = (factors * straggle[:, None] / self.speed[:, None]).tolist()
        self._factors_l: list[list[float]] = factors.tolist()
        # each GPU's slowness without a straggler (factor 1: the same floats as the product)
        self._unslowed: list[list[float]] = (factors * 1.0 / self.speed[:, None]).tolist()

    def set_straggle(self, g: int, factor: float) -> None:
        self.toggle(g, factor)

    def toggle(self, g: int, factor: float) -> tuple[list[float], list[float]]:
        """:meth:`set_straggle`, returning GPU ``g``'s slowness per class (variability x straggle /
        speed) before and after: lists that toggles and :meth:`set_factors` replace, never change."""
        st = self._straggle[g] = float(factor)
        slow = self._slow
        old = slow[g]
        if st == 1.0:  # a straggling period ends: the row kept for it
            new = slow[g] = self._unslowed[g]
        else:
            sp = self._speed_l[g]
            new = slow[g] = [f * st / sp for f in self._factors_l[g]]
        return old, new

    def placement_cost(self, job: Job, gpus: tuple[int, ...]) -> tuple[float, float]:
        if len(gpus) <= 1:
            return 1.0, 0.0
        loc = self.locality
        level = self._levels.get(gpus)
        if level is None:  # Topology.locality, remembered per GPU set (a pure function of it)
            if len(self._levels) >= _LEVELS_MAX:
                self._levels.clear()
            ends = self._ends
            if ends is None:
                level = self.topology.locality(gpus)
            else:  # (see __init__)
                node_of, rack_of = ends
                lo, hi = min(gpus), max(gpus)
                level = ("node" if node_of[lo] == node_of[hi] else "rack" if rack_of[lo] == rack_of[hi]
                         else "cross_rack")
            self._levels[gpus] = level
        if loc.mode == "constant":
            return (loc.lf if level != "node" else 1.0), 0.0
        link = self.topology.links[level]
        n = len(gpus)
        volume = 2 * (n - 1) / n * 4e6 * self.spec(job.model).params_m
        return 1.0, volume / (link.bandwidth_gbps * 1e9) + 2 * (n - 1) * link.latency_s

    def iter_time(self, job: Job, alloc: Allocation, mult: float, comm_s: float) -> float:
        if job.pipeline is not None:
            return self._pipeline_iter_s(job, job.pipeline, alloc)
        base = self.spec(job.model).base_iter_s
        c = job.class_index
        gpus = alloc.gpus
        resident = self.state.resident
        whole = not alloc.sharing.is_mps
        if len(gpus) == 1 and whole and len(resident[gpus[0]]) == 1:
            return base * self._slow[gpus[0]][c]  # one GPU: no locality term
        if whole:  # alone on each GPU: the largest slowness from the lists (one plain loop)
            slow = self._slow
            worst = -math.inf
            for g in gpus:
                if len(resident[g]) != 1:
                    break
                s = slow[g][c]
                if s > worst:
                    worst = s
            else:
                return base * worst * mult + comm_s
        worst = max(self.slowness(job, g) for g in gpus)
        return base * worst * mult + comm_s

    def alone_worst(self, job: Job, alloc: Allocation) -> float | None:
        """The largest slowness of ``job`` over its GPUs when it runs whole (not MPS, not a
        pipeline) and alone on each of them, else None. Its iteration time is then
        ``base_iter_s x this x mult + comm_s``, the same float as :meth:`iter_time` (a one-GPU job
        has mult 1 and comm 0)."""
        if job.pipeline is not None or alloc.sharing.is_mps:
            return None
        resident, slow, c = self.state.resident, self._slow, job.class_index
        worst = -math.inf
        for g in alloc.gpus:
            if len(resident[g]) != 1:
                return None
            s = slow[g][c]
            if s > worst:
                worst = s
        return worst

    def worst_of(self, gpus: tuple[int, ...], c: int) -> float:
        """The largest slowness of class ``c`` over ``gpus``: the value :meth:`alone_worst` returns
        for a job alone on each of them (while their residents stay the same), without looking at
        the residents."""
        slow = self._slow
        worst = -math.inf
        for g in gpus:
            s = slow[g][c]
            if s > worst:
                worst = s
        return worst

    def slowness(self, job: Job, g: int) -> float:
        """Time multiplier of ``job`` on GPU ``g`` against the reference GPU (see module docstring)."""
        c = job.class_index
        here = self.state.resident[g]
        if len(here) == 1 and not self.state.running[job.job_id].sharing.is_mps:
            return self._slow[g][c]
        sd = self.outcome(g).tenants[here.index(job.job_id)].slowdown
        return float(self.factors[g, c] * self._straggle[g] * sd / self.speed[g])

    def _pipeline_iter_s(self, job: Job, spec: PipelineSpec, alloc: Allocation) -> float:
        gpus = alloc.gpus
        delays = []
        for a, b in zip(gpus, gpus[1:], strict=False):
            link = self.topology.links[self.topology.locality((a, b))]
            delays.append((link.latency_s + spec.activation_mb * 1e6 / (link.bandwidth_gbps * 1e9)) * 1e3)
        slows = tuple(self.slowness(job, g) for g in gpus)
        return _pipeline_ms(spec, tuple(delays), slows) / 1e3

    def tenants(self, g: int) -> tuple[Tenant, ...]:
        """The device model's view of GPU ``g``'s residents."""
        state = self.state
        out = []
        for jid in state.resident[g]:
            spec = self.spec(state.jobs[jid].model)
            out.append(Tenant(spec.name, min(spec.util, 1.0), state.running[jid].sharing))
        return tuple(out)

    def shared_util(self, g: int) -> float:
        """Busy fraction of GPU ``g`` shared by its tenants (the device model's figure)."""
        return self.outcome(g).util

    def outcome(self, g: int) -> DeviceOutcome:
        """The device model's outcome for GPU ``g``'s residents, remembered while they and their
        sharing stay the same (the device model is a pure function of them)."""
        ids = tuple(self.state.resident[g])
        running = self.state.running
        sharing = tuple(running[j].sharing for j in ids)
        hit = self._outcome[g]
        if hit is not None and hit[0] == ids and hit[1] == sharing:
            return hit[2]
        out = self.device.share(self.topology.gpu_type_of(g), self.tenants(g))
        self._outcome[g] = (ids, sharing, out)
        return out


@lru_cache(maxsize=65536)
def _pipeline_ms(spec: PipelineSpec, delays_ms: tuple[float, ...], slowdowns: tuple[float, ...]) -> float:
    """Pipeline iteration time (ms), remembered per (spec, link delays, stage slowdowns)."""
    return iteration_time_ms(spec, delays_ms, slowdowns)
