"""Exclusive: the GPU serves a single client, alone (the standalone reference every ratio divides by)."""

from __future__ import annotations

from collections.abc import Sequence

from gpusched_env.device.gpus import DeviceGpu
from gpusched_env.device.mechanism import BaseMechanism, ClientSpec


class Exclusive(BaseMechanism):
    """One client holds the whole GPU; asking it to share is an error."""

    name = "exclusive"

    def reset(self, clients: Sequence[ClientSpec], gpu: DeviceGpu) -> None:
        if len(clients) != 1:
            raise ValueError(f"exclusive takes exactly 1 client, got {len(clients)}")
        super().reset(clients, gpu)
