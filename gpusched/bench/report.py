"""Outputs of a benchmark: the printed tables, results.json / results.csv (written atomically) and
PNG plots (JCT CDF per policy; busy GPUs and cluster power over time)."""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from gpusched_env.atomic import atomic_path
from gpusched_env.atomic import write_atomic as write_atomic  # re-exported: the apps' writers
from gpusched_env.atomic import write_json_atomic as write_json_atomic
from gpusched_env.config_util import ConfigError
from gpusched_env.metrics import results_document as results_document  # re-exported
from gpusched_env.paper import mark_subsets as mark_subsets  # re-exported

TABLE_METRICS = ["avg_jct_s", "p99_jct_s", "avg_queue_s", "makespan_s", "utilization", "energy_kwh",
                 "preemptions", "jobs_finished"]


def known_metrics() -> list[str]:
    """Every metric a cluster run can report (the columns ``table_metrics`` may name)."""
    from gpusched_env.metrics import RunResult, compute_metrics

    return sorted({*compute_metrics(RunResult([], 1, 0.0, 0.0, 0.0)), "avg_run_s", "deadline_miss_rate"})


def results_csv(doc: dict[str, Any]) -> str:
    """One row per (policy, seed) and per (policy, workload), plus the mean row."""
    buf = io.StringIO()
    metrics = list(dict.fromkeys(k for p in doc["policies"].values() for k in p["metrics"]))
    w = csv.writer(buf)
    w.writerow(["policy", "seed", "workload", *metrics])
    for name, p in doc["policies"].items():
        w.writerow([name, "mean", "all", *(_fmt(p["metrics"].get(k)) for k in metrics)])
        for s in p.get("per_seed", []):
            w.writerow([name, s["seed"], "all", *(_fmt(s["metrics"].get(k)) for k in metrics)])
        for wl in p.get("per_workload", []):
            w.writerow([name, "mean", wl["workload"], *(_fmt(wl["metrics"].get(k)) for k in metrics)])
    return buf.getvalue()


def _fmt(v: float | None) -> str:
    return "" if v is None else repr(float(v))


def compact(v: float | None) -> str:
    """Compact number: 4.44M, 134k, 37.5, 0.224."""
    if v is None or not math.isfinite(v):
        return "-"
    a = abs(v)
    if a >= 1e6:
        return f"{v / 1e6:.3g}M"
    if a >= 1e4:
        return f"{v / 1e3:.3g}k"
    if a >= 100:
        return f"{v:.0f}"
    if a >= 1:
        return f"{v:.2f}"
    return f"{v:.3f}"


COUNT_METRICS = ("restarts", "preemptions", "migrations")
"""Counts per run: with several runs per policy the table says the value is a mean per run."""


def is_fraction(metric: str) -> bool:
    """Rates and fractions in [0, 1] (miss rates, acceptance, utilisation, bubble fractions): their
    change vs the first policy is shown in percentage points, as a relative change of a near-zero
    rate (+45017 %) says nothing."""
    return metric.endswith("_rate") or "fraction" in metric or metric == "utilization"


def change_text(metric: str, mean: float, base: float) -> str:
    """`` (+x.x%)`` vs the first policy, `` (+x.x pp)`` for a rate or fraction, or ``""``."""
    if not (math.isfinite(base) and math.isfinite(mean)):
        return ""
    if is_fraction(metric):
        return f" ({(mean - base) * 100:+.1f} pp)"
    return f" ({(mean / base - 1) * 100:+.1f}%)" if base else ""


def column_label(metric: str, doc: dict[str, Any]) -> str:
    first = next(iter(doc["policies"].values()))
    runs = max(len(first.get("per_seed", [])), 1) * max(len(first.get("per_workload", [])), 1)
    return f"{metric} (mean/run)" if metric in COUNT_METRICS and runs > 1 else metric


