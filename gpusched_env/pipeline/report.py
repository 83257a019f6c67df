"""``python -m gpusched_env.pipeline.report [SCENARIO] [--seeds 0 1 2]``: the pipeline scenario's
results, its *paper vs sim* table (PaperClaim arithmetic, as gpusched-bench computes it) and the
per-case speedups the paper's statements are about. Prints markdown (docs/PIPELINE.md pastes it)."""

from __future__ import annotations

import argparse
import time

import numpy as np

from gpusched_env.config_util import CONF_DIR
from gpusched_env.paper import claim_from_ratios
from gpusched_env.pipeline import bench
from gpusched_env.pipeline.config import PipelineScenario
from gpusched_env.pipeline.execute import execute
from gpusched_env.pipeline.schedules import SCHEDULES
from gpusched_env.scenario_file import read_scenario_file

CONF = CONF_DIR / "scenario"


def load_named(name: str) -> PipelineScenario:
    """``conf/scenario/NAME.yaml`` as a pipeline scenario."""
    return bench.load(read_scenario_file(name, level="pipeline"), name)


def per_case(scn: PipelineScenario, seeds: list[int]) -> dict[str, dict[str, dict[str, float]]]:
    """metrics[workload][policy] = mean over seeds of each metric."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for w, wname in enumerate(scn.workload_names):
        for p in bench.POLICIES:
            runs = [bench.run(scn, p, s, w).metrics for s in seeds]
            out.setdefault(wname, {})[p] = {k: float(np.mean([r[k] for r in runs])) for k in runs[0]}
    return out


claim_value = claim_from_ratios  # PaperClaim's own arithmetic (gpusched_env.paper)


def paper_rows(scn: PipelineScenario, cases: dict[str, dict[str, dict[str, float]]]) -> list[str]:
    """PaperClaim over all cases (what gpusched-bench shows) and over the claim's own cases."""
    rows = ["| claim | paper | sim, all cases | sim, its cases | its cases |", "|---|---|---|---|---|"]
    for c in scn.paper:
        own = list(c.workloads) or list(cases)
        every, mine = _claim_over(c, cases, list(cases)), _claim_over(c, cases, own)
        rows.append(f"| {c.claim} | {c.value:.3f} | {every:.3f} | {mine:.3f} | {', '.join(own)} |")
    return rows


def _claim_over(c, cases: dict[str, dict[str, dict[str, float]]], workloads: list[str]) -> float:
    ratios = [cases[w][c.policy][c.metric] / cases[w][c.baseline][c.metric] for w in workloads]
    return claim_value(c.kind, c.aggregate, ratios)


def speedup_rows(cases: dict[str, dict[str, dict[str, float]]]) -> list[str]:
    base = [p for p in SCHEDULES if p != "adaptra"]
    rows = ["| case | " + " | ".join(f"adaptra vs {p}" for p in base) + " |", "|---" * (len(base) + 1) + "|"]
    for w, m in cases.items():
        key = "throughput_samples_s"
        rows.append(f"| {w} | " + " | ".join(f"{m['adaptra'][key] / m[p][key]:.2f}x" for p in base) + " |")
    return rows


def metric_rows(cases: dict[str, dict[str, dict[str, float]]]) -> list[str]:
    rows = ["| case | policy | iteration_time_ms | throughput_samples_s | bubble_fraction | peak_activations_microbatches |",
            "|---|---|---|---|---|---|"]
    for w, m in cases.items():
        for p, v in m.items():
            rows.append(f"| {w} | {p} | {v['iteration_time_ms']:.1f} | {v['throughput_samples_s']:.2f} | "
                        f"{v['bubble_fraction']:.3f} | {v['peak_activations_microbatches']:.0f} |")
    return rows


def healthy_rows(scn: PipelineScenario) -> list[str]:
    """The healthy iteration of the job (its links included) for ZB (fits overhead_ms) and 1F1B."""
    rows = ["| healthy iteration | measured | sim |", "|---|---|---|"]
    for p, measured in (("zb", "~755 ms (fits overhead_ms)"), ("1f1b", "~873 ms (check)")):
        sched = SCHEDULES[p]
        m = sched.model_for(scn.job.model())
        rows.append(f"| {p} | {measured} | {execute(m, sched.orders(m)).iteration_ms:.1f} ms |")
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("scenario", nargs="?", default="adaptra_14b")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    a = ap.parse_args(argv)
    scn = load_named(a.scenario)
    t0 = time.perf_counter()
    cases = per_case(scn, a.seeds)
    took = time.perf_counter() - t0
    print(f"## {scn.name}: seeds {a.seeds} ({took:.2f} s)\n")
    for block in (healthy_rows(scn), paper_rows(scn, cases), speedup_rows(cases), metric_rows(cases)):
        print("\n".join(block) + "\n")


if __name__ == "__main__":
    main()
