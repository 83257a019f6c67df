"""A Philly-like synthetic workload that needs no data folder.

:class:`SyntheticPhilly` holds the parameters of the generator; its defaults were fitted by
:func:`fit_philly` to data/traces/philly/philly.csv (Microsoft Philly trace, Sep-Dec 2017, 82,247 jobs,
as pre-processed by the Sia artifact; CC-BY-4.0) and are embedded below, rounded. Modelling choices:
arrivals are Poisson with an hour-of-day profile; GPU counts are drawn from the trace's frequencies;
run times are drawn from the trace's empirical quantiles (log-linear between them), separately for
single- and multi-GPU jobs because multi-GPU jobs run ~10x longer in Philly; the model is drawn
from a model mix as in :func:`~gpusched_env.workload.philly.load_philly`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from gpusched_env.catalog import model_spec
from gpusched_env.types import Job
from gpusched_env.workload.mix import DEFAULT_MODEL_MIX, ModelMix, draw_models, mix_probabilities, timed_jobs

# fmt: off
DURATION_PROBS: tuple[float, ...] = (
    tuple(round(0.05 * i, 2) for i in range(20)) + (0.98, 0.99, 0.995, 0.999, 1.0)
)
"""Cumulative probabilities at which the run-time quantiles are given."""

# ---- Fitted to data/traces/philly/philly.csv by fit_philly() (tests/test_workload_loaders.py checks) ----
PHILLY_RATE_PER_HOUR = 31.4698
PHILLY_DIURNAL: tuple[float, ...] = (
    1.2743, 0.9845, 1.1191, 1.103, 0.7003, 1.1526, 1.6726, 2.089, 1.1094, 1.0058, 1.0242, 0.8693,
    0.7491, 0.7047, 0.6376, 0.649, 0.8815, 0.6679, 0.8007, 0.7283, 1.0164, 0.9168, 1.1337, 1.0099,
)
PHILLY_GPU_COUNTS: tuple[int, ...] = (1, 2, 4, 8, 12, 16, 24, 32, 64, 128)
PHILLY_GPU_PROBS: tuple[float, ...] = (
    0.931669, 0.022104, 0.022736, 0.019976, 8.5e-05, 0.00242, 8.5e-05, 0.000815, 7.3e-05, 3.6e-05,
)
PHILLY_SINGLE_GPU_QUANTILES_S: tuple[float, ...] = (
    1.0, 52.0, 62.0, 69.0, 76.0, 122.0, 215.0, 385.0, 600.0,
    855.0, 1117.0, 1446.0, 1728.0, 2054.0, 2464.2, 2716.0, 3754.0, 5342.1,
    8512.0, 19137.0, 68251.7, 135399.3, 266914.1, 865708.7, 3256045.0,
)
PHILLY_MULTI_GPU_QUANTILES_S: tuple[float, ...] = (
    1.0, 13.0, 17.0, 20.0, 25.0, 41.0, 110.0, 198.0, 539.0,
    1323.1, 4582.5, 11549.7, 18358.0, 30066.7, 54492.3, 83263.5, 113122.0, 167583.9,
    208414.5, 364276.5, 609351.0, 903853.0, 1211092.0, 2480087.4, 4628226.0,
)
# ---- end of fitted constants ----
# fmt: on


@dataclass(frozen=True)
class SyntheticPhilly:
    """Parameters of the Philly-like generator (defaults: fitted to philly.csv)."""

    rate_per_hour: float = PHILLY_RATE_PER_HOUR
    """Mean arrival rate, jobs per hour (Poisson process)."""
    diurnal: tuple[float, ...] | None = PHILLY_DIURNAL
    """24 hour-of-day rate multipliers with mean 1 (hour 0 = ``start_hour``), or None for a flat rate."""
    start_hour: float = 0.0
    """Hour of day at time 0 (phase of the diurnal profile)."""
    gpu_counts: tuple[int, ...] = PHILLY_GPU_COUNTS
    """GPU counts a job may request."""
    gpu_probs: tuple[float, ...] = PHILLY_GPU_PROBS
    """Probability of each entry of ``gpu_counts`` (normalised on use)."""
    single_gpu_quantiles_s: tuple[float, ...] = PHILLY_SINGLE_GPU_QUANTILES_S
    """Run-time quantiles (s) of 1-GPU jobs at :data:`DURATION_PROBS`."""
    multi_gpu_quantiles_s: tuple[float, ...] = PHILLY_MULTI_GPU_QUANTILES_S
    """Run-time quantiles (s) of multi-GPU jobs at :data:`DURATION_PROBS`."""
    model_mix: ModelMix = field(default=DEFAULT_MODEL_MIX)
    """Models jobs train (see :mod:`gpusched_env.workload.mix`)."""

    def __post_init__(self) -> None:
        if not (self.rate_per_hour > 0 and math.isfinite(self.rate_per_hour)):
            raise ValueError(f"rate_per_hour must be > 0, got {self.rate_per_hour}")
        if self.diurnal is not None and (
            len(self.diurnal) != 24 or min(self.diurnal) < 0 or max(self.diurnal) <= 0
        ):
            raise ValueError("diurnal must be 24 non-negative multipliers, not all zero")
        if not self.gpu_counts or len(self.gpu_counts) != len(self.gpu_probs):
            raise ValueError("gpu_counts and gpu_probs must be non-empty and of equal length")
        if min(self.gpu_counts) < 1 or min(self.gpu_probs) < 0 or sum(self.gpu_probs) <= 0:
            raise ValueError("gpu_counts must be >= 1 and gpu_probs >= 0 with a positive sum")
        for name in ("single_gpu_quantiles_s", "multi_gpu_quantiles_s"):
            q = getattr(self, name)
            if (
                len(q) != len(DURATION_PROBS)
                or min(q) <= 0
                or any(b < a for a, b in zip(q, q[1:], strict=False))
            ):
                raise ValueError(f"{name} must be {len(DURATION_PROBS)} positive, non-decreasing values")
        mix_probabilities(self.model_mix)

    # -- sampling ---------------------------------------------------------------------------------
    def arrivals(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` arrival times (s), a Poisson process thinned by the diurnal profile."""
        if self.diurnal is None:
            return np.cumsum(rng.exponential(3600.0 / self.rate_per_hour, size=n))
        prof = np.asarray(self.diurnal, dtype=np.float64)
        prof = prof / prof.mean()
        peak = prof.max()
        out: list[np.ndarray] = []
        got, t0 = 0, 0.0
        while got < n:
            batch = int((n - got) * peak * 1.2) + 16
            t = t0 + np.cumsum(rng.exponential(3600.0 / (self.rate_per_hour * peak), size=batch))
            hour = ((t / 3600.0 + self.start_hour) % 24).astype(np.int64)
            acc = t[rng.random(batch) < prof[hour] / peak]
            out.append(acc[: n - got])
            got += len(out[-1])
            t0 = float(t[-1])
        return np.concatenate(out) if out else np.zeros(0)

    def durations(self, rng: np.random.Generator, num_gpus: np.ndarray) -> np.ndarray:
        """Run times (s) for jobs of ``num_gpus`` GPUs, from the class's quantiles."""
        u = rng.random(len(num_gpus))
        probs = np.asarray(DURATION_PROBS)
        single = np.exp(np.interp(u, probs, np.log(self.single_gpu_quantiles_s)))
        multi = np.exp(np.interp(u, probs, np.log(self.multi_gpu_quantiles_s)))
        return np.where(np.asarray(num_gpus) > 1, multi, single)

    def generate(self, rng: np.random.Generator, n_jobs: int) -> list[Job]:
        """``n_jobs`` jobs with ids 0..n-1 in arrival order; same rng state -> same jobs."""
        if n_jobs < 0:
            raise ValueError(f"n_jobs must be >= 0, got {n_jobs}")
        arrivals = self.arrivals(rng, n_jobs)
        p = np.asarray(self.gpu_probs, dtype=np.float64)
        gpus = np.asarray(self.gpu_counts)[rng.choice(len(p), size=n_jobs, p=p / p.sum())]
        dur = self.durations(rng, gpus)
        return timed_jobs(arrivals, gpus, dur, draw_models(rng, n_jobs, self.model_mix))

    # -- load scaling -----------------------------------------------------------------------------
    def mean_duration_s(self, multi_gpu: bool) -> float:
        """Exact mean of the (log-linearly interpolated) run-time distribution of a class."""
        q = np.asarray(self.multi_gpu_quantiles_s if multi_gpu else self.single_gpu_quantiles_s)
        a, b, w = q[:-1], q[1:], np.diff(DURATION_PROBS)
        ratio = np.log(b / a)
        seg = np.where(ratio > 1e-12, (b - a) / np.where(ratio > 1e-12, ratio, 1.0), a)
        return float((w * seg).sum())

    def mean_gpu_seconds(self) -> float:
        """Expected GPU-seconds of one job (alone on V100s)."""
        c = np.asarray(self.gpu_counts, dtype=np.float64)
        p = np.asarray(self.gpu_probs, dtype=np.float64)
        p = p / p.sum()
        single = float(p[c == 1].sum()) * self.mean_duration_s(False)
        multi = float((p * c)[c > 1].sum()) * self.mean_duration_s(True)
        return single + multi

    def rate_for_load(self, n_gpus: int, load: float) -> float:
        """Arrival rate (jobs/hour) that offers ``load`` x ``n_gpus`` GPUs of work on average."""
        if n_gpus < 1 or load <= 0:
            raise ValueError(f"n_gpus must be >= 1 and load > 0, got {n_gpus}, {load}")
        return load * n_gpus * 3600.0 / self.mean_gpu_seconds()

    def scaled(
        self,
        *,
        n_gpus: int | None = None,
        load: float | None = None,
        rate_per_hour: float | None = None,
        max_gpus: int | None = None,
    ) -> SyntheticPhilly:
        """A copy for a cluster: GPU counts above ``max_gpus`` dropped (probabilities renormalised),
        then the rate set to ``rate_per_hour`` or to the rate offering ``load`` on ``n_gpus`` GPUs."""
        out = self
        if max_gpus is not None:
            pairs = [(c, p) for c, p in zip(self.gpu_counts, self.gpu_probs, strict=True) if c <= max_gpus]
            if not pairs or sum(p for _, p in pairs) <= 0:
                raise ValueError(f"no GPU count <= max_gpus={max_gpus} in {self.gpu_counts}")
            out = replace(out, gpu_counts=tuple(c for c, _ in pairs), gpu_probs=tuple(p for _, p in pairs))
        if rate_per_hour is not None and load is not None:
            raise ValueError("give load or rate_per_hour, not both")
        if load is not None:
            if n_gpus is None:
                raise ValueError("load needs n_gpus")
            rate_per_hour = out.rate_for_load(n_gpus, load)
        if rate_per_hour is not None:
            out = replace(out, rate_per_hour=rate_per_hour)
        return out


