"""Digest of a Cluster env rollout: hashes of every step's observation, mask, reward and flags, and of
each episode's result, for a fixed seed and a fixed (seeded, mask-following) action sequence.

    python tests/envs/env_digest.py [--steps N] [--out FILE]    # JSON: one digest per case

Run it on two commits and compare the files: a change that is meant to leave the env's numbers
alone must leave every digest the same (the speed work on the env is checked so).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import struct
from typing import Any

import gymnasium as gym
import numpy as np

import gpusched_env  # noqa: F401  (registers the envs)
from gpusched_env.metrics import compute_metrics

CASES: dict[str, dict[str, Any]] = {
    "pal_philly": {"env": "gpusched/Cluster-v0", "kwargs": {"scenario": "pal_philly"}},
    "pal_philly_v1": {"env": "gpusched/Cluster-v1", "kwargs": {"scenario": "pal_philly"}},
    "synthetic_philly": {"env": "gpusched/Cluster-v0", "kwargs": {"scenario": "synthetic_philly"}},
    "eaco_cluster": {"env": "gpusched/Cluster-v0", "kwargs": {"scenario": "eaco_cluster", "energy_weight": 0.1}},
    "synthetic_small_tokens": {"env": "gpusched/Cluster-v0",
                               "kwargs": {"scenario": "synthetic_small", "tokens": True, "age_weight": 0.5}},
}


def _feed(h: Any, x: Any) -> None:
    if isinstance(x, dict):
        for k in sorted(x):
            h.update(k.encode())
            _feed(h, x[k])
    elif isinstance(x, np.ndarray):
        h.update(str(x.dtype).encode())
        h.update(np.ascontiguousarray(x).tobytes())
    elif isinstance(x, float):
        h.update(struct.pack("<d", x))
    else:
        h.update(repr(x).encode())


def digest(case: str, steps: int, seed: int = 0, invalid_share: float = 0.05) -> dict[str, Any]:
    """Roll ``case`` for ``steps`` steps (a new run seed per episode; about ``invalid_share`` of the
    actions drawn from the whole action space, so invalid ones occur) and hash what it returned."""
    spec = CASES[case]
    env = gym.make(spec["env"], **spec["kwargs"])
    u: Any = env.unwrapped
    rng = np.random.default_rng(seed)
    h_step, h_res = hashlib.sha256(), hashlib.sha256()
    ep = 0
    obs, info = env.reset(seed=seed, options={"run_seed": seed, "workload": 0})
    _feed(h_step, obs)
    _feed(h_step, info)
    episodes, ret = 0, []
    for _ in range(steps):
        mask = info["action_mask"]
        if rng.random() < invalid_share:
            a = int(rng.integers(mask.size))
        else:
            valid = np.flatnonzero(mask)
            a = int(valid[int(rng.random() * valid.size)])
        obs, reward, term, trunc, info = env.step(a)
        _feed(h_step, obs)
        _feed(h_step, info)
        _feed(h_step, (float(reward), bool(term), bool(trunc)))
        if term or trunc:
            res = u.result()
            _feed(h_res, {k: float(v) for k, v in compute_metrics(res).items()})
            _feed(h_res, [(r.job.job_id, r.first_start_s, r.finish_s, r.gpu_seconds, r.energy_j, r.preemptions) for r in res.records])
            ret.append(float(u.episode_return))
            episodes += 1
            ep += 1
            obs, info = env.reset(seed=seed + ep, options={"run_seed": seed + ep,
                                                           "workload": ep % len(u.workloads)})
            _feed(h_step, obs)
            _feed(h_step, info)
    return {"steps": h_step.hexdigest(), "results": h_res.hexdigest(), "episodes": episodes,
            "returns": ret, "decision_points": int(u.decision_points)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=4000)
    ap.add_argument("--cases", nargs="*", default=list(CASES))
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    out = {c: digest(c, args.steps) for c in args.cases}
    text = json.dumps(out, indent=1)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    print(text)


if __name__ == "__main__":
    main()
