"""The Microsoft Philly trace as pre-processed by Sia (data/traces/philly/philly.csv).

Columns ``timestamp,duration,num_gpus,gpu_time,cluster``: wall-clock submit time, run time in
seconds, GPUs, GPU-seconds (unused) and virtual-cluster id. The trace names no model, so each job gets
one drawn from a model mix (default :data:`~gpusched_env.workload.mix.DEFAULT_MODEL_MIX`) and
``work_iters = duration / base_iter_s`` of that model, so that the job alone on V100s takes the
trace's duration.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from pathlib import Path

import numpy as np
import pandas as pd

from gpusched_env.workload._table import Checker, read_csv
from gpusched_env.workload.errors import LoadReport, Workload
from gpusched_env.workload.mix import DEFAULT_MODEL_MIX, ModelMix, draw_models, timed_jobs

PHILLY_COLUMNS = ("timestamp", "duration", "num_gpus", "cluster")
TIME_FORMAT = "%Y-%m-%d %H:%M:%S"

TimeLike = str | datetime | pd.Timestamp


def read_philly_frame(
    path: str | Path, *, strict: bool = True, max_gpus: int | None = None, report: LoadReport | None = None
) -> pd.DataFrame:
    """Validated rows of a Philly CSV as a frame (``timestamp`` datetime64, ``duration`` float,
    ``num_gpus`` int, ``cluster`` str, ``line`` file line), sorted by timestamp (stable)."""
    src = str(path)
    df = read_csv(path, PHILLY_COLUMNS)
    rep = report if report is not None else LoadReport(src)
    chk = Checker(df, src, strict=strict, report=rep)
    ts = pd.to_datetime(df["timestamp"].astype(str).str.strip(), format=TIME_FORMAT, errors="coerce")
    chk.reject(ts.isna().to_numpy(), "timestamp", f"not a time of format {TIME_FORMAT}")
    dur = chk.numeric("duration", positive=True)
    gpus = chk.numeric("num_gpus", positive=True, integer=True, max_value=max_gpus, max_name="max_gpus")
    cluster = df["cluster"].astype(str).str.strip()
    chk.reject((cluster == "").to_numpy(), "cluster", "missing value")
    keep = chk.done()
    out = pd.DataFrame(
        {
            "timestamp": ts.to_numpy()[keep],
            "duration": dur[keep],
            "num_gpus": gpus[keep].astype(np.int64),
            "cluster": cluster.to_numpy()[keep],
            "line": df.index.to_numpy()[keep] + 2,
        }
    )
    return out.sort_values("timestamp", kind="stable").reset_index(drop=True)


def load_philly(
    path: str | Path,
    *,
    rng: np.random.Generator,
    virtual_cluster: str | Collection[str] | None = None,
    start: TimeLike | None = None,
    end: TimeLike | None = None,
    limit: int | None = None,
    strict: bool = True,
    max_gpus: int | None = None,
    model_mix: ModelMix = DEFAULT_MODEL_MIX,
) -> Workload:
    """Load Philly jobs, optionally only those of ``virtual_cluster`` submitted in ``[start, end)``
    (wall clock), the first ``limit`` of them by submit time.

    Arrival = seconds since the earliest kept timestamp. Job ids are 0..n-1 in arrival order. Models
    are drawn from ``model_mix`` with ``rng`` in arrival order, so the same seed gives the same jobs.
    """
    report = LoadReport(str(path))
    frame = read_philly_frame(path, strict=strict, max_gpus=max_gpus, report=report)
    if virtual_cluster is not None:
        wanted = {virtual_cluster} if isinstance(virtual_cluster, str) else set(virtual_cluster)
        sel = frame["cluster"].isin(wanted)
        report.filter(f"virtual cluster not in {sorted(wanted)}", int((~sel).sum()))
        frame = frame[sel]
    if start is not None:
        sel = frame["timestamp"] >= pd.Timestamp(start)
        report.filter(f"submitted before {start}", int((~sel).sum()))
        frame = frame[sel]
    if end is not None:
        sel = frame["timestamp"] < pd.Timestamp(end)
        report.filter(f"submitted at or after {end}", int((~sel).sum()))
        frame = frame[sel]
    if limit is not None:
        if limit < 0:
            raise ValueError(f"limit must be >= 0, got {limit}")
        report.filter(f"beyond limit={limit}", max(0, len(frame) - limit))
        frame = frame.iloc[:limit]
    if frame.empty:
        return Workload([], report)
    t0 = frame["timestamp"].iloc[0]
    arrival = ((frame["timestamp"] - t0).dt.total_seconds()).to_numpy(dtype=np.float64)
    models = draw_models(rng, len(frame), model_mix)
    jobs = timed_jobs(arrival, frame["num_gpus"].to_numpy(), frame["duration"].to_numpy(), models)
    return Workload(jobs, report)
