"""Which heuristic could a cluster agent learn from? Candidates against the goal's two bounds, on a mix.

Issue 32's goal for a non-clairvoyant agent is an average JCT under LAS's and a p99 JCT within
Tiresias's on every variant. A clone can at best match its teacher, so a teacher should itself be within
both bounds. This tool runs candidate heuristics and the two bound heuristics on a training mix's
variants (``conf/mix/NAME.yaml``; ``--held-out``: its held-out variants instead) over the given run
seeds, and prints, per variant, each candidate's average against the first bound's and its p99 against
the second's (a ``*`` where both hold; means over the seeds, as ``gpusched-bench`` aggregates):

    python -m gpusched.studies.teachers --mix synthetic_philly_dr --seeds 100000,100001,100002,100003 \\
        --candidates mlfq_aged 'mlfq_aged:aging=0.03' 'mlfq_aged:threshold_gpu_s=1e18'

A candidate is a registered policy, optionally with parameters (``NAME:KEY=VALUE,...``, numbers). The
variants are composed exactly as ``gpusched-train mix=NAME`` composes them (the scenario as
``gpusched-bench`` composes it, the mix's dotted overrides on top); every run is workload 0 of its
variant at one run seed, as the bench's seed. Choose a teacher on the training variants; read the
held-out ones only after.
"""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from gpusched.studies.seeds_report import pct_change
from gpusched_env.atomic import write_json_atomic
from gpusched_env.config_util import CONF_DIR, ConfigError


@dataclass(frozen=True)
class Candidate:
    """A heuristic by registry name with parameter overrides; ``label`` as written on the command line."""

    label: str
    name: str
    params: tuple[tuple[str, float], ...]


def parse_candidate(text: str) -> Candidate:
    """``NAME`` or ``NAME:KEY=VALUE,...`` (numbers); a ConfigError naming the bad part."""
    from gpusched.baselines import POLICY_NAMES, policy_params

    name, _, rest = text.partition(":")
    if name not in POLICY_NAMES or name == "agent":
        raise ConfigError(f"--candidates {text!r}: {name!r} is not a heuristic ({', '.join(POLICY_NAMES)})")
    params = []
    for part in filter(None, rest.split(",")):
        key, eq, value = part.partition("=")
        if not eq or key not in policy_params(name):
            raise ConfigError(f"--candidates {text!r}: {part!r} is not KEY=VALUE with KEY a parameter of {name} "
                              f"({', '.join(policy_params(name))})")
        try:
            params.append((key, float(value)))
        except ValueError:
            raise ConfigError(f"--candidates {text!r}: {key}={value!r} is not a number") from None
    return Candidate(text, name, tuple(params))


def mix_scenarios(scenario: str, mix: str, held_out: bool) -> list[tuple[str, Any]]:
    """(name, Scenario) of the mix's training variants (or held-out ones) over ``scenario``."""
    from gpusched.agents.scenario_mix import parse_mix
    from gpusched.bench.cli import scenario_from_cfg
    from gpusched.studies.robustness import Variant, compose
    from gpusched_env.scenario import load_scenario

    path = CONF_DIR / "mix" / f"{mix}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in path.parent.glob("*.yaml"))
        raise ConfigError(f"--mix {mix!r}: no file {path} (known: {', '.join(known)})")
    cfg = compose(Variant("teachers", (f"scenario={scenario}",)), [])
    base = dict(yaml.safe_load(yaml.safe_dump(_plain(cfg.scenario))))
    base.pop("level", None)
    train, held = parse_mix(base, yaml.safe_load(path.read_text()))
    chosen = held if held_out else train
    if not chosen:
        raise ConfigError(f"{path}: no {'held_out' if held_out else 'variants'} entries")
    scenario_from_cfg(cfg)  # the scenario itself loads (a clear error if not)
    return [(v.name, load_scenario(v.raw)) for v in chosen]


def _plain(node: Any) -> Any:
    from omegaconf import OmegaConf

    return OmegaConf.to_container(node, resolve=True)


def _run(args: tuple[Any, str, tuple[tuple[str, float], ...], int]) -> tuple[float, float, bool]:
    """(average JCT, p99 JCT, every job finished) of one heuristic run."""
    from gpusched.agents.policies import make_policy
    from gpusched_env.cluster.build import simulate
    from gpusched_env.metrics import compute_metrics

    scn, name, params, seed = args
    over: dict[str, Any] = dict(params)
    _, result = simulate(scn, make_policy(name, scn, seed, **over), seed, 0)
    m = compute_metrics(result)
    return m["avg_jct_s"], m["p99_jct_s"], m["jobs_finished"] == len(result.tracked)


