"""Fit the embedded calibration constants from the shared data folder.

``python -m gpusched_env.calibrate`` rewrites ``gpusched_env/fitted.py``; a test checks that the
committed file equals a fresh fit whenever the data folder is present. Sources:

- variability: data/calibration/variability/{resnet,bert,sgemm,pagerank}-longhorn-agg.csv, column
  ``perf`` (higher = slower) normalised to the file's median; one file per PAL class (choice: A =
  ResNet, B = BERT, C = SGEMM, D = PageRank, the four Longhorn benchmarks, in order of PAL's classes:
  compute-bound CNN, transformer, dense-GEMM-heavy VGG, memory-bound PointNet).
- power: data/calibration/power-zeus/summary_power_*.csv and EaCO's exclusive-run table
  (CALIBRATION.md).
- stragglers: data/calibration/stragglers/job_{1..4}_norm.csv (per-worker mini-batch times).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

from gpusched_env.data import data_path

QUANTILE_GRID = tuple(np.round(np.concatenate([np.arange(0, 0.9, 0.05), np.arange(0.9, 1.0, 0.01), [0.995, 0.999, 1.0]]), 4).tolist())
CLASS_FILES = {
    "A": "calibration/variability/resnet-longhorn-agg.csv",
    "B": "calibration/variability/bert-longhorn-agg.csv",
    "C": "calibration/variability/sgemm-longhorn-agg.csv",
    "D": "calibration/variability/pagerank-longhorn-agg.csv",
}
STRAGGLER_FILES = [f"calibration/stragglers/job_{i}_norm.csv" for i in range(1, 5)]
STRAGGLER_THRESHOLD = 1.2  # choice: a worker >20 % slower than its job's median worker is straggling
# EaCO exclusive runs (CALIBRATION.md): model -> (node power W, average GPU utilisation)
EACO_EXCLUSIVE = {"alexnet": (712.0, 0.047), "resnet18": (959.0, 0.112), "resnet50": (1330.0, 0.366),
                  "vgg16": (1533.0, 0.48)}
EACO_GPUS_PER_NODE = 8


def fit_variability() -> dict[str, dict[str, list[float]]]:
    out: dict[str, dict[str, list[float]]] = {}
    for cls, rel in CLASS_FILES.items():
        d = pd.read_csv(data_path(rel), usecols=["uuid", "perf"])
        med = float(d["perf"].median())
        run = d["perf"] / med
        gpu = d.groupby("uuid")["perf"].median() / med
        out[cls] = {
            "per_run": np.round(np.quantile(run, QUANTILE_GRID), 4).tolist(),
            "per_gpu": np.round(np.quantile(gpu, QUANTILE_GRID), 4).tolist(),
        }
    return out


def fit_power() -> dict[str, tuple[float, float]]:
    """GPU type -> (idle W, busy W): lowest average power of any run; highest at the top power limit."""
    out = {}
    for t in ("v100", "a40", "p100", "rtx6000"):
        d = pd.read_csv(data_path(f"calibration/power-zeus/summary_power_{t}.csv"))
        top = d[d["power_limit"] == d["power_limit"].max()]
        out[t.upper()] = (round(float(d["average_power"].min()), 1), round(float(top["average_power"].max()), 1))
    return out


def fit_node_base(idle_w: float, busy_w: float) -> float:
    """Node baseline power (CPUs, fans, ...) = EaCO node power − its 8 GPUs' modelled power, averaged."""
    res = [p - EACO_GPUS_PER_NODE * (idle_w + (busy_w - idle_w) * u) for p, u in EACO_EXCLUSIVE.values()]
    return round(float(np.mean(res)), 1)


def fit_stragglers() -> dict[str, float | list[float]]:
    ratios, lengths, flags_total = [], [], 0
    strag_total = 0
    for rel in STRAGGLER_FILES:
        d = pd.read_csv(data_path(rel), usecols=["worker", "time", "batch_time_norm"])
        med = d.groupby("time")["batch_time_norm"].transform("median")
        d = d.assign(r=d["batch_time_norm"] / med).sort_values(["worker", "time"])
        s = d["r"] > STRAGGLER_THRESHOLD
        flags_total += len(d)
        strag_total += int(s.sum())
        ratios += d.loc[s, "r"].tolist()
        for _, g in d.groupby("worker"):
            run = 0
            for flag in (g["r"] > STRAGGLER_THRESHOLD).tolist():
                if flag:
                    run += 1
                elif run:
                    lengths.append(run)
                    run = 0
            if run:
                lengths.append(run)
    return {
        "fraction": round(strag_total / flags_total, 5),
        "mean_episode_samples": round(float(np.mean(lengths)), 3),
        "slowdown": np.round(np.quantile(ratios, QUANTILE_GRID), 4).tolist(),
    }


def fit_gavel_pairs() -> dict[str, dict[str, float]]:
    """GPU type -> {"a|b": slowdown of catalogue model a when sharing a GPU with b} (1 GPU each)."""
    import json

    from gpusched_env.catalog import MODELS

    raw = json.loads(data_path("calibration/throughput/gavel_simulation_throughputs.json").read_text())
    names = {m.name: m.gavel for m in MODELS.values() if m.gavel}
    out: dict[str, dict[str, float]] = {}
    for gpu in ("v100", "p100", "k80"):
        table = raw[gpu]
        pairs: dict[str, float] = {}
        for a, ga in names.items():
            entry = table.get(str((ga, 1)))
            if entry is None:
                continue
            for b, gb in names.items():
                both = entry.get(str((gb, 1)))
                if both and both[0] > 0:
                    pairs[f"{a}|{b}"] = round(entry["null"] / both[0], 4)
        out[gpu.upper()] = pairs
    return out


def render() -> str:
    var = fit_variability()
    power = fit_power()
    base = fit_node_base(*power["V100"])
    strag = fit_stragglers()
    lines = [
        '"""Calibration constants fitted from the shared data folder. Generated by',
        "``python -m gpusched_env.calibrate``; do not edit by hand (sources: gpusched_env/calibrate.py).\"\"\"",
        "",
        f"QUANTILE_GRID = {list(QUANTILE_GRID)!r}",
        "",
        "# class -> {'per_run': quantiles of per-run slowdown, 'per_gpu': quantiles of per-GPU medians}",
        f"VARIABILITY_QUANTILES = {var!r}",
        "",
        "# GPU type -> (idle W, busy W) from power-zeus",
        f"GPU_POWER_W = {power!r}",
        "",
        "# node baseline power (W) beside its GPUs, from EaCO's exclusive-run table and the V100 fit",
        f"NODE_BASE_W = {base!r}",
        "",
        "# transient stragglers: share of worker-samples >1.2x the job median, mean episode length in",
        "# samples, and quantiles of the slowdown while straggling",
        f"STRAGGLER_FRACTION = {strag['fraction']!r}",
        f"STRAGGLER_EPISODE_SAMPLES = {strag['mean_episode_samples']!r}",
        f"STRAGGLER_SLOWDOWN = {strag['slowdown']!r}",
        "",
        "# co-location: GPU type -> {'a|b': slowdown of a beside b}, from gavel_simulation_throughputs.json",
        f"GAVEL_PAIRS = {fit_gavel_pairs()!r}",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    out = Path(__file__).with_name("fitted.py")
    text = render()
    if "--check" in sys.argv:
        sys.exit(0 if out.read_text() == text else 1)
    out.write_text(text)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
