"""Per-GPU performance variability: slowdown factors per GPU and PAL class (>1 = slower).

Sources (see :mod:`gpusched_env.calibrate`): Longhorn V100 measurements, one benchmark per class,
normalised to the median. Embedded as quantile tables (:mod:`gpusched_env.fitted`).

Modes:
- ``per_run`` — PAL's simulator: each GPU's factor per class is one per-run measurement drawn from
  that class's per-run distribution (classes drawn independently), fixed for the whole run.
- ``per_gpu`` — each GPU is a persistent draw from the distribution of per-GPU medians; one quantile
  level per GPU shared by all classes (choice: a GPU slow on one benchmark is slow on the others).
- ``pal_artifact`` — the one fixed draw of PAL's artifact (``random.seed(42)``, ``random.choice`` over
  the per-run values per GPU and class), rebuilt from the same data with the artifact's procedure
  (:mod:`.pal_draw`); the same matrix for every seed. ``class_source`` does not apply (the artifact's
  own class files are used).
- ``none`` — all factors 1.
Options: ``outlier_prob`` adds persistent outliers ``outlier_factor`` slower (SC'22: up to 1.5x);
``drift_sigma`` makes factors drift by a log-normal step every ``drift_interval_s``.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from gpusched_env.fitted import QUANTILE_GRID, VARIABILITY_QUANTILES
from gpusched_env.types import PERF_CLASSES

MODES = ("per_run", "per_gpu", "pal_artifact", "none")


@dataclass(frozen=True)
class VariabilityConfig:
    """``scenario.model.variability``."""

    mode: str = "per_gpu"  # per_run | per_gpu | pal_artifact | none
    outlier_prob: float = 0.0  # choice: the Longhorn tail already holds outliers
    outlier_factor: float = 1.5  # SC'22 (CALIBRATION.md): outliers up to 1.5x slower
    drift_sigma: float = 0.0  # log-normal sigma of each drift step; 0 = off
    drift_interval_s: float = 86400.0  # seconds between drift steps
    profile_path: str | None = None  # CSV gpu,node,A,B,C,D (e.g. from `gpusched-real profile`)
    class_source: dict[str, str] = field(default_factory=dict)  # e.g. {C: B}: draw class C from B's data

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        bad = {k: v for k, v in self.class_source.items() if k not in PERF_CLASSES or v not in PERF_CLASSES}
        if bad:
            raise ValueError(f"class_source maps classes A-D to classes A-D, got {bad}")
        if not 0.0 <= self.outlier_prob <= 1.0:
            raise ValueError(f"outlier_prob must be in [0, 1], got {self.outlier_prob}")


def _inverse_cdf(u: np.ndarray, quantiles: list[float]) -> np.ndarray:
    return np.interp(u, QUANTILE_GRID, quantiles)


def sample_factors(n_gpus: int, cfg: VariabilityConfig, rng: np.random.Generator) -> np.ndarray:
    """(n_gpus, 4) slowdown factors for classes A..D."""
    if cfg.profile_path:
        f = load_profile(cfg.profile_path)
        if f.shape[0] != n_gpus:
            raise ValueError(
                f"variability.profile_path {cfg.profile_path}: {f.shape[0]} GPUs, cluster has {n_gpus}"
            )
        return f
    if cfg.mode == "pal_artifact":
        from gpusched_env.cluster.pal_draw import artifact_draw

        out = artifact_draw(n_gpus)
        if cfg.outlier_prob > 0:
            out[rng.random(n_gpus) < cfg.outlier_prob] *= cfg.outlier_factor
        return out
    out = np.ones((n_gpus, len(PERF_CLASSES)))
    src = {cls: cfg.class_source.get(cls, cls) for cls in PERF_CLASSES}
    if cfg.mode == "per_run":
        for c, cls in enumerate(PERF_CLASSES):
            out[:, c] = _inverse_cdf(rng.random(n_gpus), VARIABILITY_QUANTILES[src[cls]]["per_run"])
    elif cfg.mode == "per_gpu":
        u = rng.random(n_gpus)
        for c, cls in enumerate(PERF_CLASSES):
            out[:, c] = _inverse_cdf(u, VARIABILITY_QUANTILES[src[cls]]["per_gpu"])
    if cfg.outlier_prob > 0:
        out[rng.random(n_gpus) < cfg.outlier_prob] *= cfg.outlier_factor
    return out


def drift(factors: np.ndarray, sigma: float, rng: np.random.Generator) -> np.ndarray:
    """One drift step: every factor multiplied by an independent log-normal(0, sigma) draw."""
    return factors * np.exp(rng.normal(0.0, sigma, size=factors.shape))


def load_profile(path: str | Path) -> np.ndarray:
    """Read a variability profile CSV (header ``gpu,node,A,B,C,D``) into an (n_gpus, 4) array."""
    path = Path(path)
    with path.open(newline="") as fh:
        reader = csv.DictReader(fh)
        need = ["gpu", *PERF_CLASSES]
        missing = [k for k in need if k not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path}: missing column(s) {missing}; expected header gpu,node,A,B,C,D")
        rows = []
        for line, row in enumerate(reader, start=2):
            try:
                vals = [float(row[c]) for c in PERF_CLASSES]
                gpu = int(row["gpu"])
            except ValueError as e:
                raise ValueError(f"{path}:{line}: {e}") from e
            if min(vals) <= 0:
                raise ValueError(f"{path}:{line}: slowdown factors must be > 0, got {vals}")
            rows.append((gpu, vals))
    rows.sort()
    if [g for g, _ in rows] != list(range(len(rows))):
        raise ValueError(f"{path}: column 'gpu' must number the devices 0..n-1")
    return np.array([v for _, v in rows], dtype=float)


def write_profile(path: str | Path, factors: np.ndarray, nodes: np.ndarray) -> None:
    """Write factors in the format :func:`load_profile` reads."""
    with Path(path).open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["gpu", "node", *PERF_CLASSES])
        for g, row in enumerate(factors):
            w.writerow([g, int(nodes[g]), *(f"{v:.6f}" for v in row)])
