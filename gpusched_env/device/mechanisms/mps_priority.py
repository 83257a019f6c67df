"""MPS with client priority (``CUDA_MPS_CLIENT_PRIORITY``, R550+; DEVICE.md).

The block scheduler dispatches the higher-priority client's pending blocks first: SMs go to clients
level by level (higher ``priority`` first), caps as under MPS. Running blocks are not preempted, so a
high-priority kernel still waits for the residual of the blocks it displaces.
"""

from __future__ import annotations

from gpusched_env.device.mechanism import BaseMechanism, ClientSpec, Grant


class MpsPriority(BaseMechanism):
    name = "mps_priority"

    def grant(self, client: ClientSpec) -> Grant:
        return Grant(True, client.sm_cap, -client.priority)
