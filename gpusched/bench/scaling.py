"""How a policy's run time grows with the trace and the cluster: ``python -m gpusched.bench.scaling``.

Runs one policy (seed 0) on prefixes of ``philly_full`` (``--jobs``: the first N jobs by submit
time) and on clusters of ``--gpus`` GPUs (nodes of 8 V100, the first ``--gpus-jobs`` jobs; jobs larger
than the cluster are left out: ``workload.strict: false``), timing each simulation (wall and CPU
seconds, trace load excluded), and plots both series into ``--out`` (PNG) with the figures beside it
as JSON.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from gpusched.agents.policies import make_policy
from gpusched.bench.phases import _scenario_cfg
from gpusched_env.cluster.build import build_simulator
from gpusched_env.policy import run_policy
from gpusched_env.scenario import load_scenario


def time_run(policy: str, overrides: list[str]) -> dict[str, Any]:
    """Simulate ``policy`` on ``philly_full`` with scenario ``overrides``; jobs, wall and CPU seconds."""
    scn = load_scenario(_scenario_cfg("philly_full", overrides))
    _, jobs, sim = build_simulator(scn, 0)
    pol = make_policy(policy, scn, 0)
    t0, c0 = time.perf_counter(), time.process_time()
    run_policy(sim, pol)
    return {"jobs": len(jobs), "gpus": scn.cluster.topology().n_gpus,
            "wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0}


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gpusched.bench.scaling", description="run time vs jobs and cluster size")
    ap.add_argument("--policy", default="fifo")
    ap.add_argument("--jobs", type=_ints, default=[1000, 10000, 82247], help="prefix lengths, e.g. 1000,10000")
    ap.add_argument("--gpus", type=_ints, default=[128, 256, 512, 1024, 2048], help="cluster sizes (multiples of 8)")
    ap.add_argument("--gpus-jobs", type=int, default=10000, help="prefix length of the cluster-size series")
    ap.add_argument("--out", default="docs/img/scaling.png")
    args = ap.parse_args(argv)
    by_jobs = [time_run(args.policy, [f"workload.limit={n}"]) for n in args.jobs]
    by_gpus = []
    for g in args.gpus:
        if g % 8:
            raise SystemExit(f"--gpus: {g} is not a multiple of 8 (nodes of 8 GPUs)")
        nodes = f"cluster.nodes=[{{count: {g // 8}, gpus_per_node: 8, gpu_type: V100, gpu_mem_gb: 32.0}}]"
        by_gpus.append(time_run(args.policy, [f"workload.limit={args.gpus_jobs}", "workload.strict=false", nodes]))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    doc = {"policy": args.policy, "by_jobs": by_jobs, "by_gpus": by_gpus}
    out.with_suffix(".json").write_text(json.dumps(doc, indent=1) + "\n")
    _plot(doc, out)
    for r in by_jobs + by_gpus:
        print(f"{args.policy}: {r['jobs']} jobs on {r['gpus']} GPUs: {r['wall_s']:.2f} s wall, {r['cpu_s']:.2f} s CPU")
    return 0


def _plot(doc: dict[str, Any], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    for ax, key, x, label in ((a, "by_jobs", "jobs", "jobs (prefix of the Philly trace, 512 GPUs)"),
                              (b, "by_gpus", "gpus", "GPUs (first jobs of the trace)")):
        rows = doc[key]
        ax.plot([r[x] for r in rows], [r["cpu_s"] for r in rows], "o-", label="CPU s")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(label)
        ax.set_ylabel("simulation time (CPU s)")
        ax.grid(True, which="both", alpha=0.3)
    fig.suptitle(f"philly_full, {doc['policy']}: run time vs trace length and cluster size")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
