"""The real backend of ``gpusched-bench backend=real`` (registered in :data:`gpusched_env.backends.BACKENDS`)
and the one run behind ``gpusched-real replay``: every run's jobs are real processes on real devices
(or CPU stand-ins), driven by the policy through :func:`gpusched.real.replay.replay`.

Options are the keys of conf/real/config.yaml that a run reads (:data:`KEYS`); each given one
replaces that file's value (``devices`` and ``real`` key by key; null keeps the file's value). ``gpusched-bench``
takes them under ``real:`` (e.g. ``real.devices.kind=cpu``), ``gpusched-real replay`` at the top
level of its own config. Each run writes its own folder (results.json with the ``real`` block,
telemetry.csv, commands.jsonl, job logs); runs go one after another (they share the devices).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

from gpusched.real.backend import RealConfig
from gpusched.real.commands import CommandRunner
from gpusched.real.config import DevicesConf, RealWorkload, build_devices, load_sizes
from gpusched.real.devices import Devices
from gpusched.real.profile import ProfileResult, load_profile_dir
from gpusched.real.replay import ReplayOutcome, replay
from gpusched_env.cluster.build import shared_cache
from gpusched_env.cluster.watch import RunLimits, RunProgress
from gpusched_env.config_util import ConfigError, from_dict
from gpusched_env.metrics import RunResult
from gpusched_env.policy import Policy
from gpusched_env.scenario import Scenario

CONFIG = Path(__file__).resolve().parents[2] / "gpusched_env" / "conf" / "real" / "config.yaml"
KEYS: tuple[str, ...] = ("devices", "real", "models", "commands", "profile_dir")
"""The keys of conf/real/config.yaml a real run reads (the rest belong to the other subcommands)."""
MERGED: tuple[str, ...] = ("devices", "real")
"""Options given key by key; any other given value (``models`` too) replaces the file's whole."""


def real_options(options: Mapping[str, Any] | None, where: str = "real") -> dict[str, Any]:
    """conf/real/config.yaml's :data:`KEYS`, each replaced by ``options``' value where that is not null
    (:data:`MERGED` key by key). An unknown key is a ConfigError naming ``where.key``."""
    base: dict[str, Any] = {k: v for k, v in (yaml.safe_load(CONFIG.read_text()) or {}).items() if k in KEYS}
    for key, value in (options or {}).items():
        if key not in KEYS:
            raise ConfigError(f"{where + '.' if where else ''}{key}: unknown key; a real run reads {', '.join(KEYS)} "
                              "(conf/real/config.yaml)")
        if value is None:
            continue
        if key in MERGED and isinstance(value, Mapping) and isinstance(base.get(key), dict):
            base[key] = {**base[key], **{k: v for k, v in value.items() if v is not None}}
        else:
            base[key] = value
    return base


def load_profile(path: str | None) -> ProfileResult | None:
    """The profile of ``profile_dir`` (None when unset); a folder without a readable profile is a ConfigError."""
    if not path:
        return None
    folder = Path(str(path))
    try:
        return load_profile_dir(folder)
    except (OSError, ValueError, KeyError) as e:
        why = f"no {e.filename}" if isinstance(e, FileNotFoundError) else f"{type(e).__name__}: {e}"
        raise ConfigError(f"profile_dir: {folder} is not a profile folder written by gpusched-real profile "
                          f"({why})") from None


def devices_for(cfg: Mapping[str, Any], n_gpus: int, out: Path) -> tuple[Devices, CommandRunner]:
    """The devices of ``cfg['devices']`` (count: the scenario's ``n_gpus`` unless given) and the
    command runner, logging to ``out/commands.jsonl``."""
    d = dict(cfg.get("devices") or {})
    if d.get("count") is None and d.get("cores") is None:
        d["count"] = n_gpus
    out.mkdir(parents=True, exist_ok=True)
    return build_devices(from_dict(DevicesConf, d, "devices"), str(cfg.get("commands", "auto")),
                         out / "commands.jsonl")


class RealRuns:
    """``backend=real``: one real replay per run, in the run's own folder."""

    parallel = False

    def __init__(self, options: Mapping[str, Any] | None = None, where: str = "real") -> None:
        self.cfg = real_options(options, where)
        pre = f"{where}." if where else ""
        self.rconf = from_dict(RealConfig, self.cfg.get("real"), f"{pre}real")
        self.sizes = load_sizes(self.cfg.get("models"))
        self.profile = load_profile(self.cfg.get("profile_dir"))
        from_dict(DevicesConf, self.cfg.get("devices"), f"{pre}devices")  # a bad key or value before any run

    def check(self, scn: Scenario, seed: int) -> None:
        """Every model of the scenario's jobs has a real stand-in (``models``)."""
        self.workload(scn, seed, 0)

    def workload(self, scn: Scenario, seed: int, workload: int = 0) -> tuple[str, RealWorkload]:
        """Workload ``workload`` of ``scn`` under run seed ``seed``: the simulator's jobs, as a real workload."""
        name, jobs = shared_cache(scn).get(seed, workload)
        return name, RealWorkload(scn.name, scn.cluster.topology(), jobs, self.sizes, scn.cluster.max_jobs_per_gpu)

    def replay(self, wl: RealWorkload, policy: Policy, seed: int, run_dir: Path,
               progress: Callable[[int, float], None] | None = None,
               profile: ProfileResult | None = None) -> tuple[ReplayOutcome, Devices]:
        """One real run of ``wl`` under ``policy`` writing ``run_dir``; the scheduler sees the
        slowdown of ``profile`` (default: ``profile_dir``'s) when it has one row per device."""
        devices, runner = devices_for(self.cfg, wl.topology.n_gpus, run_dir)
        prof = profile if profile is not None else self.profile
        slowdown = prof.factors if prof is not None and prof.factors.shape[0] == devices.n else None
        return replay(wl, policy, devices, runner, run_dir, seed, self.rconf, slowdown, progress=progress), devices

    def run(self, scn: Scenario, policy: Policy, seed: int, workload: int, run_dir: Path | None, *,
            check: bool = False, limits: RunLimits | None = None,
            report: Callable[[RunProgress], None] | None = None) -> tuple[str, RunResult]:
        """gpusched-bench's run: ``real.max_wall_s`` bounds it (the bench's event and wall limits are the
        simulator's); ``check`` and ``report`` are the simulator's too."""
        if run_dir is None:
            raise ValueError("backend real writes each run's folder: run_dir is required")
        name, wl = self.workload(scn, seed, workload)
        outcome, _ = self.replay(wl, policy, seed, Path(run_dir))
        return name, outcome.result
