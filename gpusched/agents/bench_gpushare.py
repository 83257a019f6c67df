"""Speed benchmark (a script, not a test): ``python -m gpusched.agents.bench_gpushare``.

GPUShare-v0 env steps/s with random masked actions (tally_pairs, daris_rt; median of 3), and the
whole of daris_rt (4 tasksets × 4 policies × 3 seeds) through gpusched-bench's level runner with 2
workers.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np


def env_steps_per_s(scenario: str, steps: int = 5000, seed: int = 0) -> float:
    from gpusched_env.envs.gpushare import GPUShareEnv

    env = GPUShareEnv(scenario)
    rng = np.random.default_rng(seed)
    _, info = env.reset(seed=seed)
    t0, n = time.perf_counter(), 0
    while n < steps:
        _, _, term, _, info = env.step(int(rng.choice(np.flatnonzero(info["action_mask"]))))
        n += 1
        if term:
            _, info = env.reset(seed=seed + n)
    return n / (time.perf_counter() - t0)


def bench_wall_s() -> float:
    with tempfile.TemporaryDirectory() as out:
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "gpusched.bench.cli", "scenario=daris_rt", f"out_dir={out}", "workers=2",
                        "plots=false"], check=True, capture_output=True)
        return time.perf_counter() - t0


if __name__ == "__main__":
    for scn in ("tally_pairs", "daris_rt"):
        print(f"GPUShare-v0 {scn}: {statistics.median(env_steps_per_s(scn, seed=s) for s in range(3)):.0f} steps/s (median of 3)")
    print(f"daris_rt, 4 policies x 3 seeds, workers=2: {statistics.median(bench_wall_s() for _ in range(3)):.1f} s wall (median of 3)")
