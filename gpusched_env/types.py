"""Typed records shared by the simulator, the policies and the real backend.

A policy sees a read-only :class:`~gpusched_env.view.ClusterView` and returns a list of
:data:`Decision` values; backends validate and apply them. Nothing here imports a backend.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpusched_env.device.service import ServiceSpec
from gpusched_env.pipeline.spec import PipelineSpec
from gpusched_env.vocabulary import EXCLUSIVE, MPS, MPS_PRIORITY, TIME_SLICING, current_name

PERF_CLASSES: tuple[str, ...] = ("A", "B", "C", "D")
"""PAL's application classes (CALIBRATION.md, PAL). Index = column of the variability matrix."""
_CLASS_INDEX: dict[str, int] = {c: i for i, c in enumerate(PERF_CLASSES)}  # one dict read per call


@dataclass(frozen=True, slots=True)
class Job:
    """One training job as submitted. Static: the backend keeps the dynamic state apart.

    Attributes:
        job_id: unique, non-negative integer.
        arrival_s: submit time, seconds from the start of the run.
        num_gpus: GPUs requested (>= 1).
        work_iters: iterations to run (the unit of work; time = iterations x iteration time).
        model: a name in the model catalogue (:mod:`gpusched_env.catalog`).
        perf_class: PAL class "A".."D" of the model (variability column).
        mem_gb: GPU memory used on each of its GPUs.
        gpu_fraction: share of one GPU requested (Alibaba ``gpu_milli``/1000); 1.0 = whole GPUs.
        priority: larger = more important (EaCO / Tally high-priority jobs use > 0).
        deadline_s: absolute completion deadline in seconds, or None (no SLO).
        gpu_type: required GPU type (Alibaba ``gpu_spec``), or None for any.
        tracked: False for background load that competes for GPUs but is left out of metrics
            (PAL's artifact keeps arrivals going after the tracked jobs).
        service: set for an inference service (request arrivals, SLO; the device level), else None.
        pipeline: set for a pipeline-parallel job (stages; the pipeline level), else None.
    """

    job_id: int
    arrival_s: float
    num_gpus: int
    work_iters: float
    model: str
    perf_class: str = "A"
    mem_gb: float = 0.0
    gpu_fraction: float = 1.0
    priority: int = 0
    deadline_s: float | None = None
    gpu_type: str | None = None
    tracked: bool = True
    service: ServiceSpec | None = None
    pipeline: PipelineSpec | None = None

    @property
    def class_index(self) -> int:
        """Column of ``perf_class`` in :data:`PERF_CLASSES` (ValueError for another class)."""
        try:
            return _CLASS_INDEX[self.perf_class]
        except KeyError:
            raise ValueError(f"Job {self.job_id}: perf_class must be one of {PERF_CLASSES}, got {self.perf_class!r}") from None


SHARING_KINDS: tuple[str, ...] = (TIME_SLICING, EXCLUSIVE, MPS, MPS_PRIORITY)
"""The mechanism names of :mod:`gpusched_env.vocabulary`; the first is the default."""
MPS_KINDS: tuple[str, ...] = (MPS, MPS_PRIORITY)


@dataclass(frozen=True, slots=True)
class Sharing:
    """How a job shares each of its GPUs.

    kind:
        ``time_slicing`` (default): the job takes the whole GPU; tenants that join later time-slice
        with it (Gandiva-style packing).
        ``exclusive``: no other tenant may be placed on its GPUs while it runs.
        ``mps``: an MPS client limited to ``sm_pct`` % of the SMs (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE).
        ``mps_priority``: an MPS client with ``sm_pct`` and a client ``priority`` (higher is served
        first at block dispatch).
    The MPS percentages on one GPU sum to at most 100, unless every MPS tenant there allows
    ``oversubscribe`` (DARIS-style oversubscription). Only MPS tenants may share a GPU with each
    other; MPS and time-sliced tenants do not mix on one GPU. The old kinds ``time_slice`` and
    ``priority`` are accepted with a one-line note naming the new one.
    """

    kind: str = TIME_SLICING
    sm_pct: float = 100.0
    priority: int = 0
    oversubscribe: bool = False
    is_mps: bool = field(init=False, repr=False, compare=False)  # kind is mps or mps_priority (set once: hot path)

    def __post_init__(self) -> None:
        if self.kind not in SHARING_KINDS:
            kind = current_name(self.kind, "sharing kind")
            if kind not in SHARING_KINDS:
                raise ValueError(f"sharing kind must be one of {', '.join(SHARING_KINDS)}, got {self.kind!r}")
            object.__setattr__(self, "kind", kind)
        if not 0.0 < self.sm_pct <= 100.0:
            raise ValueError(f"sharing sm_pct must be in (0, 100], got {self.sm_pct}")
        if self.kind not in MPS_KINDS and (self.sm_pct != 100.0 or self.oversubscribe):
            raise ValueError(f"sharing {self.kind!r} takes the whole GPU: sm_pct and oversubscribe are MPS-only")
        object.__setattr__(self, "is_mps", self.kind in MPS_KINDS)

    @property
    def sm_share(self) -> float:
        """Fraction of the SMs the job may use (1 for whole-GPU kinds)."""
        return self.sm_pct / 100.0 if self.is_mps else 1.0

    @classmethod
    def mps(cls, sm_pct: float, oversubscribe: bool = False) -> Sharing:
        return cls(MPS, sm_pct, 0, oversubscribe)


WHOLE_GPU = Sharing()


@dataclass(frozen=True, slots=True)
class Start:
    """Start (or resume) a pending job on ``gpus``, sharing them as ``sharing`` says."""

    job_id: int
    gpus: tuple[int, ...]
    sharing: Sharing = WHOLE_GPU


@dataclass(frozen=True, slots=True)
class Preempt:
    """Checkpoint a running job and put it back in the queue."""

    job_id: int


@dataclass(frozen=True, slots=True)
class Migrate:
    """Move a running job to other GPUs (checkpoint + resume; costs one restart)."""

    job_id: int
    gpus: tuple[int, ...]
    sharing: Sharing = WHOLE_GPU


Decision = Start | Preempt | Migrate


class InvalidDecision(ValueError):
    """A policy returned a decision that breaks a rule; the message names the rule."""

    def __init__(self, rule: str, detail: str) -> None:
        super().__init__(f"invalid decision [{rule}]: {detail}")
        self.rule = rule


@dataclass(slots=True)
class JobRecord:
    """What happened to one job; the input of :mod:`gpusched_env.metrics`."""

    job: Job
    first_start_s: float | None = None
    finish_s: float | None = None
    gpu_seconds: float = 0.0
    energy_j: float = 0.0
    preemptions: int = 0
    restarts: int = 0
    migrations: int = 0
    deadline_met: bool | None = None

    @property
    def jct_s(self) -> float:
        assert self.finish_s is not None, f"job {self.job.job_id} has not finished"
        return self.finish_s - self.job.arrival_s

    @property
    def queue_s(self) -> float:
        assert self.first_start_s is not None
        return self.first_start_s - self.job.arrival_s