def results_table(doc: dict[str, Any], metrics: list[str] | None = None) -> Table:
    """Policy × metric: mean ± std over seeds, and the change vs the first policy (% ; percentage
    points for rates and fractions). ``metrics`` names the columns (each must be in the run); None =
    the :data:`TABLE_METRICS` the run has. Count columns averaged over several runs say so."""
    pols = doc["policies"]
    first = next(iter(pols.values()))
    if metrics:
        unknown = [m for m in metrics if m not in first["metrics"] and m not in known_metrics()]
        if unknown:
            raise ConfigError(f"table_metrics: unknown metric(s) {unknown}; this run has {sorted(first['metrics'])}")
        metrics = list(metrics)
    else:
        metrics = [m for m in TABLE_METRICS if m in first["metrics"]]
    extra = [k for k in first["metrics"] if k.endswith(("_ms", "_rate")) and k not in metrics]
    metrics += extra
    t = Table(title=f"scenario {doc['scenario']} — seeds {doc['seeds']}", show_lines=False)
    t.add_column("policy", style="bold")
    for m in metrics:
        t.add_column(column_label(m, doc), justify="right")
    for name, p in pols.items():
        cells = []
        for m in metrics:
            vals = np.array([s["metrics"].get(m, np.nan) for s in p["per_seed"]], dtype=float)
            mean = p["metrics"].get(m, float("nan"))
            cell = compact(mean)
            if len(vals) > 1 and np.isfinite(vals).all():
                cell += f" ±{compact(float(vals.std()))}"
            base = first["metrics"].get(m)
            if p is not first and base is not None:
                cell += change_text(m, mean, base)
            cells.append(cell)
        t.add_row(name, *cells)
    return t


def per_workload_table(doc: dict[str, Any], metric: str | None = None) -> Table | None:
    """``metric`` (default ``avg_jct_s``, else the run's first metric) per workload and policy."""
    pols = doc["policies"]
    first = next(iter(pols.values()))
    if "per_workload" not in first:
        return None
    if metric is None:
        metric = "avg_jct_s" if "avg_jct_s" in first["metrics"] else next(iter(first["metrics"]))
    t = Table(title=f"{metric} per workload (mean over seeds)")
    t.add_column("workload", style="bold")
    for name in pols:
        t.add_column(name, justify="right")
    for i, wl in enumerate(first["per_workload"]):
        t.add_row(wl["workload"], *(compact(p["per_workload"][i]["metrics"][metric]) for p in pols.values()))
    return t


def paper_table(doc: dict[str, Any]) -> Table | None:
    paper = doc.get("paper")
    if not paper:
        return None
    unpublished = any(c["value"] is None for c in paper["claims"])
    t = Table(title="paper vs sim", caption="n/p: not published (simulated value only)" if unpublished else None)
    for c in ("claim", "paper", "sim", "gap"):
        t.add_column(c, justify="left" if c == "claim" else "right")
    for c in paper["claims"]:
        sim = c.get("sim_value")
        label = c["claim"]
        if c.get("sim_workloads"):  # see mark_subsets: a claim about every workload, run on fewer
            label += f" (sim: {c.get('aggregate', 'geomean')} of {c['sim_workloads']} workloads)"
            gap = "n/a (subset)"
        elif c.get("meets_bound") is not None:
            gap = f"{'meets' if c['meets_bound'] else 'misses'} the {c['bound']} bound"
        else:
            gap = "-" if sim is None or not c["value"] else f"{(sim - c['value']) / abs(c['value']) * 100:+.0f}% rel"
        paper_txt = "n/p" if c["value"] is None else f"{c['value']:+.3f}"  # n/p: not published
        t.add_row(label, paper_txt, "-" if sim is None else f"{sim:+.3f}", gap)
    return t


def wide_console() -> Console:
    """A console at least 200 columns wide, so tables stay readable when piped or logged."""
    probe = Console()
    return Console(width=max(probe.width, 200)) if not probe.is_terminal else probe


def print_report(doc: dict[str, Any], console: Console | None = None, metrics: list[str] | None = None) -> None:
    """The results table (``metrics``: its columns; None = :data:`TABLE_METRICS`), then the
    per-workload and published-claim tables where the document has them."""
    console = console or wide_console()
    console.print(results_table(doc, metrics))
    for extra in (per_workload_table(doc), paper_table(doc)):
        if extra is not None:
            console.print(extra)


