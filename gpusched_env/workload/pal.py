"""PAL's Philly-derived workloads (hal-uw/blox-pal, workload-traces/philly/workload-N.csv).

Columns ``job_id,num_gpus,submit_time,duration,model``: ``submit_time`` in seconds from the start,
``duration`` an iteration count in PAL's simulator (it becomes :attr:`Job.work_iters`).

Background load, as PAL's artifact generates it (blox-pal, branch ``artifact``: ``simulator_sia.py``,
``workload/workload.py`` replay mode, ``workload/utils.py``, ``blox/blox_manager.py``): after the
160 trace jobs the workload generator keeps cycling through the same trace, job ``k`` being a copy of
row ``k mod 160`` (same GPUs, iterations and model) with a fresh id ``k``; each arrives after the
previous one with an exponential gap of mean 3600 / jobs_per_hour seconds, rounded up to whole
seconds (``jobs_per_hour`` = 2 in experiment A1). Only ids 0..159 are tracked for the metrics; the run
ends once all tracked jobs have finished, whatever background jobs are still queued or running.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import fields
from itertools import repeat
from operator import attrgetter
from pathlib import Path

import numpy as np

from gpusched_env.catalog import model_spec
from gpusched_env.types import Job
from gpusched_env.workload._table import Checker, read_csv
from gpusched_env.workload.errors import LoadReport, Workload

PAL_COLUMNS = ("job_id", "num_gpus", "submit_time", "duration", "model")


def load_pal_workload(path: str | Path, *, strict: bool = True, max_gpus: int | None = None) -> Workload:
    """Load one PAL workload CSV; jobs keep the file's ids and are sorted by arrival."""
    src = str(path)
    df = read_csv(path, PAL_COLUMNS)
    report = LoadReport(src)
    chk = Checker(df, src, strict=strict, report=report)
    job_id = chk.numeric("job_id", non_negative=True, integer=True)
    gpus = chk.numeric("num_gpus", positive=True, integer=True, max_value=max_gpus, max_name="max_gpus")
    submit = chk.numeric("submit_time", non_negative=True)
    iters = chk.numeric("duration", positive=True)
    models = chk.models("model")
    ids = job_id[chk.ok]
    dup = np.zeros(len(df), dtype=bool)
    _, first = np.unique(ids, return_index=True)
    dup_sel = np.ones(len(ids), dtype=bool)
    dup_sel[first] = False
    dup[np.flatnonzero(chk.ok)[dup_sel]] = True
    chk.reject(dup, "job_id", "duplicate job id")
    keep = chk.done()
    order = keep[np.argsort(submit[keep], kind="stable")]
    jobs = []
    for i in order:
        spec = model_spec(models[i])
        jobs.append(
            Job(
                job_id=int(job_id[i]),
                arrival_s=float(submit[i]),
                num_gpus=int(gpus[i]),
                work_iters=float(iters[i]),
                model=spec.name,
                perf_class=spec.perf_class,
                mem_gb=spec.mem_gb,
            )
        )
    return Workload(jobs, report)


def background_gaps(rng: np.random.Generator, n_background: int, rate_per_hour: float) -> np.ndarray:
    """The exponential gaps (s) between :func:`with_background`'s arrivals, before rounding: its only
    draw from ``rng`` (so a caller can skip one workload's background by drawing them alone)."""
    return rng.exponential(3600.0 / rate_per_hour, size=n_background)


def with_background(
    jobs: list[Job],
    *,
    rng: np.random.Generator,
    n_background: int,
    rate_per_hour: float = 2.0,
    id_offset: int | None = None,
    whole_seconds: bool = True,
) -> list[Job]:
    """PAL's untracked background load that follows ``jobs`` (returned on its own, not appended).

    Background job ``k`` (0-based) copies ``jobs[k mod len(jobs)]`` (in arrival order) with id
    ``id_offset + k`` (default: one past the largest id) and ``tracked=False``; arrivals start after
    the last tracked arrival with exponential gaps of mean ``3600 / rate_per_hour`` s, rounded up to
    whole seconds like PAL's ``poisson_next_arrival_time`` unless ``whole_seconds`` is False.
    PAL generates them without end; ``n_background`` must cover the run (the simulator should stop
    when every tracked job is done).
    """
    if not jobs:
        raise ValueError("with_background needs at least one trace job")
    if rate_per_hour <= 0 or not math.isfinite(rate_per_hour):
        raise ValueError(f"rate_per_hour must be > 0, got {rate_per_hour}")
    if n_background < 0:
        raise ValueError(f"n_background must be >= 0, got {n_background}")
    base = sorted(jobs, key=lambda j: j.arrival_s)
    start_id = max(j.job_id for j in jobs) + 1 if id_offset is None else id_offset
    gaps = background_gaps(rng, n_background, rate_per_hour)
    if whole_seconds:
        gaps = np.ceil(gaps)
    arrivals = (base[-1].arrival_s + np.cumsum(gaps)).tolist()
    # Each copy gets its source's field values with three of them changed: the same Job as
    # ``dataclasses.replace`` gives (tests compare them), its slots written directly by their
    # descriptors, one field at a time over all copies (``map`` drained by a zero-length deque: a
    # C-level loop, no bytecode per copy; a frozen dataclass's __init__ sets each field through
    # object.__setattr__, and a PAL reset builds 2,000 copies).
    out = list(map(object.__new__, repeat(Job, n_background)))
    reps = -(-n_background // len(base))  # ceil: copies of the whole base list needed
    for f in fields(Job):
        name = f.name
        if name == "job_id":
            values: Iterable[object] = range(start_id, start_id + n_background)
        elif name == "arrival_s":
            values = arrivals
        elif name == "tracked":
            values = repeat(False, n_background)
        else:
            values = (list(map(attrgetter(name), base)) * reps)[:n_background]  # copy k: base[k mod len]
        deque(map(getattr(Job, name).__set__, out, values), maxlen=0)
    return out
