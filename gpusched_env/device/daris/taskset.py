"""Periodic inference tasks and DARIS's four tasksets (DEVICE.md, AmirFB/DARIS ``main.cpp``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpusched_env.device.daris.models import MODELS, DnnModel

# DEVICE.md: HP + LP task counts per taskset (main.cpp, tasksets 1-4).
TASKSETS: dict[str, dict[str, tuple[int, int]]] = {
    "resnet": {"resnet18": (16, 32)},
    "unet": {"unet": (5, 10)},
    "inception": {"inception3": (8, 16)},
    "mix": {"resnet18": (5, 11), "unet": (2, 3), "inception3": (3, 4)},
}


@dataclass(frozen=True, slots=True)
class Task:
    """One periodic task: a job of ``model`` every ``period_s`` from ``phase_s``, due ``deadline_s`` after."""

    model: DnnModel
    high: bool  # high priority (always admitted) or low priority
    period_s: float
    deadline_s: float
    phase_s: float = 0.0

    def __post_init__(self) -> None:
        if not self.period_s > 0:
            raise ValueError(f"task {self.model.name}: period_s must be in (0, inf), got {self.period_s}")
        wcet = self.model.wcet_ms * 1e-3
        if not self.deadline_s >= wcet:
            raise ValueError(f"task {self.model.name}: deadline_s must be in [wcet {wcet:g}, inf), got {self.deadline_s}")
        if not 0.0 <= self.phase_s:
            raise ValueError(f"task {self.model.name}: phase_s must be in [0, inf), got {self.phase_s}")


def build_taskset(name: str, rng: np.random.Generator, models: dict[str, DnnModel] | None = None) -> list[Task]:
    """Taskset ``name``: HP tasks first, then LP; deadline = period; random phase in [0, period) (DEVICE.md)."""
    if name not in TASKSETS:
        raise ValueError(f"taskset must be one of {sorted(TASKSETS)}, got {name!r}")
    models = models or MODELS
    tasks = []
    for high in (True, False):
        for key, (n_hp, n_lp) in TASKSETS[name].items():
            m = models[key]
            period = 1.0 / m.rate_fps
            for _ in range(n_hp if high else n_lp):
                tasks.append(Task(m, high, period, period, float(rng.uniform(0.0, period))))
    return tasks


def releases(tasks: list[Task], horizon_s: float) -> list[tuple[float, int]]:
    """Every job release (time, task index) in [0, horizon_s), in time order."""
    out = []
    for i, tk in enumerate(tasks):
        for t in np.arange(tk.phase_s, horizon_s, tk.period_s):
            out.append((float(t), i))
    out.sort()
    return out