def plot(out_dir: Path, jcts: dict[str, list[float]], series: dict[str, tuple], n_gpus: int) -> list[Path]:
    """Write jct_cdf.png and cluster_timeline.png; returns the paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, v in jcts.items():
        if v:
            x = np.sort(np.asarray(v)) / 3600.0
            ax.plot(x, np.arange(1, len(x) + 1) / len(x), label=name)
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (h)")
    ax.set_ylabel("fraction of jobs")
    ax.set_title("JCT CDF (first seed, all workloads)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    paths.append(out_dir / "jct_cdf.png")
    _save(fig, paths[-1])
    plt.close(fig)

    fig = timeline_figure(plt, series, n_gpus)
    paths.append(out_dir / "cluster_timeline.png")
    _save(fig, paths[-1])
    plt.close(fig)
    return paths


def busy_window(series: dict[str, tuple]) -> tuple[float, float]:
    """(start, end) in seconds of the span where any policy has work on the cluster: the first and
    last change of any series with a GPU busy (a trace that starts late or a long idle tail would
    otherwise squeeze the work into a sliver of the axis)."""
    lo, hi = math.inf, -math.inf
    for t, busy, _ in series.values():
        t_arr, b = np.asarray(t, dtype=float), np.asarray(busy, dtype=float)
        on = np.flatnonzero(b > 0)
        if on.size:
            lo = min(lo, float(t_arr[on[0]]))
            end = on[-1] + 1 if on[-1] + 1 < len(t_arr) else on[-1]  # the step that frees the last GPU
            hi = max(hi, float(t_arr[end]))
    if not math.isfinite(lo):
        ts = [x for t, _, _ in series.values() for x in t]
        return (float(min(ts)), float(max(ts))) if ts else (0.0, 1.0)
    return lo, hi if hi > lo else lo + 1.0


def _time_unit(span_s: float) -> tuple[float, str]:
    for div, name in ((86400.0, "days"), (3600.0, "h"), (60.0, "min")):
        if span_s >= 3 * div:
            return div, name
    return 1.0, "s"


def timeline_figure(plt: Any, series: dict[str, tuple], n_gpus: int) -> Any:
    """One row of small panels per policy (busy GPU fraction | cluster power), every panel on the
    same axes: time over the busy window, in a unit that suits its length."""
    names = list(series) or ["(no runs)"]
    n = len(names)
    fig, axes = plt.subplots(n, 2, figsize=(9, 0.9 + 1.1 * n), sharex=True, sharey="col", squeeze=False)
    lo, hi = busy_window(series)
    pad = 0.02 * (hi - lo)
    div, unit = _time_unit(hi - lo)
    pmax = max([max(pw) for _, _, pw in series.values() if len(pw)] or [1.0]) / 1000.0
    for i, name in enumerate(names):
        a1, a2 = axes[i]
        if name in series:
            t, busy, power = series[name]
            th = np.asarray(t, dtype=float) / div
            a1.step(th, np.asarray(busy) / n_gpus, where="post", lw=0.8, color="C0")
            a2.step(th, np.asarray(power) / 1000.0, where="post", lw=0.8, color="C1")
        a1.set_ylabel(name, rotation=0, ha="right", va="center", fontsize=8)
        for a in (a1, a2):
            a.grid(alpha=0.3)
            a.tick_params(labelsize=7)
    axes[0][0].set_ylim(0, 1.05)
    axes[0][1].set_ylim(0, pmax * 1.05)
    axes[0][0].set_xlim((lo - pad) / div, (hi + pad) / div)
    axes[0][0].set_title("busy GPU fraction", fontsize=9)
    axes[0][1].set_title("cluster power (kW)", fontsize=9)
    axes[-1][0].set_xlabel(f"time ({unit})", fontsize=8)
    axes[-1][1].set_xlabel(f"time ({unit})", fontsize=8)
    fig.suptitle("utilisation and power over time (first seed, first workload)", fontsize=10)
    fig.tight_layout()
    return fig


def _save(fig: Any, path: Path) -> None:
    with atomic_path(path, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=110)
