"""Kernel sequences: what one inference request or one training iteration launches, in order.

A kernel (or a group of consecutive short kernels) has a duration alone, an SM demand in (0, 1] (the
share of the SMs its blocks fill), a memory intensity in [0, 1] (the share of its time bound by memory
bandwidth) and a block duration (how long one of its thread blocks runs: the granularity at which it
frees SMs). ``issue_s`` is when the host launches it, counted from the start of the sequence; the
GPU starts it at the later of that and the previous kernel's end (one stream, in order).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class KernelSeq:
    """Parallel arrays, one entry per kernel (group)."""

    dur_s: np.ndarray  # duration alone, seconds (> 0)
    sm: np.ndarray  # SM demand, in (0, 1]
    mem: np.ndarray  # memory intensity, in [0, 1]
    block_s: np.ndarray  # block duration, seconds, in (0, dur]
    issue_s: np.ndarray  # host launch time from the sequence start, non-decreasing, >= 0
    count: np.ndarray = field(default_factory=lambda: np.empty(0))  # kernels in the group (empty: 1 each)
    busy: np.ndarray = field(default_factory=lambda: np.empty(0))  # share of the span its kernels run, (0, 1] (empty: 1)
    # per group, its member kernels' (durations, SM demands) (empty: each entry is one kernel, or not known)
    members: tuple[tuple[np.ndarray, np.ndarray], ...] = ()

    def __post_init__(self) -> None:
        n = len(self.dur_s)
        if n == 0:
            raise ValueError("kernel sequence must hold at least one kernel")
        if len(self.count) == 0:
            object.__setattr__(self, "count", np.ones(n))
        if len(self.busy) == 0:
            object.__setattr__(self, "busy", np.ones(n))
        for name in ("sm", "mem", "block_s", "issue_s", "count", "busy"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"kernel {name} must have one entry per kernel ({n})")
        if self.members and len(self.members) != n:
            raise ValueError(f"kernel members must be empty or have one entry per kernel group ({n})")
        _check(self.dur_s > 0, "dur_s", "(0, inf) seconds", self.dur_s)
        _check((self.sm > 0) & (self.sm <= 1), "sm", "(0, 1]", self.sm)
        _check((self.mem >= 0) & (self.mem <= 1), "mem", "[0, 1]", self.mem)
        _check((self.block_s > 0) & (self.block_s <= self.dur_s * (1 + 1e-9)), "block_s", "(0, dur_s]", self.block_s)
        _check(self.count >= 1, "count", "[1, inf)", self.count)
        _check((self.busy > 0) & (self.busy <= 1 + 1e-9), "busy", "(0, 1]", self.busy)
        _check((self.issue_s >= 0) & (np.diff(self.issue_s, prepend=0.0) >= -1e-15), "issue_s",
               "[0, inf), non-decreasing", self.issue_s)

    def __len__(self) -> int:
        return len(self.dur_s)

    @property
    def busy_s(self) -> float:
        """GPU time of the whole sequence alone."""
        return float(self.dur_s.sum())

    def standalone_s(self) -> float:
        """Time from the sequence start to its last kernel's end, alone on the GPU."""
        return float(standalone_ends(self.dur_s, self.issue_s)[-1])


def _check(ok: np.ndarray, field: str, allowed: str, values: np.ndarray) -> None:
    if not bool(np.all(ok)):
        bad = values[~ok][0]
        raise ValueError(f"kernel {field} must be in {allowed}, got {bad!r}")


def standalone_ends(dur: np.ndarray, issue: np.ndarray) -> np.ndarray:
    """End time of each kernel when the sequence runs alone (start = max(issue, previous end)).

    end_i = C_i + max_{j <= i} (issue_j - C_{j-1}), C the cumulative durations (C_{-1} = 0).
    """
    c = np.cumsum(dur)
    prev = np.concatenate(([0.0], c[:-1]))
    return c + np.maximum.accumulate(issue - prev)


def group(seq: KernelSeq, min_group_s: float, bound_s: float) -> KernelSeq:
    """Merge consecutive kernels until a group's span alone reaches ``min_group_s``.

    A kernel longer than ``bound_s`` stays a group of its own (never merged across). A group lasts its
    span alone (first start to last end, host gaps inside included); its SM demand is the members'
    SM-time over that span, its memory intensity their time-weighted mean, its block the longest
    member block, its ``count`` the members' kernel count, its ``busy`` their summed time over the span,
    its ``members`` their durations and SM demands, and it is issued when its first member is.
    """
    if min_group_s < 0 or bound_s <= 0:
        raise ValueError(f"grouping min_group_s must be >= 0 and bound_s > 0, got {min_group_s}, {bound_s}")
    ends = standalone_ends(seq.dur_s, seq.issue_s)
    starts = ends - seq.dur_s
    cuts = _group_cuts(starts, ends, seq.dur_s, min_group_s, bound_s)
    out: dict[str, list[float]] = {k: [] for k in ("dur", "sm", "mem", "block", "issue", "count", "busy")}
    parts = seq.members or tuple((seq.dur_s[i:i + 1], seq.sm[i:i + 1]) for i in range(len(seq)))
    members = []
    for a, b in zip(cuts[:-1], cuts[1:], strict=True):
        members.append((np.concatenate([p[0] for p in parts[a:b]]), np.concatenate([p[1] for p in parts[a:b]])))
        d = seq.dur_s[a:b]
        span = float(ends[b - 1] - starts[a])
        out["dur"].append(span)
        out["sm"].append(min(1.0, float((d * seq.sm[a:b]).sum()) / span))
        out["mem"].append(float((d * seq.mem[a:b]).sum() / d.sum()))
        out["block"].append(min(span, float(seq.block_s[a:b].max())))
        out["issue"].append(float(seq.issue_s[a]))
        out["count"].append(float(seq.count[a:b].sum()))
        out["busy"].append(min(1.0, float((d * seq.busy[a:b]).sum()) / span))
    arr = {k: np.array(v) for k, v in out.items()}
    return KernelSeq(arr["dur"], arr["sm"], arr["mem"], arr["block"], arr["issue"], arr["count"], arr["busy"],
                     tuple(members))


def _group_cuts(starts: np.ndarray, ends: np.ndarray, dur: np.ndarray, min_s: float, bound_s: float) -> list[int]:
    cuts = [0]
    first = 0
    for i in range(len(dur)):
        long_next = i + 1 < len(dur) and dur[i + 1] > bound_s
        if dur[i] > bound_s or ends[i] - starts[first] >= min_s or long_next:
            cuts.append(i + 1)
            first = i + 1
    if cuts[-1] != len(dur):
        cuts.append(len(dur))
    return cuts
