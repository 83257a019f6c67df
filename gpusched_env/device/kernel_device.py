"""The kernel-level model behind the cluster level's :class:`~gpusched_env.device.seam.DeviceModel` seam.

Every tenant is a closed-loop training job (one iteration = its kernel sequence). Its slowdown is its
iteration rate alone ÷ its rate beside the others, under the sharing its ``Sharing`` names:
``time_slicing`` / ``exclusive`` → time_slicing; ``mps`` → MPS with its ``sm_pct`` cap;
``mps_priority`` → MPS with client priority (and its cap). Outcomes are cached per (GPU type, tenant set).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import replace

from gpusched_env.device.engine import simulate
from gpusched_env.device.gpus import DEVICE_GPUS, device_gpu
from gpusched_env.device.mechanism import ClientSpec
from gpusched_env.device.mechanisms import make_mechanism
from gpusched_env.device.pairs import sequence
from gpusched_env.device.seam import DeviceOutcome, Tenant, TenantOutcome
from gpusched_env.vocabulary import MPS, MPS_PRIORITY, TIME_SLICING

# catalogue model -> device profile. choice: models without a kernel profile take the nearest
# (CNNs -> resnet50_train, sequence models -> bert_train).
MODEL_MAP = {"resnet50": "resnet50_train", "resnet50_imagenet": "resnet50_train", "bert": "bert_train",
             "gpt2": "gpt2_train", "pointnet": "pointnet_train", "vgg19": "resnet50_train",
             "vgg16": "resnet50_train", "resnet18": "resnet50_train", "alexnet": "resnet50_train",
             "dcgan": "resnet50_train", "cyclegan": "resnet50_train", "transformer": "bert_train",
             "lm": "bert_train", "recommendation": "bert_train", "a3c": "resnet50_train"}
GPU_FALLBACK = "V100"  # choice: catalogue GPU types without a device entry are modelled as a V100


class KernelDevice:
    """:class:`DeviceModel` from the kernel-group engine (``seed`` fixes the kernel shapes)."""

    def __init__(self, seed: int = 0, iterations: int = 30, groups: float = 10.0) -> None:
        if iterations < 1:
            raise ValueError(f"iterations must be in [1, inf), got {iterations}")
        self.seed, self.iterations, self.groups = seed, iterations, groups
        self._cached = functools.lru_cache(maxsize=4096)(self._compute)

    def share(self, gpu_type: str, tenants: Sequence[Tenant]) -> DeviceOutcome:
        if not tenants:
            raise ValueError("tenants must hold at least one tenant")
        return self._cached(gpu_type, tuple(tenants))

    def _compute(self, gpu_type: str, tenants: tuple[Tenant, ...]) -> DeviceOutcome:
        gpu = device_gpu(gpu_type if gpu_type in DEVICE_GPUS else GPU_FALLBACK)
        specs = [self._client(gpu.name, i, t) for i, t in enumerate(tenants)]
        horizon = self.iterations * max(c.seq.standalone_s() for c in specs)
        alone = [simulate(gpu, [replace(c, sm_cap=1.0)], make_mechanism("exclusive"), horizon) for c in specs]
        if len(specs) == 1 and not tenants[0].sharing.is_mps:
            return DeviceOutcome((TenantOutcome(1.0),), alone[0].busy_s / horizon)
        kinds = {t.sharing.kind for t in tenants}
        mech = MPS_PRIORITY if MPS_PRIORITY in kinds else MPS if kinds <= {MPS} else TIME_SLICING
        shared = simulate(gpu, specs, make_mechanism(mech), horizon)
        out = tuple(TenantOutcome(_slowdown(a.clients[0].kernels, c.kernels))
                    for a, c in zip(alone, shared.clients, strict=True))
        return DeviceOutcome(out, min(1.0, shared.busy_s / horizon))

    def _client(self, gpu: str, i: int, t: Tenant) -> ClientSpec:
        name = MODEL_MAP.get(t.model, t.model)
        seq = sequence(name, gpu, self.seed, self.groups, 1.0)
        cap = t.sharing.sm_share if t.sharing.is_mps else 1.0
        return ClientSpec(f"{i}:{name}", "be", seq, None, priority=t.sharing.priority, sm_cap=cap)


def _slowdown(kernels_alone: int, kernels_shared: int) -> float:
    """Progress alone ÷ progress shared, counted in kernel groups (the same sequence in both runs)."""
    return float("inf") if kernels_shared <= 0 else kernels_alone / kernels_shared
