"""Shared by the agent tests: a trained model played through a cluster env, deterministically."""

from __future__ import annotations

from typing import Any

from gpusched_env.metrics import RunResult


def play_model(env: Any, model: Any, run_seed: int, workload: int = 0) -> RunResult:
    """One episode of ``model`` (deterministic, masked) in ``env`` (a gym env); the run's result."""
    obs, info = env.reset(options={"workload": workload, "run_seed": run_seed})
    over = False
    while not over:
        a, _ = model.predict(obs, action_masks=info["action_mask"], deterministic=True)
        obs, _, term, trunc, info = env.step(int(a))
        over = term or trunc
    return env.unwrapped.result()
