"""The pipeline schedules (pipeline-level policies), one module each; :data:`SCHEDULES` names them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gpusched_env.pipeline.model import PipelineModel
from gpusched_env.pipeline.ops import Orders
from gpusched_env.pipeline.schedules import adaptra, gpipe, one_f_one_b, zb, zb_cpu


@dataclass(frozen=True)
class Schedule:
    """A pipeline-level policy: how sends are driven, how it plans, and whether it re-plans."""

    name: str
    comm: str  # gpu or cpu (gpusched_env.pipeline.model.COMM_MODES)
    orders: Callable[[PipelineModel], Orders]  # per-stage orders from the model it believes in
    adaptive: bool = False  # re-plans when the observed delays / slowdowns change
    split_backward: bool = True  # False: B and W run as one kernel (GPipe, 1F1B)

    def model_for(self, model: PipelineModel) -> PipelineModel:
        """``model`` with this schedule's comm mode and backward split."""
        return model.with_conditions(comm=self.comm, split_backward=self.split_backward)


SCHEDULES: dict[str, Schedule] = {
    "gpipe": Schedule("gpipe", gpipe.COMM, gpipe.orders, split_backward=False),
    "1f1b": Schedule("1f1b", one_f_one_b.COMM, one_f_one_b.orders, split_backward=False),
    "zb": Schedule("zb", zb.COMM, zb.orders),
    "zb_cpu": Schedule("zb_cpu", zb_cpu.COMM, zb_cpu.orders),
    "adaptra": Schedule("adaptra", adaptra.COMM, adaptra.orders, adaptive=True),
}


def get(name: str) -> Schedule:
    """The schedule called ``name``; an unknown name raises ``ValueError`` listing the known ones."""
    if name not in SCHEDULES:
        raise ValueError(f"policy must be one of {list(SCHEDULES)}, got {name!r}")
    return SCHEDULES[name]
