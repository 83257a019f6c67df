"""Model mixes: which catalogue model a job of a model-less trace (Philly, Alibaba) trains."""

from __future__ import annotations

import numpy as np

from gpusched_env.catalog import model_spec
from gpusched_env.types import Job

ModelMix = tuple[tuple[str, float], ...]
"""(catalogue model name, weight) pairs; weights need not sum to 1."""

# Choice: the model frequencies of PAL's eight Philly-derived workloads (1,280 jobs of
# data/traces/philly/pal-workloads/workload-{1..8}.csv, counted per model). PAL assigned these models
# to Philly jobs, so a Philly job drawn from this mix looks like a PAL job.
DEFAULT_MODEL_MIX: ModelMix = (
    ("vgg19", 522.0),
    ("pointnet", 500.0),
    ("resnet50", 110.0),
    ("dcgan", 84.0),
    ("bert", 34.0),
    ("gpt2", 30.0),
)


def mix_probabilities(mix: ModelMix) -> tuple[list[str], np.ndarray]:
    """Catalogue names and normalised probabilities of ``mix``; ValueError on a bad mix."""
    if not mix:
        raise ValueError("model_mix is empty")
    names = [model_spec(name).name for name, _ in mix]
    w = np.asarray([weight for _, weight in mix], dtype=np.float64)
    if not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
        raise ValueError(f"model_mix weights must be >= 0 with a positive sum, got {mix}")
    return names, w / w.sum()


def draw_models(rng: np.random.Generator, n: int, mix: ModelMix = DEFAULT_MODEL_MIX) -> list[str]:
    """``n`` model names drawn independently from ``mix``."""
    names, p = mix_probabilities(mix)
    idx = rng.choice(len(names), size=n, p=p)
    return [names[i] for i in idx]


def timed_jobs(
    arrivals: np.ndarray, num_gpus: np.ndarray, durations_s: np.ndarray, models: list[str]
) -> list[Job]:
    """Jobs with ids 0..n-1 whose work is set so that running alone on a V100 takes ``durations_s``
    (work = duration / the model's base iteration time); class and memory from the catalogue."""
    specs = {m: model_spec(m) for m in set(models)}
    return [
        Job(
            job_id=k,
            arrival_s=float(a),
            num_gpus=int(g),
            work_iters=float(d) / specs[m].base_iter_s,
            model=m,
            perf_class=specs[m].perf_class,
            mem_gb=specs[m].mem_gb,
        )
        for k, (a, g, d, m) in enumerate(zip(arrivals, num_gpus, durations_s, models, strict=True))
    ]
