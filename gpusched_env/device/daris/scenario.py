"""``daris_rt``-style scenarios (``level: device`` with ``tasksets``): build, run, measure."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from gpusched_env.device.daris.baselines import Batching, GSlice, PlainMps
from gpusched_env.device.daris.models import MODELS, DnnModel
from gpusched_env.device.daris.scheduler import Daris, DarisConfig
from gpusched_env.device.daris.sim import StageScheduler, StageSim
from gpusched_env.device.daris.taskset import TASKSETS, Task, build_taskset
from gpusched_env.device.gpus import device_gpu
from gpusched_env.paper import PaperClaim

STAGE_POLICIES: tuple[str, ...] = ("daris", "batching", "gslice", "mps")


@dataclass(frozen=True)
class DarisScenario:
    """``conf/scenario/daris_rt.yaml``."""

    name: str
    level: str = "device"  # must be "device"
    description: str = ""
    gpu_type: str = "RTX2080Ti"  # gpus.DEVICE_GPUS key
    tasksets: list[str] = field(default_factory=lambda: list(TASKSETS))  # workloads (taskset.TASKSETS)
    duration_s: float = 5.0  # simulated seconds per run
    jitter: float = 0.05  # job duration factor uniform in [1 - jitter, 1 + jitter]
    serial: dict[str, float] = field(default_factory=dict)  # model -> SGPRS-curve serial share (default 0.7)
    daris: DarisConfig = field(default_factory=DarisConfig)
    default_policies: list[str] = field(default_factory=lambda: list(STAGE_POLICIES))
    paper: list[PaperClaim] = field(default_factory=list)
    sources: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.level != "device":
            raise ValueError(f"level must be 'device', got {self.level!r}")
        device_gpu(self.gpu_type)
        bad = [t for t in self.tasksets if t not in TASKSETS]
        if bad or not self.tasksets:
            raise ValueError(f"tasksets must be a non-empty list of {sorted(TASKSETS)}, got {self.tasksets}")
        if not 0 < self.duration_s < math.inf:
            raise ValueError(f"duration_s must be in (0, inf), got {self.duration_s}")
        if not 0 <= self.jitter < 1:  # a factor 1 - jitter <= 0 would make a job take no time or less
            raise ValueError(f"jitter must be in [0, 1), got {self.jitter}")
        bad = [p for p in self.default_policies if p not in STAGE_POLICIES]
        if bad:
            raise ValueError(f"default_policies must be among {list(STAGE_POLICIES)}, got {bad}")
        for k, v in self.serial.items():
            if k not in MODELS or not 0.0 <= v < 1.0:
                raise ValueError(f"serial keys must be {sorted(MODELS)} with values in [0, 1), got {k}: {v}")

    @property
    def workload_names(self) -> list[str]:
        return list(self.tasksets)

    def models(self) -> dict[str, DnnModel]:
        return {k: replace(m, serial=self.serial.get(k, m.serial)) for k, m in MODELS.items()}


def make_scheduler(policy: str, scn: DarisScenario) -> StageScheduler:
    if policy == "daris":
        return Daris(scn.daris)
    table: dict[str, Any] = {"batching": Batching, "gslice": GSlice, "mps": PlainMps}
    if policy not in table:
        raise ValueError(f"policy must be one of {list(STAGE_POLICIES)}, got {policy!r}")
    return table[policy]()


def tasks_of(scn: DarisScenario, workload: int, seed: int) -> tuple[list[Task], np.random.SeedSequence]:
    """The taskset of ``workload`` (phases from child 0 of ``SeedSequence(seed)``) and the child for jitter."""
    if not 0 <= workload < len(scn.tasksets):
        raise ValueError(f"workload must be in [0, {len(scn.tasksets) - 1}], got {workload}")
    phases, jit = np.random.SeedSequence(seed).spawn(2)
    return build_taskset(scn.tasksets[workload], np.random.default_rng(phases), scn.models()), jit


def make_sim(scn: DarisScenario, policy: str, seed: int, workload: int,
             sched: StageScheduler | None = None) -> StageSim:
    tasks, jit = tasks_of(scn, workload, seed)
    gpu = device_gpu(scn.gpu_type)
    return StageSim(tasks, sched or make_scheduler(policy, scn), scn.duration_s, gpu.sms, jit, scn.jitter)


def run_taskset(scn: DarisScenario, policy: str, seed: int, workload: int) -> dict[str, float]:
    """One taskset under one policy for ``duration_s``: its metrics."""
    return stage_metrics(make_sim(scn, policy, seed, workload).run())


def stage_metrics(sim: StageSim) -> dict[str, float]:
    """throughput_jobs_s (completed jobs / s), deadline miss rates of admitted jobs due within the run,
    mean response per class, acceptance rates."""
    hp, lp = sim.stats[True], sim.stats[False]
    both = hp.completed + lp.completed
    ontime = both - hp.late - lp.late

    def rate(a: int, b: int) -> float:
        return a / b if b else 0.0

    def mean_ms(x: list[float]) -> float:
        return float(np.mean(x)) * 1e3 if x else float("nan")

    hp_ms, lp_ms = mean_ms(hp.response_s), mean_ms(lp.response_s)
    return {
        "throughput_jobs_s": both / sim.horizon,
        "goodput_jobs_s": max(0, ontime) / sim.horizon,
        "hp_deadline_miss_rate": rate(hp.late, hp.due),
        "lp_deadline_miss_rate": rate(lp.late, lp.due),
        "hp_response_ms": hp_ms,
        "lp_response_ms": lp_ms,
        "hp_lp_response_ratio": hp_ms / lp_ms if lp.response_s and hp.response_s else float("nan"),
        "acceptance_rate": rate(hp.admitted + lp.admitted, hp.released + lp.released),
        "lp_acceptance_rate": rate(lp.admitted, lp.released),
    }
