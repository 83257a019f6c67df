"""The GPU types the device model knows: SMs, speed, memory bandwidth and power.

speed is relative to a V100 (a kernel's compute-bound part runs ``speed`` times faster), bandwidth in
GB/s scales its memory-bound part. Power: idle + (busy − idle) · utilisation.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpusched_env.catalog import GPUS


@dataclass(frozen=True, slots=True)
class DeviceGpu:
    """One GPU type as the kernel model sees it."""

    name: str
    sms: int  # streaming multiprocessors
    speed: float  # compute speed relative to a V100
    mem_bw_gbs: float  # memory bandwidth, GB/s
    idle_w: float  # board power idle
    busy_w: float  # board power at full utilisation


# SM counts: CALIBRATION.md datasheet facts (80 / 108 / 132) and DEVICE.md (68 SMs on the 2080 Ti).
# speed and power of V100, A100, H100: the project's catalogue (gpusched_env.catalog.GPUS).
# mem_bw_gbs: choice: vendor datasheet figures (V100-SXM2 900, A100-40GB 1555, H100-SXM5 3350,
# 2080 Ti 616 GB/s); not in CALIBRATION.md's list of datasheet facts.
# RTX2080Ti speed: choice 0.8 of a V100 (DEVICE.md: ResNet-50 batch-1 287 fps on it; no V100 twin
# measurement in the data); power: choice, datasheet TDP 250 W busy, 20 W idle.
DEVICE_GPUS: dict[str, DeviceGpu] = {
    "V100": DeviceGpu("V100", 80, GPUS["V100"].speed, 900.0, GPUS["V100"].idle_w, GPUS["V100"].busy_w),
    "A100": DeviceGpu("A100", 108, GPUS["A100"].speed, 1555.0, GPUS["A100"].idle_w, GPUS["A100"].busy_w),
    "H100": DeviceGpu("H100", 132, GPUS["H100"].speed, 3350.0, GPUS["H100"].idle_w, GPUS["H100"].busy_w),
    "RTX2080Ti": DeviceGpu("RTX2080Ti", 68, 0.8, 616.0, 20.0, 250.0),
}
ALIASES = {"A100-40GB": "A100", "H100-80GB": "H100", "RTX 2080 Ti": "RTX2080Ti", "2080Ti": "RTX2080Ti"}


def device_gpu(name: str) -> DeviceGpu:
    """A GPU type by name (aliases such as ``A100-40GB`` accepted)."""
    key = ALIASES.get(name, name)
    if key not in DEVICE_GPUS:
        raise ValueError(f"gpu_type must be one of {sorted(DEVICE_GPUS)} (or {sorted(ALIASES)}), got {name!r}")
    return DEVICE_GPUS[key]


def kernel_time_scale(src: DeviceGpu, dst: DeviceGpu, mem: float) -> float:
    """Factor by which a kernel of memory intensity ``mem`` measured on ``src`` lasts on ``dst``."""
    return (1.0 - mem) * src.speed / dst.speed + mem * src.mem_bw_gbs / dst.mem_bw_gbs
