"""What a real run needs from config: the workload (a project scenario), the real models standing in
for its catalogue models, the devices, and the policy.

Scenarios are the project's own (``gpusched_env.scenario``: ``conf/scenario/NAME.yaml``, usually an
``inline`` workload); ``models.*`` in conf/real/config.yaml maps each catalogue model name a job uses
to a real architecture and size. The scenario's GPU count must match the devices this machine gives.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpusched.real.commands import DryRunRunner, ExecRunner, make_runner, nvidia_problem
from gpusched.real.devices import CpuDevices, Devices, NvidiaDevices, parse_cores
from gpusched.real.models import ModelSize
from gpusched_env.catalog import model_spec
from gpusched_env.config_util import ConfigError, from_dict
from gpusched_env.policy import Policy
from gpusched_env.topology import Topology
from gpusched_env.types import PERF_CLASSES, Job


@dataclass(frozen=True)
class RealWorkload:
    """One real run's workload: cluster shape, jobs, and the real model of each catalogue name."""

    name: str
    topology: Topology
    jobs: list[Job]
    sizes: dict[str, ModelSize]
    max_jobs_per_gpu: int = 4

    def __post_init__(self) -> None:
        for j in self.jobs:
            if j.model not in self.sizes:
                raise ConfigError(f"models.{j.model}: job {j.job_id} uses model {j.model!r}, which has no "
                                  f"real stand-in; configured: {sorted(self.sizes)}")


def perf_class(name: str, size: ModelSize) -> str:
    """PAL class of a configured model: its own ``perf_class``, else the catalogue's."""
    if size.perf_class is not None:
        if size.perf_class not in PERF_CLASSES:
            raise ConfigError(f"models.{name}.perf_class must be one of {PERF_CLASSES}, got {size.perf_class!r}")
        return size.perf_class
    try:
        return model_spec(name).perf_class
    except KeyError as e:
        raise ConfigError(f"models.{name}: not a catalogue model, so perf_class is required") from e


def load_sizes(cfg: Any) -> dict[str, ModelSize]:
    sizes = from_dict(_Sizes, {"models": cfg}, "").models
    for name, s in sizes.items():
        perf_class(name, s)
    return sizes


@dataclass(frozen=True)
class _Sizes:
    models: dict[str, ModelSize]


def load_workload(scenario: str, sizes: dict[str, ModelSize], seed: int) -> tuple[RealWorkload, Any]:
    """A project scenario (name, or path to a YAML file) as a :class:`RealWorkload` (its first
    workload), and the Scenario itself."""
    from gpusched_env.scenario import build_workloads, load_scenario
    from gpusched_env.scenario_file import read_scenario_file

    data = read_scenario_file(scenario)
    check_level(data, scenario)
    scn = load_scenario(data)
    topo = scn.cluster.topology()
    name, jobs = build_workloads(scn, seed, topo)[0]
    wl = RealWorkload(scn.name, topo, jobs, sizes, scn.cluster.max_jobs_per_gpu)
    return wl, scn


def check_level(data: Any, name: str) -> None:
    """profile, replay and compare run cluster-level scenarios; another level's is a ConfigError saying so."""
    level = str(data.get("level", "cluster")) if isinstance(data, dict) else "cluster"
    if level != "cluster":
        raise ConfigError(f"scenario: {name} is a {level}-level scenario; gpusched-real profile, replay and compare "
                          "run cluster-level scenarios (e.g. scenario=real_cpu_small), and gpusched-real pairs runs "
                          "HP inference + BE training pairs on one device (pairs.*)")


