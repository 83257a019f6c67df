"""The pipeline model of one iteration: stages, links, communication mode, memory, overhead.

A :class:`PipelineModel` is everything the executor needs besides the operation order: the job
(:class:`~gpusched_env.pipeline.spec.PipelineSpec`), the extra delay of every link between
neighbouring stages, per-stage GPU slowdowns, how sends are driven, the in-flight activation
limit and the per-iteration overhead. Bad input raises ``ValueError`` naming the field.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from gpusched_env.pipeline.spec import PipelineSpec

COMM_MODES: tuple[str, ...] = ("gpu", "cpu")
"""``gpu``: GPU-driven (NCCL) sends occupy the sender's stream until delivered.
``cpu``: CPU-delegated sends go through host memory; only the receiver waits (CALIBRATION.md, Adaptra)."""


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
        p2p_ms: base transfer time of one send on a healthy link, >= 0.
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
