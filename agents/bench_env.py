"""Env throughput benchmark (not a timed test): random masked actions, one core.

    python -m agents.bench_env                       # pal_philly, 3 episodes
    python -m agents.bench_env --scenario synthetic_philly --episodes 2 --model runs/x/model.zip

Reports env steps/s (actions per second, reset and workload building excluded), decision points/s,
and, with ``--model``, the steps/s of the model's own masked predictions through the env.
"""

from __future__ import annotations

import argparse
import json
import time

import gymnasium as gym
import numpy as np

import gpusched_env  # noqa: F401


def run(scenario: str, episodes: int, seed: int, model_path: str | None = None) -> dict[str, float]:
    env = gym.make("gpusched/Cluster-v0", scenario=scenario)
    u = env.unwrapped
    rng = np.random.default_rng(seed)
    model = None
    if model_path:
        import torch

        from agents.adapter import load_model, predict, read_meta

        torch.set_num_threads(1)
        model = load_model(model_path)
        masked = read_meta(model_path).get("algo", "maskable_ppo") == "maskable_ppo"
    steps = points = 0
    wall = 0.0
    for ep in range(episodes):
        n_wl = len(u.workloads)
        _, info = env.reset(seed=seed + ep, options={"workload": ep % n_wl, "run_seed": seed})
        t0 = time.perf_counter()
        over = False
        while not over:
            mask = info["action_mask"]
            if model is None:
                valid = np.flatnonzero(mask)
                a = int(valid[int(rng.random() * valid.size)])
            else:
                a = predict(model, u.builder.observe(), mask, masked)
            _, _, term, trunc, info = env.step(a)
            steps += 1
            over = term or trunc
        wall += time.perf_counter() - t0
        points += u.decision_points
    return {"scenario": scenario, "episodes": episodes, "steps": steps, "decision_points": points,
            "wall_s": round(wall, 3), "steps_per_s": round(steps / wall, 1),
            "decision_points_per_s": round(points / wall, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenario", default="pal_philly")
    ap.add_argument("--episodes", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model", default=None)
    args = ap.parse_args()
    print(json.dumps(run(args.scenario, args.episodes, args.seed, args.model), indent=2))


if __name__ == "__main__":
    main()
