"""The pipeline schedules (pipeline-level policies), one module each; :data:`SCHEDULES` (a
:class:`~gpusched_env.registry.Registry`) names them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from gpusched_env.pipeline.model import PipelineModel
from gpusched_env.pipeline.ops import Orders
from gpusched_env.pipeline.schedules import adaptra, gpipe, one_f_one_b, zb, zb_cpu
from gpusched_env.registry import Registry


@dataclass(frozen=True)
class Schedule:
    """A pipeline-level policy: how sends are driven, how it plans, and whether it re-plans."""

    name: str
    comm: str  # gpu or cpu (gpusched_env.pipeline.model.COMM_MODES)
    orders: Callable[[PipelineModel], Orders]  # per-stage orders from the model it believes in
    adaptive: bool = False  # re-plans when the observed delays / slowdowns change
    split_backward: bool = True  # False: B and W run as one kernel (GPipe, 1F1B)
    # GPU-driven sends rendezvous with a receive posted when the receiver reaches the operation
    # (Megatron's blocking send/recv, p2p_communication.py); False: the receives are posted ahead
    # by the schedule's own RECV nodes (ZeroBubble's isend/irecv, zb_schedules_origin.py), so a
    # send never waits for the receiver (PipeMorph@bc31ab09, zerobubble/megatron/core/pipeline_parallel/)
    rendezvous: bool = False
    # GPU-driven sends without rendezvous run on one NCCL stream per neighbour, in issue order with
    # that neighbour's receives (single isend / irecv per message on a two-rank communicator,
    # zb_schedules_origin.py fused_pipeline_ops; gpusched_env/pipeline/streams.py)
    peer_streams: bool = False

    def model_for(self, model: PipelineModel) -> PipelineModel:
        """``model`` with this schedule's comm mode, backward split and receive posting."""
        m = model.with_conditions(comm=self.comm, split_backward=self.split_backward)
        if self.rendezvous:
            return m
        # no Megatron batched p2p: no rendezvous, and PipeMorph's injector reads the peers right
        return replace(m, rendezvous=False, injector_group_ranks=False, peer_streams=self.peer_streams)


SCHEDULES: Registry[Schedule] = Registry("schedule")
SCHEDULES.add("gpipe", Schedule("gpipe", gpipe.COMM, gpipe.orders, split_backward=False, rendezvous=True),
              module=gpipe.__name__)
SCHEDULES.add("1f1b", Schedule("1f1b", one_f_one_b.COMM, one_f_one_b.orders, split_backward=False, rendezvous=True),
              module=one_f_one_b.__name__)
SCHEDULES.add("zb", Schedule("zb", zb.COMM, zb.orders, peer_streams=True), module=zb.__name__)
SCHEDULES.add("zb_cpu", Schedule("zb_cpu", zb_cpu.COMM, zb_cpu.orders), module=zb_cpu.__name__)
SCHEDULES.add("adaptra", Schedule("adaptra", adaptra.COMM, adaptra.orders, adaptive=True), module=adaptra.__name__)


def get(name: str) -> Schedule:
    """The schedule called ``name``; an unknown name raises ``ValueError`` listing the known ones."""
    if name not in SCHEDULES:
        raise ValueError(f"policy must be one of {list(SCHEDULES)}, got {name!r}")
    return SCHEDULES[name]