def study(variants: list[tuple[str, Any]], candidates: list[Candidate], bounds: tuple[str, str],
          seeds: list[int], workers: int) -> dict[str, dict[str, list[tuple[float, float, bool]]]]:
    """Per variant and label (the bounds' names and the candidates' labels): the runs over ``seeds``."""
    runs = [Candidate(b, b, ()) for b in dict.fromkeys(bounds)] + candidates
    jobs = [(v, c, s) for v in variants for c in runs for s in seeds]
    args = [(scn, c.name, c.params, s) for (_, scn), c, s in jobs]
    out: dict[str, dict[str, list[tuple[float, float, bool]]]] = {}
    with ProcessPoolExecutor(max(1, workers)) as pool:
        for i, (((vname, _), c, _), res) in enumerate(zip(jobs, pool.map(_run, args), strict=True), 1):
            out.setdefault(vname, {}).setdefault(c.label, []).append(res)
            if sys.stderr.isatty():
                print(f"\r{i}/{len(jobs)} runs", end="", file=sys.stderr, flush=True)
    if sys.stderr.isatty():
        print(file=sys.stderr)
    return out


def table(runs: dict[str, dict[str, list[tuple[float, float, bool]]]], labels: list[str], bounds: tuple[str, str]) -> str:
    """Each label's average against ``bounds[0]``'s and p99 against ``bounds[1]``'s, per variant, and
    per label the count of variants within both (every job finished)."""
    avg_of, p99_of = bounds
    width = max(24, *(len(v) for v in runs)) + 1
    col = {lab: max(22, len(lab) + 2) for lab in labels}
    lines = [f"{'variant':{width}s}" + "".join(f"{lab:>{col[lab]}s}" for lab in labels) + f"   {avg_of} p99 vs {p99_of}"]
    within = dict.fromkeys(labels, 0)
    for vname, d in runs.items():
        ref_avg = float(np.mean([r[0] for r in d[avg_of]]))
        ref_p99 = float(np.mean([r[1] for r in d[p99_of]]))
        cells = []
        for lab in labels:
            avg = float(np.mean([r[0] for r in d[lab]]))
            p99 = float(np.mean([r[1] for r in d[lab]]))
            ok = avg < ref_avg and p99 <= ref_p99 and all(r[2] for r in d[lab])
            within[lab] += ok
            cells.append(f"{pct_change(avg, ref_avg):+7.1f}%/{pct_change(p99, ref_p99):+7.1f}%{'*' if ok else ' '}")
        own_p99 = pct_change(float(np.mean([r[1] for r in d[avg_of]])), ref_p99)
        lines.append(f"{vname:{width}s}" + "".join(f"{c:>{col[lab]}s}" for c, lab in zip(cells, labels, strict=True))
                     + f"   {own_p99:+.1f}%")
    lines.append(f"{'within both':{width}s}" + "".join(f"{f'{within[lab]} of {len(runs)}':>{col[lab]}s}" for lab in labels))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m gpusched.studies.teachers", description=__doc__.splitlines()[0],
                                 epilog="cells: average JCT vs the first bound's / p99 JCT vs the second's; "
                                        "* = both held and every job finished")
    ap.add_argument("--scenario", default="synthetic_philly", help="the training scenario (default synthetic_philly)")
    ap.add_argument("--mix", required=True, help="conf/mix/NAME.yaml: its training variants are run")
    ap.add_argument("--held-out", action="store_true", help="run the mix's held-out variants instead")
    ap.add_argument("--seeds", required=True, help="run seeds, comma-separated (e.g. the validation seeds 100000,...)")
    ap.add_argument("--candidates", nargs="+", required=True, help="NAME or NAME:KEY=VALUE,... (registered heuristics)")
    ap.add_argument("--goal", default="las,tiresias", help="AVG_BOUND,P99_BOUND heuristics (default las,tiresias)")
    ap.add_argument("--workers", type=int, default=1, help="processes (default 1)")
    ap.add_argument("--out", type=Path, help="also write every run's (avg, p99, all finished) here (JSON, atomically)")
    a = ap.parse_args(argv)
    try:
        seeds = [int(s) for s in a.seeds.split(",")]
        if any(s < 0 for s in seeds):
            raise ValueError
    except ValueError:
        raise SystemExit(f"error: --seeds: expected non-negative integers separated by commas, got {a.seeds!r}") from None
    goal = tuple(a.goal.split(","))
    try:
        if len(goal) != 2:
            raise ConfigError(f"--goal: expected AVG_BOUND,P99_BOUND, got {a.goal!r}")
        for g in goal:
            parse_candidate(g)
        candidates = [parse_candidate(c) for c in a.candidates]
        variants = mix_scenarios(a.scenario, a.mix, a.held_out)
    except ConfigError as e:
        raise SystemExit(f"error: {e}") from None
    bounds = (goal[0], goal[1])
    runs = study(variants, candidates, bounds, seeds, a.workers)
    if a.out is not None:
        write_json_atomic(a.out, {"scenario": a.scenario, "mix": a.mix, "held_out": a.held_out, "seeds": seeds,
                                  "goal": list(bounds), "runs": runs})
    print(table(runs, [bounds[1], *[c.label for c in candidates]], bounds))


if __name__ == "__main__":
    main()
