"""The pipeline model of one iteration: stages, links, communication mode, memory, overhead.

A :class:`PipelineModel` is everything the executor needs besides the operation order: the job
(:class:`~gpusched_env.pipeline.spec.PipelineSpec`), the extra delay of every link between
neighbouring stages, per-stage GPU slowdowns, how sends are driven, the in-flight activation
limit and the per-iteration overhead. Bad input raises ``ValueError`` naming the field.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from gpusched_env.pipeline.spec import PipelineSpec

COMM_MODES: tuple[str, ...] = ("gpu", "cpu")
"""``gpu``: GPU-driven (NCCL) sends occupy the sender's stream until delivered; with ``rendezvous``
a send also waits until the receiver posts its receive (NCCL send/recv); with ``peer_streams``
the sends run on per-peer NCCL streams instead and never hold the sender's compute stream.
``cpu``: CPU-delegated sends go through host memory: the sender pays a device-to-host copy, a host
delegate sends, the receiver pays a host-to-device copy; the sender's stream never waits for the
link (CALIBRATION.md, Adaptra)."""


@dataclass(frozen=True, slots=True)
class PipelineModel:
    """One pipeline job under given conditions.

    Attributes:
        spec: stages S, micro-batches M and per-stage F/B/W times (ms).
        link_delay_ms: extra delay per send on link i = (stage i, stage i+1), S-1 values >= 0; the
            same link carries forward activations (i -> i+1) and backward gradients (i+1 -> i).
        slowdown: per-stage factor >= 1 multiplying F/B/W (a slow GPU); S values.
        comm: ``gpu`` or ``cpu`` (see :data:`COMM_MODES`).
        activation_limit: most micro-batches whose activations a stage holds at once (F started,
            W not finished); >= 1.
        overhead_ms: per-iteration time outside the pipeline (optimizer step, comm start-up), >= 0.
        p2p_ms: base latency of one send on a healthy link, >= 0.
        message_bytes: bytes of one activation (forward) or input-gradient (backward) message,
            hidden x sequence x micro-batch x dtype bytes; >= 0 (0: latency only).
        link_gb_s: link bandwidth in GB/s (1e9 bytes/s); inf = no bandwidth term.
        pcie_gb_s: device<->host copy bandwidth of the CPU-delegated path, GB/s; inf = free copies.
        rendezvous: GPU-driven sends wait for the receiver to post its receive (NCCL send/recv); a
            stage blocked in a send has already posted the receive of its next operation (Megatron
            batches a send with the next receive).
        cpu_channels: host delegates per link direction on the CPU path; micro-batch m goes through
            delegate m mod K, each delegate sends one message at a time (delay + transfer); 0 = one
            delegate per message (no queueing).
        injector_group_ranks: reproduce PipeMorph's delay injector under Megatron's batched p2p
            (the schedules with ``Schedule.rendezvous``; GPU-driven sends only): it reads the NCCL peer 0 / 1 as previous / next stage,
            true of the two-rank communicators of single isend/irecv but not of the pipeline
            group's communicator that batched p2p uses, where stage 2's previous stage has rank 1;
            so stage 2's gradient sends pay link 2's delay instead of link 1's
            (PipeMorph@bc31ab09 zerobubble/megatron/core/failslow_injection/failslow_injection.cu).
        peer_streams: GPU-driven sends without rendezvous run on one NCCL stream per neighbour,
            in issue order with that neighbour's receives; a send's delay holds the receives queued
            behind it, never the compute stream (ZeroBubble's isend / irecv;
            :mod:`gpusched_env.pipeline.streams`). False: the sender's compute stream is held for
            the delay and the transfer.
        split_backward: True when W runs as its own operation (ZeroBubble family); False when the
            backward is one kernel (GPipe, 1F1B): B then takes B + W, W takes 0 and the gradient
            is sent after both.
    """

    spec: PipelineSpec
    link_delay_ms: tuple[float, ...] = ()
    slowdown: tuple[float, ...] = ()
    comm: str = "gpu"
    activation_limit: int = 1 << 30
    overhead_ms: float = 0.0
    p2p_ms: float = 0.0
    split_backward: bool = True
    message_bytes: float = 0.0
    link_gb_s: float = math.inf
    pcie_gb_s: float = math.inf
    rendezvous: bool = True
    cpu_channels: int = 0
    injector_group_ranks: bool = False
    peer_streams: bool = False

    def __post_init__(self) -> None:
        s = self.spec.stages
        if not self.link_delay_ms:
            object.__setattr__(self, "link_delay_ms", (0.0,) * (s - 1))
        if not self.slowdown:
            object.__setattr__(self, "slowdown", (1.0,) * s)
        if len(self.link_delay_ms) != s - 1:
            raise ValueError(f"link_delay_ms needs {s - 1} values (links 0..{s - 2}), got {len(self.link_delay_ms)}")
        if any(d < 0 for d in self.link_delay_ms):
            raise ValueError(f"link_delay_ms must be >= 0, got {list(self.link_delay_ms)}")
        if len(self.slowdown) != s:
            raise ValueError(f"slowdown needs {s} values (one per stage), got {len(self.slowdown)}")
        if any(not f >= 1.0 for f in self.slowdown):
            raise ValueError(f"slowdown must be >= 1 (1 = healthy), got {list(self.slowdown)}")
        if self.comm not in COMM_MODES:
            raise ValueError(f"comm must be one of {list(COMM_MODES)}, got {self.comm!r}")
        if self.activation_limit < 1:
            raise ValueError(f"activation_limit must be >= 1, got {self.activation_limit}")
        if self.overhead_ms < 0:
            raise ValueError(f"overhead_ms must be >= 0, got {self.overhead_ms}")
        if self.p2p_ms < 0:
            raise ValueError(f"p2p_ms must be >= 0, got {self.p2p_ms}")
        if not 0 <= self.message_bytes < math.inf:
            raise ValueError(f"message_bytes must be finite and >= 0, got {self.message_bytes}")
        for name in ("link_gb_s", "pcie_gb_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0 (GB/s; inf = no bandwidth term), got {getattr(self, name)}")
        if self.cpu_channels < 0:
            raise ValueError(f"cpu_channels must be >= 0 (0 = no queueing), got {self.cpu_channels}")

    @property
    def transfer_ms(self) -> float:
        """One message's time on a healthy link: latency + bytes / bandwidth (ms)."""
        return self.p2p_ms + self.message_bytes / (self.link_gb_s * 1e6)

    @property
    def copy_ms(self) -> float:
        """One device<->host copy of a message on the CPU path: bytes / PCIe bandwidth (ms)."""
        return self.message_bytes / (self.pcie_gb_s * 1e6)

    @property
    def stages(self) -> int:
        return self.spec.stages

    @property
    def microbatches(self) -> int:
        return self.spec.microbatches

    def durations(self) -> tuple[list[float], list[float], list[float]]:
        """Per-stage F, B, W times (ms) with the slowdowns applied."""
        sp, sl = self.spec, self.slowdown
        f = [x * k for x, k in zip(sp.f_ms, sl, strict=True)]
        b = [x * k for x, k in zip(sp.b_ms, sl, strict=True)]
        w = [x * k for x, k in zip(sp.w_ms, sl, strict=True)]
        if not self.split_backward:
            return f, [x + y for x, y in zip(b, w, strict=True)], [0.0] * len(w)
        return f, b, w

    def with_conditions(
        self, link_delay_ms: tuple[float, ...] | None = None, slowdown: tuple[float, ...] | None = None,
        comm: str | None = None, split_backward: bool | None = None,
    ) -> PipelineModel:
        """The same job under other link delays / slowdowns / comm mode / backward split."""
        return replace(
            self,
            split_backward=self.split_backward if split_backward is None else split_backward,
            link_delay_ms=self.link_delay_ms if link_delay_ms is None else tuple(link_delay_ms),
            slowdown=self.slowdown if slowdown is None else tuple(slowdown),
            comm=self.comm if comm is None else comm,
        )


def link_delays(stages: int, delays: dict[int, float]) -> tuple[float, ...]:
    """A per-link delay tuple from ``{link index: delay ms}``; a link outside 0..S-2 is rejected."""
    out = [0.0] * (stages - 1)
    for link, d in delays.items():
        if not 0 <= link <= stages - 2:
            raise ValueError(f"link index must be in 0..{stages - 2} (link i joins stages i and i+1), got {link}")
        if d < 0:
            raise ValueError(f"link delay must be >= 0 ms, got {d} on link {link}")
        out[link] = float(d)
    return tuple(out)
