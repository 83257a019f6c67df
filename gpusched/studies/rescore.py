"""Score a training run's candidates on more validation episodes, and select across validation sets.

Checkpoint selection (:mod:`gpusched.agents.selection`) scores each candidate on a few episodes of the
training workloads. A candidate can pass those and still fail held out (a heavier load, wider jobs).
This tool plays every candidate of a run (each kept policy, ``checkpoint_freq`` equal to
``select.freq``) and the reference heuristics of the run's rule (``select.*_bound`` with its
``select.slack``) on another set of validation episodes — the training workloads under scenario
overrides, other run seeds — and writes ``RUN_DIR/selection_NAME.json`` (``selection.json``'s
format); ``python -m gpusched.agents.selection RUN_DIR --also NAME`` then selects across both sets:

    python -m gpusched.studies.rescore runs/x --name contended --override scenario.cluster.nodes.0.gpus_per_node=3
    python -m gpusched.agents.selection runs/x --objective worst_ratio --also contended --out runs/x/model_both.zip

Episodes are played as ``gpusched-bench`` plays the policy ``agent`` (the same figures), one
(workload, run seed) at a time, each to its end (no ``select.max_steps`` cut): with no override
and the run's own episodes the scores equal ``selection.json``'s wherever no episode was cut there;
``--only NAME`` selects on the new set alone. The workloads default to the run's validation workloads.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gpusched.agents.selection import (
    BOUND_KEYS,
    Rule,
    Score,
    heuristic_results,
    load_history,
    score_runs,
    write_candidate,
    write_history,
)
from gpusched_env.config_util import ConfigError, int_list


@dataclass(frozen=True)
class RunSetup:
    """What a training run's ``config.yaml`` says about its selection."""

    scenario: str
    workloads: list[int] | None  # None: every workload of the scenario (as the trainer reads null)
    run_seeds: list[int]
    bounds: dict[str, str]  # metric -> the heuristic bounding it
    slack: float
    objective: str


def read_setup(run_dir: Path) -> RunSetup:
    """The selection settings of ``run_dir/config.yaml``; a ConfigError naming the file otherwise."""
    path = run_dir / "config.yaml"
    try:
        cfg = yaml.safe_load(path.read_text())
        sel, env = cfg["select"], cfg.get("env") or {}
        workloads = sel.get("workloads") or env.get("workloads")
        return RunSetup(
            scenario=str(cfg["scenario"]["name"]),
            workloads=None if workloads is None else [int(w) for w in workloads],
            run_seeds=[int(s) for s in sel["run_seeds"]],
            bounds={m: str(sel[k]) for k, m in BOUND_KEYS.items() if sel.get(k)},
            slack=float(sel.get("slack") or 0.0),
            objective=str(sel["objective"]),
        )
    except OSError as e:
        raise ConfigError(f"{path}: cannot read it ({e.strerror}); gpusched-train writes it") from None
    except (yaml.YAMLError, KeyError, TypeError, ValueError) as e:
        raise ConfigError(f"{path}: not a training config with select.* ({type(e).__name__}: {e})") from None


def scenario_with(name: str, overrides: list[str]) -> Any:
    """Scenario ``name`` with Hydra-style overrides (``scenario.KEY=VALUE``), composed as gpusched-bench does."""
    from gpusched.bench.cli import scenario_from_cfg
    from gpusched.studies.robustness import Variant, compose

    return scenario_from_cfg(compose(Variant("rescore", (f"scenario={name}", *overrides)), []))


def play_candidate(policy_file: Path, scn: Any, episodes: list[tuple[int, int]]) -> list[Any]:
    """A saved policy on each (workload, run seed), as gpusched-bench runs the policy ``agent``."""
    from gpusched.agents.policies import make_policy
    from gpusched_env.cluster.build import simulate

    return [simulate(scn, make_policy("agent", scn, s, str(policy_file), workload=w), s, w)[1] for w, s in episodes]


def rescore(run_dir: Path, name: str, overrides: list[str], run_seeds: list[int] | None = None,
            workloads: list[int] | None = None, progress: Any = None) -> Path:
    """Score every candidate of ``run_dir`` and the rule's heuristics on the new episodes; write
    ``run_dir/selection_NAME.json`` and return its path."""
    setup = read_setup(run_dir)
    _, scores = load_history(run_dir)
    scn = scenario_with(setup.scenario, overrides)
    workloads = workloads or setup.workloads or list(range(len(scn.workload_names)))
    episodes = [(w, s) for s in (run_seeds or setup.run_seeds) for w in workloads]
    refs = {h: score_runs(0, heuristic_results(scn, h, episodes)) for h in sorted(set(setup.bounds.values()))}
    rule = Rule({m: (1.0 + setup.slack) * float(getattr(refs[h], m)) for m, h in setup.bounds.items()},
                setup.objective)
    new: list[Score] = []
    with tempfile.TemporaryDirectory() as tmp:
        for old in scores:
            f = Path(tmp) / f"candidate_{old.steps}.zip"
            write_candidate(run_dir, old, f)
            t0 = time.perf_counter()
            results = play_candidate(f, scn, episodes)
            new.append(score_runs(old.steps, results, time.perf_counter() - t0))
            if progress:
                progress(old.steps)
    out = run_dir / f"selection_{name}.json"
    write_history(out, new, rule.best(new), rule, refs, episodes)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m gpusched.studies.rescore", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="Then: python -m gpusched.agents.selection RUN_DIR --objective OBJ --also NAME")
    ap.add_argument("run_dirs", type=Path, nargs="+", help="gpusched-train folders (select.enabled=true, "
                                                           "checkpoint_freq equal to select.freq)")
    ap.add_argument("--name", required=True, help="the validation set's name: writes RUN_DIR/selection_NAME.json")
    ap.add_argument("--override", action="append", default=[],
                    help="a scenario override, Hydra syntax (repeatable), e.g. scenario.workload.background_rate_per_hour=3")
    ap.add_argument("--run-seeds", help="run seeds, comma-separated (default: the run's select.run_seeds)")
    ap.add_argument("--workloads", help="workload indices, comma-separated (default: the run's validation workloads)")
    a = ap.parse_args(argv)
    try:
        if not a.name.replace("_", "").replace("-", "").isalnum():
            raise ConfigError(f"--name: letters, digits, '_' or '-' only, got {a.name!r}")
        seeds = int_list(a.run_seeds, "--run-seeds") if a.run_seeds else None
        workloads = int_list(a.workloads, "--workloads") if a.workloads else None
        for run_dir in a.run_dirs:
            t0 = time.perf_counter()
            out = rescore(run_dir, a.name, list(a.override), seeds, workloads,
                          progress=lambda steps, d=run_dir: print(f"  {d}: candidate at {steps} steps scored", flush=True))
            print(f"wrote {out} ({time.perf_counter() - t0:.0f} s)", flush=True)
    except (ConfigError, ValueError) as e:
        print(f"rescore: error: {' '.join(str(e).split())}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
