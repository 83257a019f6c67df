"""The backends a cluster scenario's runs go through, looked up by name (``gpusched-bench backend=NAME``).

A backend runs one (scenario, policy, run seed, workload) and returns the workload's name and the
run's :class:`~gpusched_env.metrics.RunResult`; the bench app computes the metrics and writes
results.json the same way whichever backend ran. ``sim`` is the simulator
(:func:`gpusched_env.cluster.build.simulate`, the default); ``real`` runs the jobs as real processes on
real devices or CPU stand-ins (``gpusched.real.runs:RealRuns``, the backend of ``gpusched-real replay``).

The table holds ``module:factory`` paths, resolved when a backend is made, so that nothing here
imports an app (imports point downward: tests/test_architecture.py); another package adds its own
backend with :func:`register_backend`. A factory takes the backend's options (a mapping, e.g.
``gpusched-bench``'s ``real:`` keys) and returns a :class:`RunBackend`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from gpusched_env.cluster.watch import RunLimits, RunProgress
from gpusched_env.config_util import ConfigError
from gpusched_env.metrics import RunResult
from gpusched_env.policy import Policy
from gpusched_env.scenario import Scenario

BACKENDS: dict[str, str] = {
    "sim": "gpusched_env.backends:SimRuns",
    "real": "gpusched.real.runs:RealRuns",
}
"""Backend name -> ``module:factory`` (the first is the default)."""


class RunBackend(Protocol):
    """Runs one (scenario, policy, run seed, workload index) to its end."""

    parallel: bool  # may runs go on at once in worker processes (False: they share devices)

    def check(self, scn: Scenario, seed: int) -> None:
        """Raise a ConfigError if ``scn``'s runs cannot go through this backend (before any run)."""
        ...

    def run(self, scn: Scenario, policy: Policy, seed: int, workload: int, run_dir: Path | None, *,
            check: bool = False, limits: RunLimits | None = None,
            report: Callable[[RunProgress], None] | None = None) -> tuple[str, RunResult]:
        """(workload name, result); ``run_dir``: this run's own folder for what the backend writes
        (None: the backend writes nothing)."""
        ...


def register_backend(name: str, factory: str) -> None:
    """Add (or replace) backend ``name``: ``factory`` is ``module:callable``."""
    if ":" not in factory:
        raise ValueError(f"factory must be 'module:callable', got {factory!r}")
    BACKENDS[name] = factory


def check_backend(name: Any) -> str:
    """``name`` if it is a backend, else a ConfigError naming ``backend`` and the allowed values."""
    if not isinstance(name, str) or name not in BACKENDS:
        raise ConfigError(f"backend: unknown backend {name!r}; allowed: {', '.join(BACKENDS)}")
    return name


def make_backend(name: str, options: Mapping[str, Any] | None = None) -> RunBackend:
    """A fresh backend ``name`` with its ``options``."""
    module, _, attr = BACKENDS[check_backend(name)].partition(":")
    factory: Callable[[Mapping[str, Any]], RunBackend] = getattr(importlib.import_module(module), attr)
    return factory(dict(options or {}))


class SimRuns:
    """``backend=sim``: the simulator; every run is :func:`gpusched_env.cluster.build.simulate`."""

    parallel = True

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        if options:
            raise ConfigError(f"backend: sim takes no options, got {sorted(options)}")

    def check(self, scn: Scenario, seed: int) -> None:
        pass

    def run(self, scn: Scenario, policy: Policy, seed: int, workload: int, run_dir: Path | None = None, *,
            check: bool = False, limits: RunLimits | None = None,
            report: Callable[[RunProgress], None] | None = None) -> tuple[str, RunResult]:
        from gpusched_env.cluster.build import simulate

        return simulate(scn, policy, seed, workload, check, limits, report)
