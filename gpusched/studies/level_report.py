"""Learned vs heuristic at the device and pipeline levels: one table per scenario from
``gpusched-bench`` results (a script, not a test).

    python -m gpusched.studies.level_report runs/bench/tally_pairs/seed0 runs/bench/tally_pairs/seed1 ...

Each folder holds a ``results.json`` with the policy ``agent`` (one training seed's model, the
folder's name labels it); the heuristics are read from whichever folder has them. Prints, per
training seed, the agent's figures beside the reference heuristic's, whether each goal is met and
by how much, then the median and spread (max - min) over the seeds; ``--cases`` adds the agent
vs the reference per workload (pair, taskset or case).
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Goal:
    """``agent <op> reference + slack`` on one metric (after ``show``), e.g. overhead <= Tally's + 5 points."""

    metric: str
    label: str
    show: Callable[[float], float]
    op: str  # "<=" or ">="
    slack: float = 0.0


def _pts(x: float) -> float:
    return (x - 1.0) * 100.0


def _same(x: float) -> float:
    return x


GOALS: dict[str, tuple[str, list[Goal], list[str]]] = {
    # scenario: (reference policy, goals, other heuristics shown)
    "tally_pairs": ("tally", [Goal("hp_p99_ratio", "HP p99 overhead (points)", _pts, "<=", 5.0),
                              Goal("be_norm_throughput", "BE throughput (norm.)", _same, ">=")],
                    ["tgs", "mps_priority"]),
    "daris_rt": ("daris", [Goal("throughput_jobs_s", "throughput (jobs/s)", _same, ">="),
                           Goal("hp_deadline_miss_rate", "HP miss rate", _same, "<=")], ["batching", "gslice", "mps"]),
    "adaptra_14b": ("adaptra", [Goal("iteration_time_ms", "iteration time (ms)", _same, "<=")], ["zb_cpu", "zb", "1f1b"]),
}


def _load(folder: Path) -> dict[str, Any]:
    path = folder / "results.json"
    if not path.is_file():
        raise SystemExit(f"level_report: {path} not found (run gpusched-bench ... out_dir={folder})")
    return json.loads(path.read_text())


def _val(doc: dict[str, Any], policy: str, metric: str, workload: str | None = None) -> float:
    entry = doc["policies"][policy]
    if workload is None:
        return float(entry["metrics"][metric])
    return float(next(w["metrics"][metric] for w in entry["per_workload"] if w["workload"] == workload))


def _verdict(g: Goal, agent: float, ref: float) -> str:
    bound = ref + g.slack if g.op == "<=" else ref - g.slack
    ok = agent <= bound + 1e-12 if g.op == "<=" else agent >= bound - 1e-12
    return f"{'met' if ok else 'missed'} ({agent - bound:+.3g})"


def report(folders: list[Path], cases: bool = False, heuristics: Path | None = None) -> str:
    """The tables; ``heuristics``: a folder read for the heuristics only (its ``agent`` is not shown)."""
    names = [f.name for f in folders]
    labels = [f.name if names.count(f.name) == 1 else f"{f.parent.name}/{f.name}" for f in folders]
    docs = {label: _load(f) for label, f in zip(labels, folders, strict=True)}
    scenario = next(iter(docs.values()))["scenario"]
    if scenario not in GOALS:
        raise SystemExit(f"level_report: no goals for scenario {scenario!r}; known: {sorted(GOALS)}")
    ref, goals, others = GOALS[scenario]
    heur = _load(heuristics) if heuristics else next((d for d in docs.values() if ref in d["policies"]), None)
    if heur is None:
        raise SystemExit(f"level_report: no folder has the reference policy {ref!r}")
    lines = [f"### {scenario}: agent vs {ref} (bench seeds {heur['seeds']})", ""]
    head = ["model"] + [f"{g.label}" for g in goals] + [f"goal: {g.label} {g.op} {ref}'s" + (f" + {g.slack:g}" if g.slack else "")
                                                          for g in goals]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for p in [ref, *[o for o in others if o in heur["policies"]]]:
        vals = [f"{g.show(_val(heur, p, g.metric)):.3f}" for g in goals]
        lines.append("| " + " | ".join([f"{p} (heuristic)", *vals, *["" for _ in goals]]) + " |")
    per_goal: list[list[float]] = [[] for _ in goals]
    for name, doc in docs.items():
        if "agent" not in doc["policies"]:
            continue
        vals, verdicts = [], []
        for k, g in enumerate(goals):
            a, r = g.show(_val(doc, "agent", g.metric)), g.show(_val(heur, ref, g.metric))
            per_goal[k].append(a)
            vals.append(f"{a:.3f}")
            verdicts.append(_verdict(g, a, r))
        lines.append("| " + " | ".join([f"agent {name}", *vals, *verdicts]) + " |")
    if per_goal[0]:
        med = [statistics.median(v) for v in per_goal]
        spread = [f"{statistics.median(v):.3f} (spread {max(v) - min(v):.3f})" for v in per_goal]
        verdicts = [_verdict(g, m, g.show(_val(heur, ref, g.metric))) for g, m in zip(goals, med, strict=True)]
        lines.append("| " + " | ".join(["agent median", *spread, *verdicts]) + " |")
    if cases:
        names = [w["workload"] for w in heur["policies"][ref].get("per_workload", [])]
        agents = [n for n, d in docs.items() if "agent" in d["policies"]]
        lines += ["", f"per workload (mean over bench seeds): {ref} / agent per model", "",
                  "| workload | " + " | ".join(f"{g.label}: {ref} / " + " / ".join(agents) for g in goals) + " |",
                  "|" + "---|" * (1 + len(goals))]
        for w in names:
            cells = [" / ".join([f"{g.show(_val(heur, ref, g.metric, w)):.3f}",
                                 *(f"{g.show(_val(docs[a], 'agent', g.metric, w)):.3f}" for a in agents)])
                     for g in goals]
            lines.append("| " + " | ".join([w, *cells]) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folders", nargs="+", type=Path, help="gpusched-bench out_dir folders, one per trained model")
    ap.add_argument("--cases", action="store_true", help="also the goals' metrics per workload")
    ap.add_argument("--heuristics", type=Path, default=None,
                    help="a folder to read the heuristics from (default: the first folder that has them)")
    args = ap.parse_args()
    print(report(args.folders, args.cases, args.heuristics))


if __name__ == "__main__":
    main()
