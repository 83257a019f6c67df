"""Per-model kernel sequences, generated to match DEVICE.md's published kernel statistics.

A model's *shape* (kernel count, median and p90 kernel duration, GPU time; Orion's Nsight tables in
DEVICE.md) fixes the relative kernel durations; its *standalone time* on a GPU type (a measurement
where one exists, else scaled from one by :func:`gpus.kernel_time_scale`) and its GPU utilisation
alone fix their absolute size and the host launch gaps between them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from gpusched_env.device.gpus import DeviceGpu, device_gpu, kernel_time_scale
from gpusched_env.device.kernels import KernelSeq, standalone_ends


@dataclass(frozen=True, slots=True)
class Shape:
    """Kernel statistics of one measured workload (DEVICE.md, Orion, V100)."""

    n_kernels: int
    median_us: float
    p90_us: float
    busy_ms: float  # summed kernel time


# DEVICE.md "Kernel shapes (Orion, V100, Nsight Compute)". BERT training's median/p90 are not
# published: choice, those of BERT inference (34 / 139 µs).
SHAPES: dict[str, Shape] = {
    "resnet50_inf": Shape(175, 12.5, 96.0, 6.5),
    "bert_inf": Shape(572, 34.0, 139.0, 48.6),
    "resnet50_train": Shape(946, 6.0, 360.0, 95.0),
    "bert_train": Shape(4777, 34.0, 139.0, 191.0),
}


@dataclass(frozen=True, slots=True)
class ModelProfile:
    """One inference service (one request) or training job (one iteration) on the device."""

    name: str
    kind: str  # inference | training
    shape: str  # key of SHAPES
    n_kernels: int  # kernels per request / iteration
    util: float  # GPU busy fraction alone, in (0, 1]
    compute_frac: float  # share of kernel time compute-bound (memory intensity = 1 - this)
    standalone_s: tuple[tuple[str, float], ...]  # (GPU type, measured time per request / iteration)
    source: str
    util_on: tuple[tuple[str, float], ...] = ()  # (GPU type, utilisation) where it differs from ``util``

    def util_for(self, gpu_type: str) -> float:
        return dict(self.util_on).get(gpu_type, self.util)


# Sources: T = CALIBRATION.md / DEVICE.md (Tally, A100-40GB); H = data/calibration/colocation-h100
# (standalone: mean of its two runs; hp_solo_ms 3.731/7.692 and 6.089/5.198, be_solo 26.909/26.87 and
# 23.527/23.576 it/s); O = DEVICE.md Orion (ResNet training 65-68 % compute-bound -> 0.665).
# Every other figure is a choice (marked c): utilisation of batch-1 eager inference on H100 0.4
# (launch-bound: kernels of a few µs behind ~10-20 µs host launches); compute share 0.5 for
# transformers, 0.3 for LLM decoding (memory-bound), 0.6 for CNN inference; kernel counts of models
# without a published profile scaled from the nearest Orion shape; LLM counts capped at 20000.
PROFILES: dict[str, ModelProfile] = {p.name: p for p in (
    ModelProfile("resnet50_inf", "inference", "resnet50_inf", 175, 0.89, 0.6,
                 (("H100", 5.7115e-3), ("A100", 4.0e-3)), "H: solo; util: c (BERT's 89 %), 0.4 on H100 (c); A100 time: c",
                 (("H100", 0.4),)),
    ModelProfile("bert_inf", "inference", "bert_inf", 572, 0.89, 0.5,
                 (("A100", 4.05e-3), ("H100", 5.6435e-3)), "T: 4.05 ms at 89 % util; H: solo; util on H100: c",
                 (("H100", 0.4),)),
    ModelProfile("resnet18_inf", "inference", "resnet50_inf", 70, 0.89, 0.6, (("RTX2080Ti", 1 / 724),),
                 "DEVICE.md (DARIS): 724 fps batch 1 on the 2080 Ti; util: c (BERT's 89 %); count: c"),
    ModelProfile("llama2_7b_inf", "inference", "bert_inf", 20000, 0.89, 0.3, (("A100", 1.964),),
                 "T: 1964 ms; util: c (BERT's 89 %); count: c"),
    ModelProfile("yolov6m_inf", "inference", "resnet50_inf", 300, 0.89, 0.6, (("A100", 8.0e-3),), "c"),
    ModelProfile("gptneo_inf", "inference", "bert_inf", 20000, 0.89, 0.3, (("A100", 1.0),), "c"),
    ModelProfile("sd_inf", "inference", "resnet50_inf", 20000, 0.89, 0.5, (("A100", 1.5),), "c"),
    ModelProfile("resnet50_train", "training", "resnet50_train", 946, 0.995, 0.665,
                 (("H100", 1 / 26.89), ("A100", 0.088)), "H: solo; T: util 99.5 %; O; A100: PAL 0.1754 s / 2 (c)"),
    ModelProfile("gpt2_train", "training", "bert_train", 2400, 0.89, 0.5, (("H100", 1 / 23.55),),
                 "H: solo; T: util 89 % (GPT-2); count: c"),
    ModelProfile("bert_train", "training", "bert_train", 4777, 0.98, 0.5, (("A100", 0.09),),
                 "T: util 98 %; time: PAL 0.179 s / 2 (c)"),
    ModelProfile("whisper_train", "training", "bert_train", 4000, 0.5, 0.5, (("A100", 0.3),), "T: util 50 %; c"),
    ModelProfile("pegasus_train", "training", "bert_train", 6000, 0.9, 0.5, (("A100", 0.25),), "T: util 90 %; c"),
    ModelProfile("pointnet_train", "training", "resnet50_train", 600, 0.93, 0.665, (("A100", 0.14),),
                 "T: util 93 %; time: PAL 0.281 s / 2 (c)"),
    ModelProfile("gpt2_large_train", "training", "bert_train", 9000, 0.89, 0.5, (("A100", 0.45),),
                 "T: util 89 %; time, count: c"),
)}

LOW_KNOT = 0.1  # choice: shortest kernel = median / 10
# SM demand = min(1, (duration / T_FULL_S) ** SM_EXP): choice of form; T_FULL_S, SM_EXP fitted once
# (grid search) so that ResNet-18 on a 2080 Ti capped at n of 68 SMs follows DEVICE.md's SGPRS speed
# curve (0.08 / 0.53 / 0.70 / 0.95 of full speed at 2 / 20 / 34 / 60 SMs; fit: 0.06 / 0.57 / 0.82 /
# 0.99; checked in tests/device/test_profiles.py).
# On another GPU a kernel's demand follows its duration in 2080 Ti-equivalent time (× speed ratio;
# choice: the same work fills the GPU whatever its speed).
T_FULL_S = 120e-6
FIT_GPU = "RTX2080Ti"
SM_EXP = 1.0
# A kernel's thread blocks last min(duration, BLOCK_CAP_S) (a one-wave kernel: its duration). Fitted
# (grid 25/35/40/45/50/70 µs) on run 1 of data/calibration/colocation-h100, mps_priority cells only
# (the CSV's mps_prio), HP mean latency ratio (shared ÷ alone), seed 0, 10 s: mean |log error| 0.415
# at 40 µs; run 2 and the other mechanisms are held out (docs/REPRODUCTIONS.md). Before: 100 µs (choice).
BLOCK_CAP_S = 40e-6


def profile(name: str) -> ModelProfile:
    """A model by name."""
    if name not in PROFILES:
        raise ValueError(f"model must be one of {sorted(PROFILES)}, got {name!r}")
    return PROFILES[name]


def standalone_time(p: ModelProfile, gpu: DeviceGpu) -> float:
    """Time per request / iteration alone on ``gpu``: measured, else scaled from the first measurement."""
    known = dict(p.standalone_s)
    if gpu.name in known:
        return known[gpu.name]
    ref, t = p.standalone_s[0]
    return t * kernel_time_scale(device_gpu(ref), gpu, 1.0 - p.compute_frac)


def _durations(shape: Shape, n: int, rng: np.random.Generator) -> np.ndarray:
    """Kernel durations (µs) whose median, p90 and mean follow ``shape`` (piecewise log-uniform)."""
    lo, med, p90 = shape.median_us * LOW_KNOT, shape.median_us, shape.p90_us
    target = shape.busy_ms * 1e3 / shape.n_kernels

    def seg_mean(a: float, b: float) -> float:
        return (b - a) / np.log(b / a) if b > a * (1 + 1e-9) else a

    base = 0.5 * seg_mean(lo, med) + 0.4 * seg_mean(med, p90)
    top_lo, top_hi = p90, p90 * 1e3
    for _ in range(60):  # bisection on the longest kernel so the mean matches
        mid = (top_lo + top_hi) / 2
        top_lo, top_hi = (mid, top_hi) if base + 0.1 * seg_mean(p90, mid) < target else (top_lo, mid)
    knots_u = np.array([0.0, 0.5, 0.9, 1.0])
    knots = np.log([lo, med, p90, max(top_hi, p90 * 1.0001)])
    return np.exp(np.interp(rng.random(n), knots_u, knots))


@functools.lru_cache(maxsize=256)
def kernel_sequence(name: str, gpu_type: str, entropy: int) -> KernelSeq:
    """Every kernel of one request / iteration of ``name`` on ``gpu_type`` (shapes from ``entropy``)."""
    p, gpu = profile(name), device_gpu(gpu_type)
    rng = np.random.default_rng(np.random.SeedSequence([entropy, _stable_id(name)]))
    total = standalone_time(p, gpu)
    dur = _durations(SHAPES[p.shape], p.n_kernels, rng)
    dur = dur * (total * p.util_for(gpu.name) / dur.sum())
    m = 1.0 - p.compute_frac
    mem = rng.beta(2.0 * m + 0.1, 2.0 * (1.0 - m) + 0.1, size=len(dur))
    sm = np.minimum(1.0, (dur * gpu.speed / device_gpu(FIT_GPU).speed / T_FULL_S) ** SM_EXP)
    block = np.minimum(dur, BLOCK_CAP_S)
    issue = _issue_times(dur, total)
    return KernelSeq(dur, sm, mem, block, issue)


def _stable_id(name: str) -> int:
    return int.from_bytes(name.encode()[:8].ljust(8, b"\0"), "little")


def _issue_times(dur: np.ndarray, total: float) -> np.ndarray:
    """Host launch times i·h, with the interval h chosen so the sequence alone lasts ``total``."""
    idx = np.arange(len(dur), dtype=float)
    if dur.sum() >= total * (1 - 1e-9):
        return np.zeros(len(dur))
    lo, hi = 0.0, total / max(1, len(dur) - 1)
    for _ in range(40):
        h = (lo + hi) / 2
        lo, hi = (h, hi) if standalone_ends(dur, idx * h)[-1] < total else (lo, h)
    return idx * lo
