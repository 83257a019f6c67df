"""Operations of a pipeline iteration and the per-stage order lists that schedules produce.

An operation is encoded as one int ``kind * M + microbatch`` (kind F = 0, B = 1, W = 2), so an
order is a tuple of ints per stage: cheap to build, hash and compare.
"""

from __future__ import annotations

F, B, W = 0, 1, 2
KIND_NAMES: tuple[str, ...] = ("F", "B", "W")

Orders = tuple[tuple[int, ...], ...]
"""One tuple of encoded operations per stage, in the order the stage runs them."""


def op(kind: int, mb: int, microbatches: int) -> int:
    """The code of operation ``kind`` on micro-batch ``mb``."""
    return kind * microbatches + mb


def decode(code: int, microbatches: int) -> tuple[int, int]:
    """(kind, micro-batch) of an operation code."""
    return divmod(code, microbatches)


def check_orders(orders: Orders, stages: int, microbatches: int) -> None:
    """Raise ``ValueError`` unless every stage runs each F, B, W once, F(m) before B(m) before W(m)."""
    if len(orders) != stages:
        raise ValueError(f"orders needs {stages} stage lists, got {len(orders)}")
    want = set(range(3 * microbatches))
    for s, order in enumerate(orders):
        if len(order) != 3 * microbatches or set(order) != want:
            raise ValueError(f"orders[{s}] must hold each of the {3 * microbatches} operations exactly once")
        pos = {c: i for i, c in enumerate(order)}
        for m in range(microbatches):
            if not pos[op(F, m, microbatches)] < pos[op(B, m, microbatches)] < pos[op(W, m, microbatches)]:
                raise ValueError(f"orders[{s}]: micro-batch {m} must run F before B before W")


