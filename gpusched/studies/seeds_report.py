"""Training seeds side by side: one ``gpusched-bench`` results.json per trained agent (``policies=[agent]``)
against one results.json of the heuristics on the same scenario, workloads and evaluation seeds.

    python -m gpusched.studies.seeds_report runs/nc_s*/eval_pal/results.json --baseline runs/base_pal/results.json

Prints, per training seed, the agent's average / p99 JCT, makespan and finished jobs, the change of
its average JCT against ``--vs`` (default LAS), of its p99 against ``--p99-vs`` (default Tiresias) and
of its average against ``--clairvoyant-vs`` (default SRTF); then the median and the spread (min..max)
over seeds, and whether the goal of issue 16 holds for the medians and for each seed: average
below ``--vs``, p99 no worse than ``--p99-vs``, every tracked job finished (as many as the baseline),
and, for a clairvoyant agent instead, average within ``--within`` (5 %) of ``--clairvoyant-vs`` and
every job finished.

``--goal energy`` (issue 16 item 4) prints instead, per training seed, the agent's energy, average
runtime (``avg_run_s``), average JCT, deadline-miss rate and finished jobs, with the energy change
against ``--energy-vs`` (default EaCO) and against ``--runtime-base`` (default FIFO), and the runtime
change against ``--runtime-base``; the goal: less energy than ``--energy-vs`` at no more runtime
increase over ``--runtime-base`` than ``--energy-vs``'s, every job finished.

    python -m gpusched.studies.seeds_report runs/en_s*/eval/results.json --baseline runs/heur_eaco/results.json --goal energy
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from gpusched_env.config_util import ConfigError


def load_results(path: str | Path) -> dict[str, Any]:
    """A ``gpusched-bench`` results.json; a ConfigError naming the file when it is not one."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ConfigError(f"{p}: not a readable results.json ({e})") from None
    if not isinstance(doc, dict) or "policies" not in doc:
        raise ConfigError(f"{p}: no 'policies' (not a gpusched-bench results.json)")
    return doc


def _load(path: str) -> dict[str, Any]:
    try:
        return load_results(path)
    except ConfigError as e:
        raise SystemExit(f"seeds_report: {e}") from None


def _metric(doc: dict[str, Any], policy: str, key: str, path: str) -> float:
    try:
        return float(doc["policies"][policy]["metrics"][key])
    except KeyError:
        raise SystemExit(f"seeds_report: {path}: no metric {key!r} for policy {policy!r}") from None


def short_num(x: float) -> str:
    """3 significant digits with a k / M suffix, as the bench's tables."""
    for div, suf in ((1e6, "M"), (1e3, "k")):
        if abs(x) >= div:
            return f"{x / div:.3g}{suf}"
    return f"{x:.3g}"


def pct_change(x: float, ref: float) -> float:
    return 100.0 * (x / ref - 1.0)