@dataclass(frozen=True)
class DevicesConf:
    """``devices.*``: kind auto | cpu | nvidia. CPU: ``cores`` (list of core lists) or ``count`` x
    ``cores_per_device`` consecutive cores. NVIDIA: ``count`` only needed in dry run."""

    kind: str = "auto"
    count: int | None = None
    cores_per_device: int = 1
    cores: list[list[int]] | None = None
    idle_w_per_core: float = 1.0
    busy_w_per_core: float = 3.5
    nice: int = 0
    nvidia_idle_w: float = 50.0

    def __post_init__(self) -> None:
        if self.kind not in DEVICE_KINDS:
            raise ConfigError(f"devices.kind must be one of {', '.join(DEVICE_KINDS)}; got {self.kind!r}")
        if self.count is not None and self.count < 1:
            raise ConfigError(f"devices.count must be >= 1 (or null: as many as the scenario has GPUs); got {self.count}")
        if self.cores_per_device < 1:
            raise ConfigError(f"devices.cores_per_device must be >= 1; got {self.cores_per_device}")
        if not 0 <= self.idle_w_per_core <= self.busy_w_per_core:
            raise ConfigError(f"devices.idle_w_per_core must be in [0, busy_w_per_core={self.busy_w_per_core}]; "
                              f"got {self.idle_w_per_core}")
        if self.nvidia_idle_w < 0:
            raise ConfigError(f"devices.nvidia_idle_w must be >= 0; got {self.nvidia_idle_w}")


DEVICE_KINDS: tuple[str, ...] = ("auto", "cpu", "nvidia")


def build_devices(cfg: DevicesConf, commands: str, log_path: Path | None) -> tuple[Devices, DryRunRunner | ExecRunner]:
    """The devices of this machine and the command runner for their GPU-only commands.

    CPU devices always get a dry-run runner: MPS commands are recorded, never executed. NVIDIA
    devices need a working GPU (:func:`gpusched.real.commands.nvidia_problem`), checked before anything runs;
    without one only a recorded dry run (``commands=dry_run`` and ``GPUSCHED_CPU_FALLBACK=1``, the
    clients then train on the CPU) is allowed."""
    kind = cfg.kind
    if kind == "auto":
        kind = "nvidia" if nvidia_problem() is None else "cpu"
    if kind == "cpu":
        runner: DryRunRunner | ExecRunner = DryRunRunner(log_path)
        try:
            cores = parse_cores(cfg.cores, cfg.count, cfg.cores_per_device)
            return CpuDevices(cores, cfg.idle_w_per_core, cfg.busy_w_per_core, cfg.nice), runner
        except ValueError as e:
            raise ConfigError(str(e)) from e
    problem = nvidia_problem()
    if problem is not None and not (commands == "dry_run" and os.environ.get("GPUSCHED_CPU_FALLBACK") == "1"):
        raise ConfigError(f"devices.kind=nvidia: no working NVIDIA GPU here ({problem}); use devices.kind=cpu "
                          f"or auto (a recorded dry run needs commands=dry_run and GPUSCHED_CPU_FALLBACK=1)")
    runner = make_runner(commands, log_path)
    try:
        return NvidiaDevices(runner, cfg.count, cfg.nvidia_idle_w), runner
    except ValueError as e:
        raise ConfigError(str(e)) from e


def make_policy(name: str, scn: Any, seed: int, agent_path: str | None, kwargs: dict[str, Any]) -> Policy:
    """A policy exactly as gpusched-bench builds it (:func:`gpusched.agents.policies.make_policy`); bad
    names or parameters become errors naming the config key."""
    from gpusched.agents.policies import make_policy as bench_policy

    if name == "agent" and not agent_path:
        raise ConfigError("agent_path: policy=agent needs agent_path=FILE (a model.zip from gpusched-train)")
    try:
        return bench_policy(name, scn, seed, agent_path, **kwargs)
    except ValueError as e:
        key = "policy" if "unknown policy" in str(e) else "policy_kwargs"
        raise ConfigError(f"{key}: {e}") from e


def as_dict(cfg: Any) -> dict[str, Any]:
    """An OmegaConf node (or mapping) as a plain dict."""
    from omegaconf import OmegaConf

    if OmegaConf.is_config(cfg):
        return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]
    return dict(cfg or {})
