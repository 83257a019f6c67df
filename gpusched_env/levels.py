"""How a level below the cluster (device, pipeline) shows its scenarios to ``gpusched-bench``.

A scenario file with ``level: device`` or ``level: pipeline`` is handed whole to that level's
``bench`` module (``gpusched_env.<level>.bench``), which implements :class:`LevelBench`. The bench
app runs every (policy, seed, workload) through it and writes the same results.json, table,
*paper vs sim* table and plots as for cluster scenarios.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from gpusched_env.config_util import ConfigError

LEVELS: tuple[str, ...] = ("cluster", "device", "pipeline")


@dataclass
class LevelRun:
    """One run's metrics (units in their names, as in results.json) and any series its plots need."""

    metrics: dict[str, float]
    series: dict[str, list[float]] = field(default_factory=dict)


class LevelScenario(Protocol):
    """What the bench app reads of a level's scenario (the level's own dataclass has the rest)."""

    name: str
    description: str
    workload_names: list[str]
    default_policies: list[str]
    paper: list[Any]  # gpusched_env.scenario.PaperClaim


class LevelBench(Protocol):
    """The module ``gpusched_env.<level>.bench``."""

    POLICIES: tuple[str, ...]

    def load(self, raw: dict[str, Any], name: str) -> LevelScenario:
        """The typed scenario from the YAML mapping; a bad or unknown key raises ConfigError naming it."""

    def run(self, scn: LevelScenario, policy: str, seed: int, workload: int) -> LevelRun:
        """One deterministic run (all randomness from ``numpy.random.SeedSequence(seed)``)."""

    def plot(self, scn: LevelScenario, runs: list[tuple[str, int, int, LevelRun]], out_dir: Path) -> list[Path]:
        """Write the level's PNG plots for (policy, seed, workload, run) tuples; return their paths."""


def level_of(raw: dict[str, Any]) -> str:
    """The scenario's level (``cluster`` when the file does not say); an unknown one is an error."""
    level = str(raw.get("level", "cluster"))
    if level not in LEVELS:
        raise ConfigError(f"scenario.level: {level!r} is not one of {', '.join(LEVELS)}")
    return level


def level_bench(level: str) -> LevelBench:
    """The module ``gpusched_env.<level>.bench``."""
    return importlib.import_module(f"gpusched_env.{level}.bench")  # type: ignore[return-value]


def load_level_scenario(raw: dict[str, Any]) -> tuple[LevelBench, LevelScenario]:
    """The level's bench module and its typed scenario from a device- or pipeline-level scenario mapping."""
    level = level_of(raw)
    lb = level_bench(level)
    body = {k: v for k, v in raw.items() if k != "level"}
    return lb, lb.load(body, str(raw.get("name", "")))