def report(agent_files: list[str], baseline: str, vs: str, p99_vs: str, clair_vs: str, within: float) -> str:
    base = _load(baseline)
    ref_avg = _metric(base, vs, "avg_jct_s", baseline)
    ref_p99 = _metric(base, p99_vs, "p99_jct_s", baseline)
    ref_clair = _metric(base, clair_vs, "avg_jct_s", baseline)
    ref_jobs = _metric(base, vs, "jobs_finished", baseline)
    rows: list[dict[str, Any]] = []
    for f, doc in _agent_docs(agent_files, base):
        a = doc.get("agent", {})
        rows.append({
            "file": f, "seed": a.get("seed"), "clairvoyant": a.get("clairvoyant"),
            "avg": _metric(doc, "agent", "avg_jct_s", f), "p99": _metric(doc, "agent", "p99_jct_s", f),
            "makespan": _metric(doc, "agent", "makespan_s", f), "jobs": _metric(doc, "agent", "jobs_finished", f),
            "steps": a.get("num_timesteps"),
        })
    clair = {r["clairvoyant"] for r in rows}
    lines = [f"scenario {base.get('scenario')}, evaluation seeds {base.get('seeds')}; agents: "
             f"clairvoyant={'/'.join(str(c) for c in sorted(clair, key=str))}; reference: avg {vs} "
             f"{short_num(ref_avg)} s, p99 {p99_vs} {short_num(ref_p99)} s, avg {clair_vs} {short_num(ref_clair)} s"]
    head = (f"{'train seed':>10} {'avg_jct_s':>10} {'vs ' + vs:>9} {'vs ' + clair_vs:>9} {'p99_jct_s':>10} "
            f"{'vs ' + p99_vs:>12} {'makespan_s':>11} {'finished':>9} {'RL steps':>9}")
    lines.append(head)

    def line(label: str, avg: float, p99: float, mk: float, jobs: float, steps: object = "") -> str:
        return (f"{label:>10} {short_num(avg):>10} {pct_change(avg, ref_avg):>+8.1f}% {pct_change(avg, ref_clair):>+8.1f}% {short_num(p99):>10} "
                f"{pct_change(p99, ref_p99):>+11.1f}% {short_num(mk):>11} {jobs:>9.4g} {'' if steps is None else steps!s:>9}")

    for r in rows:
        lines.append(line(str(r["seed"]), r["avg"], r["p99"], r["makespan"], r["jobs"], r["steps"]))
    med = {k: statistics.median(r[k] for r in rows) for k in ("avg", "p99", "makespan", "jobs")}
    lines.append(line("median", med["avg"], med["p99"], med["makespan"], med["jobs"]))
    lo = {k: min(r[k] for r in rows) for k in ("avg", "p99")}
    hi = {k: max(r[k] for r in rows) for k in ("avg", "p99")}
    lines.append(f"spread (min..max over {len(rows)} seeds): avg_jct_s {short_num(lo['avg'])}..{short_num(hi['avg'])} "
                 f"({pct_change(lo['avg'], ref_avg):+.1f}%..{pct_change(hi['avg'], ref_avg):+.1f}% vs {vs}), p99_jct_s "
                 f"{short_num(lo['p99'])}..{short_num(hi['p99'])} ({pct_change(lo['p99'], ref_p99):+.1f}%..{pct_change(hi['p99'], ref_p99):+.1f}% "
                 f"vs {p99_vs})")

    def verdict(r: dict[str, float], clairvoyant: bool) -> list[str]:
        done = f"all finished: {'yes' if r['jobs'] >= ref_jobs else 'no'}"
        if clairvoyant:  # the clairvoyant goal: within `within` of the clairvoyant reference
            return [f"avg within {within:.0%} of {clair_vs}: "
                    f"{'yes' if r['avg'] <= ref_clair * (1 + within) else 'no'} ({pct_change(r['avg'], ref_clair):+.1f}%)", done]
        return [f"avg < {vs}: {'yes' if r['avg'] < ref_avg else 'no'} ({pct_change(r['avg'], ref_avg):+.1f}%)",
                f"p99 <= {p99_vs}: {'yes' if r['p99'] <= ref_p99 else 'no'} ({pct_change(r['p99'], ref_p99):+.1f}%)", done]

    is_clair = clair == {True}
    lines.append("goal, medians: " + "; ".join(verdict(med, is_clair)))
    every = [all(v.split(": ")[1].startswith("yes") for v in verdict(r, is_clair)) for r in rows]
    lines.append(f"goal met by {sum(every)} of {len(rows)} seeds")
    return "\n".join(lines)


