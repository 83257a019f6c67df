"""Model and GPU catalogues: the per-model and per-device constants the simulator uses.

Every figure names its source: CALIBRATION.md (the papers), ``data/...`` (a file of the shared data
folder; the derived number is embedded here so a fresh clone runs without it), or "choice" (a
documented modelling choice, not a measurement).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from gpusched_env.fitted import GPU_POWER_W


@dataclass(frozen=True)
class GpuSpec:
    """One GPU type.

    speed: throughput relative to a V100 (iteration time = V100 time / speed).
    idle_w / busy_w: average board power when idle and at full utilisation.
    """

    name: str
    speed: float
    mem_gb: float
    idle_w: float
    busy_w: float
    tdp_w: float
    sms: int
    source: str


# Power of V100, P100, A40, RTX6000: data/calibration/power-zeus (fitted.GPU_POWER_W): busy_w = highest
# average power measured at the highest power limit; idle_w = lowest average power of any run (an
# input-bound job that leaves the GPU near idle).
# P100 speed 1/1.313 and K80 1/4.791: median V100/P100 and V100/K80 throughput ratio over the job
# types of data/calibration/throughput/gavel_simulation_throughputs.json (83 and 80 types).
GPUS: dict[str, GpuSpec] = {
    "V100": GpuSpec("V100", 1.0, 32.0, *GPU_POWER_W["V100"], 300.0, 80, "power-zeus v100; CALIBRATION.md datasheet"),
    "P100": GpuSpec("P100", 1 / 1.313, 16.0, *GPU_POWER_W["P100"], 250.0, 56, "power-zeus p100; gavel ratio"),
    "K80": GpuSpec("K80", 1 / 4.791, 12.0, 25.0, 149.0, 150.0, 13, "gavel ratio; power: choice (datasheet TDP)"),
    "A40": GpuSpec("A40", 1.3, 48.0, *GPU_POWER_W["A40"], 300.0, 84, "power-zeus a40; speed: choice"),
    "RTX6000": GpuSpec("RTX6000", 1.0, 24.0, *GPU_POWER_W["RTX6000"], 260.0, 72, "power-zeus rtx6000; speed: choice"),
    "A100": GpuSpec("A100", 2.0, 40.0, 50.0, 400.0, 400.0, 108, "CALIBRATION.md datasheet; speed, idle: choice"),
    "H100": GpuSpec("H100", 3.0, 80.0, 70.0, 700.0, 700.0, 132, "CALIBRATION.md datasheet; speed, idle: choice"),
    # Alibaba openb node types (openb_node_list_gpu_node.csv); no speed data: choices.
    "T4": GpuSpec("T4", 0.5, 16.0, 10.0, 70.0, 70.0, 40, "choice (datasheet TDP 70 W)"),
    "A10": GpuSpec("A10", 1.0, 24.0, 20.0, 150.0, 150.0, 72, "choice (datasheet TDP 150 W)"),
    "G2": GpuSpec("G2", 1.0, 32.0, *GPU_POWER_W["V100"], 300.0, 80, "choice: unnamed openb type, taken as V100"),
    "G3": GpuSpec("G3", 1.0, 32.0, *GPU_POWER_W["V100"], 300.0, 80, "choice: unnamed openb type, taken as V100"),
    "V100M16": GpuSpec("V100M16", 1.0, 16.0, *GPU_POWER_W["V100"], 300.0, 80, "as V100, 16 GB"),
    "V100M32": GpuSpec("V100M32", 1.0, 32.0, *GPU_POWER_W["V100"], 300.0, 80, "as V100, 32 GB"),
}


@dataclass(frozen=True)
class ModelSpec:
    """One DNN training job type.

    base_iter_s: iteration time on one V100 (multi-GPU data parallel: per-GPU batch fixed).
    util: GPU utilisation when running alone, in (0, 1] (power, co-location and MPS share model).
    mem_gb: GPU memory per GPU. params_m: parameters in millions (gradient bytes = 4 x params for
    the bandwidth model). gavel: job type in the Gavel throughput file, for co-location pairs.
    """

    name: str
    perf_class: str
    base_iter_s: float
    util: float
    mem_gb: float
    params_m: float
    gavel: str | None
    source: str


# PAL base iteration times and classes: CALIBRATION.md (PAL). util for resnet50 and BERT from
# power-zeus v100 at 250 W (221.6 W and 225.9 W -> (P - idle)/(busy - idle) = 0.96, 0.99); other
# PAL models: choice 0.9. EaCO models' util: EaCO exclusive-run table (average GPU utilisation).
# Parameter counts: the models' published sizes (choice for GPT2: the 124M "small" variant).
# mem_gb: choice (typical footprints at the papers' batch sizes), bounded by 16 GB.
MODELS: dict[str, ModelSpec] = {
    "resnet50": ModelSpec("resnet50", "A", 0.1754, 0.96, 10.0, 25.6, "ResNet-50 (batch size 64)", "PAL"),
    "vgg19": ModelSpec("vgg19", "C", 0.3006, 0.9, 12.0, 143.7, None, "PAL"),
    "dcgan": ModelSpec("dcgan", "B", 0.0469, 0.9, 4.0, 3.6, None, "PAL"),
    "bert": ModelSpec("bert", "B", 0.179, 0.99, 12.0, 110.0, None, "PAL"),
    "gpt2": ModelSpec("gpt2", "B", 3.5714, 0.9, 14.0, 124.0, None, "PAL"),
    "pointnet": ModelSpec("pointnet", "D", 0.28125, 0.9, 4.0, 3.5, None, "PAL"),
    # EaCO's four ImageNet models. Iteration time: choice 0.2 s per iteration (the paper gives whole-
    # run JCTs, not iteration times); classes per PAL's rule (ResNet -> A, VGG -> C, others -> A).
    "alexnet": ModelSpec("alexnet", "A", 0.2, 0.047, 4.0, 61.1, None, "EaCO"),
    "resnet18": ModelSpec("resnet18", "A", 0.2, 0.112, 6.0, 11.7, "ResNet-18 (batch size 64)", "EaCO"),
    "resnet50_imagenet": ModelSpec(
        "resnet50_imagenet", "A", 0.2, 0.366, 10.0, 25.6, "ResNet-50 (batch size 64)", "EaCO"
    ),
    "vgg16": ModelSpec("vgg16", "C", 0.2, 0.48, 12.0, 138.4, None, "EaCO"),
    # Gavel job types (CIFAR/Wikitext/etc.): iteration time = 1 / V100 steps/s alone in the Gavel file.
    "transformer": ModelSpec("transformer", "B", 1 / 8.618, 0.9, 8.0, 65.0, "Transformer (batch size 64)", "Gavel"),
    "lm": ModelSpec("lm", "B", 1 / 64.742, 0.9, 6.0, 33.0, "LM (batch size 20)", "Gavel"),
    "recommendation": ModelSpec(
        "recommendation", "A", 1 / 7.470, 0.6, 4.0, 20.0, "Recommendation (batch size 2048)", "Gavel"
    ),
    "cyclegan": ModelSpec("cyclegan", "B", 1 / 4.426, 0.9, 8.0, 28.3, "CycleGAN", "Gavel"),
    "a3c": ModelSpec("a3c", "A", 1 / 7.176, 0.4, 2.0, 1.0, "A3C", "Gavel"),
}

# PAL's model -> class rule (CALIBRATION.md): ResNet-50 -> A; GPT2, DCGAN, BERT -> B; VGG19 -> C;
# PointNet -> D; others -> A. Trace spellings map to catalogue names here.
ALIASES: dict[str, str] = {
    "resnet50": "resnet50", "resnet-50": "resnet50", "vgg19": "vgg19", "dcgan": "dcgan", "bert": "bert",
    "gpt2": "gpt2", "pointnet": "pointnet", "alexnet": "alexnet", "resnet18": "resnet18",
    "resnet-18": "resnet18", "vgg16": "vgg16", "vgg-16": "vgg16",
}


def model_spec(name: str) -> ModelSpec:
    """Look a model up by catalogue name or trace spelling (case-insensitive)."""
    key = ALIASES.get(name.lower(), name.lower())
    try:
        return MODELS[key]
    except KeyError:
        raise KeyError(f"unknown model {name!r}; known: {sorted(MODELS)}") from None


@functools.cache
def find_model(name: str) -> ModelSpec | None:
    """:func:`model_spec`, or None for a model the catalogue does not know (cached)."""
    try:
        return model_spec(name)
    except KeyError:
        return None


def gpu_spec(name: str) -> GpuSpec:
    try:
        return GPUS[name]
    except KeyError:
        raise KeyError(f"unknown GPU type {name!r}; known: {sorted(GPUS)}") from None


def base_iter_s(model: str) -> float:
    """Base (single-V100) iteration time of ``model`` from the catalogue; 1.0 s when unknown."""
    spec = find_model(model)
    return spec.base_iter_s if spec is not None else 1.0


EACO_COLO_SLOWDOWN: tuple[float, ...] = (1.0, 1.03, 1.078, 1.19)
"""EaCO's measured co-location slowdown by number of jobs on a GPU (index k-1): 3 % for 2, 7.8 % for
3, 19 % for 4 (CALIBRATION.md, EaCO; choice: the ends of its 3-7.8 % range for 2 and 3 jobs). The
one copy: the device model's time-slicing formula and the eaco policy's prior both read it."""
