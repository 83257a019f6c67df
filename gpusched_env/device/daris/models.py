"""The DNNs of DARIS's evaluation on an RTX 2080 Ti (DEVICE.md, AmirFB/DARIS) as the stage model sees them.

A model's job at batch 1 on the whole GPU lasts ``1 / fps1`` (isolated throughput); it is split into
``stages`` equal parts (choice: the DARIS code times stages but publishes no split). A part of the
work on n of N SMs lasts ``T_full · (serial + (1 − serial) · N / n)`` (DEVICE.md's SGPRS curve,
T(n) ≈ s + W/n, s ≈ 0.7 · T(full)). A batch of b lasts ``L(b)``, linear in b between the measured
batch-1 and batch-10 latencies (choice: only those two points are published). Concurrent work is not
capped at the batch-10 throughput: the DARIS repository's result summaries record more (ResNet-18,
6 contexts / 1 stream / OS 6: 1,123-1,158 jobs/s vs 1,036 fps at batch 10).
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_BATCH = 10  # DEVICE.md: batching up to 10


@dataclass(frozen=True, slots=True)
class DnnModel:
    """One DNN at batch 1, 224 × 224 (DEVICE.md)."""

    name: str
    stages: int  # DARIS stages (preemption points)
    fps1: float  # isolated throughput at batch 1 (jobs/s)
    fps10: float  # isolated throughput at batch 10 (jobs/s)
    wcet_ms: float  # WCET measured under dummy load (MRET's initial value)
    rate_fps: float  # task rate (period = 1 / rate)
    serial: float = 0.7  # SGPRS curve: share of T(full) that more SMs do not shorten

    def __post_init__(self) -> None:
        if self.stages < 1:
            raise ValueError(f"model {self.name}: stages must be in [1, inf), got {self.stages}")
        if not 0 < self.fps1 <= self.fps10:
            raise ValueError(f"model {self.name}: need 0 < fps1 <= fps10, got {self.fps1}, {self.fps10}")
        if not 0.0 <= self.serial < 1.0:
            raise ValueError(f"model {self.name}: serial must be in [0, 1), got {self.serial}")

    @property
    def job_s(self) -> float:
        """Alone time of one batch-1 job on the whole GPU."""
        return 1.0 / self.fps1

    def batch_s(self, b: int) -> float:
        """Alone time of a batch of ``b`` (1 ≤ b ≤ 10) on the whole GPU."""
        if not 1 <= b <= MAX_BATCH:
            raise ValueError(f"batch must be in [1, {MAX_BATCH}], got {b}")
        l1, l10 = 1.0 / self.fps1, MAX_BATCH / self.fps10
        return l1 + (b - 1) * (l10 - l1) / (MAX_BATCH - 1)


# DEVICE.md (AmirFB/DARIS, RTX 2080 Ti): stages ResNet-18 4 (layer1-4), InceptionV3 13, UNet
# 3 contracting + 3 downsampling + bottleneck + 3 upsampling + 3 expanding + output = 14 (unet.cpp,
# levels = 4); isolated throughput batch 1 -> 10; WCET; rates ResNet 30 fps, UNet and Inception 24 fps.
MODELS: dict[str, DnnModel] = {
    "resnet18": DnnModel("resnet18", 4, 724.0, 1036.0, 1.46, 30.0),
    "unet": DnnModel("unet", 14, 246.0, 260.0, 3.9, 24.0),
    "inception3": DnnModel("inception3", 13, 164.0, 419.0, 7.8, 24.0),
}


def speed(n_sms: float, total_sms: int, serial: float) -> float:
    """Speed (÷ whole-GPU speed) of work holding ``n_sms`` of ``total_sms`` SMs (SGPRS curve)."""
    if n_sms <= 0:
        return 0.0
    return 1.0 / (serial + (1.0 - serial) * total_sms / n_sms)


def context_sms(total_sms: int, n_ctx: int, oversub: float) -> int:
    """SMs of each of ``n_ctx`` contexts: ceil(N · OS / n_ctx), rounded up to even, at most N (DARIS code)."""
    if not 1 <= n_ctx <= total_sms:
        raise ValueError(f"contexts must be in [1, {total_sms}] (one SM each at least), got {n_ctx}")
    if not oversub >= 1.0:
        raise ValueError(f"oversubscription must be in [1, inf), got {oversub}")
    n = -(-total_sms * oversub // n_ctx)
    n = int(n) + int(n) % 2
    return min(total_sms, n)
