"""The real jobs' model catalogue: small PyTorch models trained on synthetic tensors.

No downloads, no torchvision. Three architectures (``ARCHS``): a ResNet-style CNN, a transformer
encoder and an MLP. The real backend runs a simulator catalogue model (e.g. ``resnet50``) as one of
them, sized by :class:`ModelSize` from config (``models.*`` in conf/real/config.yaml): the stand-in
for that model on these devices, as CPU cores stand in for GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass

ARCHS: tuple[str, ...] = ("cnn", "encoder", "mlp")


@dataclass(frozen=True)
class ModelSize:
    """A real model: ``arch`` in :data:`ARCHS`; ``width``: channels / d_model / hidden units;
    ``depth``: blocks or layers; ``batch``: batch size; ``input``: image side (cnn), sequence length
    (encoder) or feature count (mlp)."""

    arch: str = "mlp"
    width: int = 32
    depth: int = 2
    batch: int = 16
    input: int = 32
    perf_class: str | None = None  # PAL class; None = the catalogue model's class

    def __post_init__(self) -> None:
        if self.arch not in ARCHS:
            raise ValueError(f"arch must be one of {ARCHS}, got {self.arch!r}")
        for k in ("width", "depth", "batch", "input"):
            if getattr(self, k) < 1:
                raise ValueError(f"{k} must be >= 1, got {getattr(self, k)}")