def scaled(
    n_gpus: int, load: float, *, max_gpus: int | None = None, base: SyntheticPhilly | None = None
) -> SyntheticPhilly:
    """Philly-like parameters offering ``load`` (e.g. 0.8) on a cluster of ``n_gpus`` GPUs, jobs no
    larger than ``max_gpus``."""
    return (base or SyntheticPhilly()).scaled(n_gpus=n_gpus, load=load, max_gpus=max_gpus)


def fit_philly(path: str | Path) -> SyntheticPhilly:
    """Refit the default parameters from a Philly CSV (rounded as the embedded constants are)."""
    from gpusched_env.workload.philly import read_philly_frame

    f = read_philly_frame(path)
    if len(f) < 2:
        raise ValueError(f"{path}: need at least two jobs to fit")
    span_h = (f["timestamp"].iloc[-1] - f["timestamp"].iloc[0]).total_seconds() / 3600.0
    per_hour = np.bincount(f["timestamp"].dt.hour.to_numpy(), minlength=24).astype(np.float64)
    counts = f["num_gpus"].value_counts().sort_index()
    dur = f["duration"].to_numpy()
    multi = f["num_gpus"].to_numpy() > 1
    return SyntheticPhilly(
        rate_per_hour=round(len(f) / span_h, 4),
        diurnal=tuple(round(float(x), 4) for x in per_hour / per_hour.mean()),
        gpu_counts=tuple(int(c) for c in counts.index),
        gpu_probs=tuple(round(float(x), 6) for x in counts.to_numpy() / len(f)),
        single_gpu_quantiles_s=tuple(round(float(x), 1) for x in np.quantile(dur[~multi], DURATION_PROBS)),
        multi_gpu_quantiles_s=tuple(round(float(x), 1) for x in np.quantile(dur[multi], DURATION_PROBS)),
    )


def toy_workload() -> list[Job]:
    """Eight fixed jobs (no randomness) for smoke tests: every PAL class, 1-4 GPUs, staggered."""
    spec = [
        (0.0, 1, 600, "resnet50"),
        (0.0, 2, 400, "vgg19"),
        (30.0, 1, 900, "bert"),
        (60.0, 4, 300, "dcgan"),
        (90.0, 1, 200, "pointnet"),
        (120.0, 2, 800, "resnet50"),
        (150.0, 1, 50, "gpt2"),
        (180.0, 4, 500, "vgg19"),
    ]
    jobs = []
    for k, (t, g, iters, name) in enumerate(spec):
        m = model_spec(name)
        jobs.append(Job(k, t, g, float(iters), m.name, m.perf_class, m.mem_gb))
    return jobs
