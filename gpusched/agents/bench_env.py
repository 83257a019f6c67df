"""Env throughput benchmark (not a timed test): random masked actions, one core.

    python -m gpusched.agents.bench_env                       # pal_philly, its 8 workloads, 3 repeats
    python -m gpusched.agents.bench_env --scenario synthetic_philly --episodes 2 --model runs/x/model.zip
    python -m gpusched.agents.bench_env --env gpusched/Cluster-v1      # the env with preemption
    python -m gpusched.agents.bench_env --with-resets                  # also steps/s counting every reset

Reports env steps/s (actions per second; reset and workload building excluded), decision points/s,
and, with ``--model``, the steps/s of the model's own masked predictions through the env. With
``--with-resets`` every episode has a new run seed (as training with ``run_seeds: null`` has), so each
reset builds its workload, and ``steps_per_s_with_resets`` counts the resets' time too (the same
episodes give both figures); ``steps_per_episode``, ``reset_ms`` (wall, mean per reset: building the
run and simulating up to its first decision point) and ``resets_share`` (of the wall time with
resets) say how much of that figure the resets are. The process is pinned to one CPU (``--cpu``);
one warm-up episode first (library start-up such as scikit-learn's first K-Means call, ~1 s, is not
throughput). Each repeat runs the same episodes;
the median repeat is reported, all repeats are listed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from typing import Any, cast

import gymnasium as gym
import numpy as np

import gpusched_env  # noqa: F401
from gpusched_env.envs.cluster import ClusterEnv


def run(scenario: str, episodes: int, seed: int, model_path: str | None = None,
        env_id: str = "gpusched/Cluster-v0", with_resets: bool = False) -> dict[str, Any]:
    env = gym.make(env_id, scenario=scenario)
    u = cast(ClusterEnv, env.unwrapped)
    model = None
    if model_path:
        import torch

        from gpusched.agents.adapter import load_model, predict, read_meta

        torch.set_num_threads(1)
        model = load_model(model_path)
        masked = read_meta(model_path).get("algo", "maskable_ppo") == "maskable_ppo"
    rng = np.random.default_rng(seed)
    n_wl = len(u.workloads)

    def episode(ep: int, run_seed: int) -> tuple[int, float, float, float, float]:
        r0, rc0 = time.perf_counter(), time.process_time()
        _, info = env.reset(seed=seed + ep, options={"workload": ep % n_wl, "run_seed": run_seed})
        t0, c0 = time.perf_counter(), time.process_time()
        steps, over = 0, False
        while not over:
            mask = info["action_mask"]
            if model is None:
                valid = mask.nonzero()[0]  # = np.flatnonzero(mask), one C call (the mask is 1-D)
                a = int(valid[int(rng.random() * valid.size)])
            else:
                assert u.builder is not None
                a = predict(model, u.builder.observe(), mask, masked)
            _, _, term, trunc, info = env.step(a)
            steps += 1
            over = term or trunc
        return steps, time.perf_counter() - t0, time.process_time() - c0, t0 - r0, c0 - rc0

    episode(0, seed)  # warm-up
    steps = points = 0
    wall = cpu = resets = resets_cpu = 0.0
    for ep in range(episodes):
        n, dt, dc, dr, drc = episode(ep, seed + 1 + ep if with_resets else seed)
        steps += n
        wall += dt
        cpu += dc
        resets += dr
        resets_cpu += drc
        points += u.decision_points
    out = {"env": env_id, "scenario": scenario, "episodes": episodes, "steps": steps, "decision_points": points,
           "wall_s": round(wall, 3), "steps_per_s": round(steps / wall, 1),
           "steps_per_cpu_s": round(steps / cpu, 1), "decision_points_per_s": round(points / wall, 1)}
    if with_resets:
        out.update(resets_s=round(resets, 3), steps_per_s_with_resets=round(steps / (wall + resets), 1),
                   steps_per_cpu_s_with_resets=round(steps / (cpu + resets_cpu), 1),
                   steps_per_episode=round(steps / episodes, 1), reset_ms=round(1e3 * resets / episodes, 2),
                   resets_share=round(resets / (wall + resets), 3))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenario", default="pal_philly")
    ap.add_argument("--env", default="gpusched/Cluster-v0", help="gpusched/Cluster-v0 or gpusched/Cluster-v1")
    ap.add_argument("--episodes", type=int, default=8, help="timed episodes per repeat (workload = episode mod #workloads)")
    ap.add_argument("--repeat", type=int, default=3, help="repeats; the median is reported")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model", default=None)
    ap.add_argument("--cpu", type=int, default=None, help="CPU to pin to (default: the first allowed); -1: no pinning")
    ap.add_argument("--with-resets", action="store_true",
                    help="a new run seed per episode; also report steps/s counting the resets")
    args = ap.parse_args()
    if args.cpu != -1 and hasattr(os, "sched_setaffinity"):
        cpu = min(os.sched_getaffinity(0)) if args.cpu is None else args.cpu
        os.sched_setaffinity(0, {cpu})
    runs = [run(args.scenario, args.episodes, args.seed, args.model, args.env, args.with_resets)
            for _ in range(max(1, args.repeat))]
    med = statistics.median_low([r["steps_per_s"] for r in runs])
    out = dict(next(r for r in runs if r["steps_per_s"] == med))
    out["repeats_steps_per_s"] = [r["steps_per_s"] for r in runs]
    if args.with_resets:
        out["repeats_steps_per_s_with_resets"] = [r["steps_per_s_with_resets"] for r in runs]
        out["median_steps_per_s_with_resets"] = statistics.median_low(out["repeats_steps_per_s_with_resets"])
        out["repeats_steps_per_cpu_s"] = [r["steps_per_cpu_s"] for r in runs]
        out["repeats_steps_per_cpu_s_with_resets"] = [r["steps_per_cpu_s_with_resets"] for r in runs]
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
