"""Shared by the agent tests: a trained model played through a cluster env, deterministically."""

from __future__ import annotations

from typing import Any

from gpusched.agents.adapter import predict
from gpusched.agents.selection import play
from gpusched_env.metrics import RunResult


def play_model(env: Any, model: Any, run_seed: int, workload: int = 0) -> RunResult:
    """One episode of ``model`` (deterministic, masked) in ``env`` (a gym env); the run's result."""
    return play(env, lambda obs, mask: predict(model, obs, mask, True), [(workload, run_seed)])[0]
