"""MPS (NVIDIA Multi-Process Service; DEVICE.md): kernels of all clients run at once.

SMs are shared block by block: every queued kernel may hold SMs, one level, max-min fair up to each
kernel's demand and its client's ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` cap (``sm_cap``). Memory
bandwidth is shared without isolation (the engine's bandwidth term). Running blocks are never
preempted: a kernel that needs SMs others hold waits half a block of theirs (mean residual; choice).
"""

from __future__ import annotations

from gpusched_env.device.mechanism import BaseMechanism


class Mps(BaseMechanism):
    name = "mps"