def _agent_docs(agent_files: list[str], base: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for f in agent_files:
        doc = _load(f)
        if doc.get("scenario") != base.get("scenario") or doc.get("seeds") != base.get("seeds"):
            raise SystemExit(f"seeds_report: {f}: scenario/seeds {doc.get('scenario')}/{doc.get('seeds')} differ "
                             f"from the baseline's {base.get('scenario')}/{base.get('seeds')}")
        out.append((f, doc))
    return out


def energy_report(agent_files: list[str], baseline: str, vs: str = "eaco", runtime_base: str = "fifo") -> str:
    """The energy goal's table (module docstring, ``--goal energy``)."""
    base = _load(baseline)
    ref_e = _metric(base, vs, "energy_kwh", baseline)
    base_e = _metric(base, runtime_base, "energy_kwh", baseline)
    base_run = _metric(base, runtime_base, "avg_run_s", baseline)
    ref_run = _metric(base, vs, "avg_run_s", baseline)
    ref_jct = _metric(base, vs, "avg_jct_s", baseline)
    ref_miss = base["policies"][vs]["metrics"].get("deadline_miss_rate")
    ref_jobs = _metric(base, vs, "jobs_finished", baseline)
    bound = pct_change(ref_run, base_run)
    keys = ("energy", "run", "jct", "miss", "jobs")
    rows: list[dict[str, Any]] = []
    for f, doc in _agent_docs(agent_files, base):
        a = doc.get("agent", {})
        miss = doc["policies"].get("agent", {}).get("metrics", {}).get("deadline_miss_rate", float("nan"))
        rows.append({"seed": a.get("seed"), "steps": a.get("num_timesteps"),
                     "energy": _metric(doc, "agent", "energy_kwh", f), "run": _metric(doc, "agent", "avg_run_s", f),
                     "jct": _metric(doc, "agent", "avg_jct_s", f), "miss": float(miss),
                     "jobs": _metric(doc, "agent", "jobs_finished", f)})
    miss_txt = "n/a" if ref_miss is None else f"{float(ref_miss):.3f}"
    lines = [f"scenario {base.get('scenario')}, evaluation seeds {base.get('seeds')}; reference: {vs} "
             f"{short_num(ref_e)} kWh ({pct_change(ref_e, base_e):+.1f}% vs {runtime_base}), avg_run_s {short_num(ref_run)} "
             f"({bound:+.1f}% vs {runtime_base}), avg_jct_s {short_num(ref_jct)}, deadline misses {miss_txt}"]
    lines.append(f"{'train seed':>10} {'energy_kwh':>10} {'vs ' + vs:>9} {'vs ' + runtime_base:>9} {'avg_run_s':>10} "
                 f"{'run vs ' + runtime_base:>12} {'avg_jct_s':>10} {'misses':>7} {'finished':>9} {'RL steps':>9}")

    def line(label: str, r: dict[str, Any]) -> str:
        steps = r.get("steps")
        return (f"{label:>10} {short_num(r['energy']):>10} {pct_change(r['energy'], ref_e):>+8.1f}% {pct_change(r['energy'], base_e):>+8.1f}% "
                f"{short_num(r['run']):>10} {pct_change(r['run'], base_run):>+11.1f}% {short_num(r['jct']):>10} {r['miss']:>7.3f} "
                f"{r['jobs']:>9.4g} {'' if steps is None else steps!s:>9}")

    for r in rows:
        lines.append(line(str(r["seed"]), r))
    med = {k: statistics.median(r[k] for r in rows) for k in keys}
    lines.append(line("median", med))
    lo = {k: min(r[k] for r in rows) for k in keys}
    hi = {k: max(r[k] for r in rows) for k in keys}
    lines.append(f"spread (min..max over {len(rows)} seeds): energy_kwh {short_num(lo['energy'])}..{short_num(hi['energy'])} "
                 f"({pct_change(lo['energy'], ref_e):+.1f}%..{pct_change(hi['energy'], ref_e):+.1f}% vs {vs}), avg_run_s "
                 f"{short_num(lo['run'])}..{short_num(hi['run'])} ({pct_change(lo['run'], base_run):+.1f}%..{pct_change(hi['run'], base_run):+.1f}% "
                 f"vs {runtime_base}), avg_jct_s {short_num(lo['jct'])}..{short_num(hi['jct'])}")

    def verdict(r: dict[str, Any]) -> list[str]:
        run = pct_change(r["run"], base_run)
        return [f"energy < {vs}: {'yes' if r['energy'] < ref_e else 'no'} ({pct_change(r['energy'], ref_e):+.1f}%)",
                f"runtime increase <= {vs}'s: {'yes' if r['run'] <= ref_run else 'no'} ({run:+.1f}% vs {bound:+.1f}%)",
                f"all finished: {'yes' if r['jobs'] >= ref_jobs else 'no'}"]

    lines.append("goal, medians: " + "; ".join(verdict(med)))
    every = [all(v.split(": ")[1].startswith("yes") for v in verdict(r)) for r in rows]
    lines.append(f"goal met by {sum(every)} of {len(rows)} seeds")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m gpusched.studies.seeds_report", description=__doc__.split("\n\n")[0])
    ap.add_argument("agents", nargs="+", help="results.json of gpusched-bench policies=[agent], one per training seed")
    ap.add_argument("--baseline", required=True, help="results.json of the heuristics (same scenario and seeds)")
    ap.add_argument("--vs", default="las", help="average-JCT reference (default las)")
    ap.add_argument("--p99-vs", default="tiresias", help="p99-JCT reference (default tiresias)")
    ap.add_argument("--clairvoyant-vs", default="srtf", help="clairvoyant reference (default srtf)")
    ap.add_argument("--within", type=float, default=0.05, help="clairvoyant tolerance (default 0.05)")
    ap.add_argument("--goal", choices=("jct", "energy"), default="jct",
                    help="jct (default): the JCT goal above; energy: energy vs --energy-vs at bounded runtime")
    ap.add_argument("--energy-vs", default="eaco", help="energy reference of --goal energy (default eaco)")
    ap.add_argument("--runtime-base", default="fifo",
                    help="--goal energy: runtime and energy changes are taken against it (default fifo)")
    a = ap.parse_args(argv)
    if a.goal == "energy":
        print(energy_report(a.agents, a.baseline, a.energy_vs, a.runtime_base))
        return
    print(report(a.agents, a.baseline, a.vs, a.p99_vs, a.clairvoyant_vs, a.within))


if __name__ == "__main__":
    main(sys.argv[1:])
