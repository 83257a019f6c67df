"""One side of a ``gpusched-real pairs`` cell: an inference service (hp) or a training job (be).

Run as ``python -m gpusched.real.pairs_worker SPEC.json``; placement comes from the environment as for
:mod:`gpusched.real.worker` (``GPUSCHED_CPU_CORES``, ``GPUSCHED_NUM_THREADS``, ``GPUSCHED_NICE``,
``GPUSCHED_TORCH_DEVICE``; CUDA and MPS read their own variables). Protocol with the orchestrator
(:mod:`gpusched.real.pairs`), through JSON lines appended to ``spec.progress``:

1. warm up for ``warmup_s`` (hp: back-to-back requests; be: training iterations);
2. hp without ``solo_ms`` (the standalone run): ``calib_s`` more back-to-back requests; their mean
   service time is ``solo_ms``;
3. write ``{"ev": "ready", "solo_ms": ...}``, then wait for the file ``spec.go`` (a shared start
   time ``t0``, wall clock); be keeps training meanwhile;
4. hp: requests arrive as a Poisson process from ``t0`` at ``load / solo_ms`` for ``duration_s``;
   they are served one at a time in arrival order; latency = arrival -> completion (queueing
   included). Arrivals still queued ``drain_s`` after the window are counted as ``dropped``.
   Writes ``{"ev": "result", ...}`` and exits.
   be: iterations/s = k / (c_k - c_0), where c_0 is the last iteration completion before ``t0``
   and c_1..c_k the completions up to ``t0 + duration_s`` (at least one, so an iteration longer
   than the window still gives a rate); writes the result and keeps training (the partner is still
   being measured) until SIGTERM.

SIGTERM stops either at once (exit 0); SIGINT is ignored (the orchestrator decides); a worker
whose parent has gone, or that outlives ``max_wall_s``, exits by itself.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpusched.real.worker import JsonSpec, exit_now, spec_entry

EXIT_GONE = 4  # parent gone or max_wall_s passed


@dataclass
class PairSpec(JsonSpec):
    """What one pair worker runs (written by the orchestrator as JSON)."""

    role: str  # "hp" | "be"
    model: str
    scale: str  # "full" | "cpu" (gpusched.real.pairs_nets.SCALES)
    seed: int
    warmup_s: float
    duration_s: float
    progress: str
    go: str
    load: float = 0.5
    solo_ms: float | None = None
    calib_s: float = 2.0
    drain_s: float = 10.0
    max_wall_s: float = 3600.0


class _Stop:
    flag = False


def percentile(xs: list[float], q: float) -> float:
    """Linear-interpolation percentile (numpy's default) of a non-empty list."""
    s = sorted(xs)
    pos = (len(s) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def latency_stats(lat_ms: list[float]) -> dict[str, float]:
    return {"mean_ms": sum(lat_ms) / len(lat_ms), "p50_ms": percentile(lat_ms, 50), "p99_ms": percentile(lat_ms, 99)}


def run(spec: PairSpec) -> int:
    from gpusched.real.worker import _apply_placement

    threads = _apply_placement()
    import torch

    from gpusched.real.pairs_nets import make_step

    t_start = time.time()
    ppid = os.getppid()
    if threads > 0:
        torch.set_num_threads(threads)
    dev_name = os.environ.get("GPUSCHED_TORCH_DEVICE", "cpu")
    if dev_name == "cuda" and not torch.cuda.is_available():
        if os.environ.get("GPUSCHED_CPU_FALLBACK") != "1":
            raise RuntimeError("GPUSCHED_TORCH_DEVICE=cuda but torch sees no CUDA device")
        dev_name = "cpu"
    dev = torch.device(dev_name)
    if dev.type == "cuda":  # as measured: TF32 on, cudnn.benchmark on, eager mode
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        torch.backends.cudnn.benchmark = True

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize()

    step = make_step(spec.model, spec.scale, dev, spec.seed)
    out = open(spec.progress, "a", buffering=1)

    def emit(ev: str, **kw: Any) -> None:
        out.write(json.dumps({"ev": ev, "role": spec.role, "t": time.time(), **kw}) + "\n")

    def alive() -> bool:
        return not _Stop.flag and os.getppid() == ppid and time.time() - t_start < spec.max_wall_s

    def timed() -> float:
        t = time.perf_counter()
        step()
        sync()
        return time.perf_counter() - t

    t_end = time.perf_counter() + spec.warmup_s
    n = 0
    while (n < 3 or time.perf_counter() < t_end) and alive():
        timed()
        n += 1
    solo_ms = spec.solo_ms
    if spec.role == "hp" and solo_ms is None:
        ts: list[float] = []
        t_end = time.perf_counter() + spec.calib_s
        while (len(ts) < 5 or time.perf_counter() < t_end) and alive():
            ts.append(timed())
        solo_ms = 1000.0 * sum(ts) / max(len(ts), 1)
    emit("ready", pid=os.getpid(), threads=torch.get_num_threads(), device=str(dev), solo_ms=solo_ms)

    go = Path(spec.go)
    while not go.exists() and alive():
        if spec.role == "be":
            timed()
        else:
            time.sleep(0.002)
    if not alive():
        return 0 if _Stop.flag else EXIT_GONE
    t0 = float(json.loads(go.read_text())["t0"])
    t1 = t0 + spec.duration_s

    if spec.role == "hp":
        assert solo_ms is not None and solo_ms > 0
        rate = spec.load / (solo_ms / 1000.0)
        rng = random.Random(spec.seed)
        arrivals = []
        a = t0 + rng.expovariate(rate)
        while a < t1:
            arrivals.append(a)
            a += rng.expovariate(rate)
        lat: list[float] = []
        drain_end = t1 + spec.drain_s
        for a in arrivals:
            now = time.time()
            if now < a:
                time.sleep(a - now)
            elif now > drain_end or not alive():
                break
            step()
            sync()
            lat.append(1000.0 * (time.time() - a))
        if not alive() and len(lat) < len(arrivals):
            return 0 if _Stop.flag else EXIT_GONE
        stats = latency_stats(lat) if lat else {"mean_ms": float("nan"), "p50_ms": float("nan"), "p99_ms": float("nan")}
        emit("result", requests=len(lat), dropped=len(arrivals) - len(lat), solo_ms=solo_ms, rate_hz=rate, **stats)
        out.close()
        return 0

    start = time.time()  # the last completion before t0: the start of the iteration spanning t0
    while alive():
        timed()
        now = time.time()
        if now >= t0:
            break
        start = now
    k, last = 1, now
    while alive() and last <= t1:
        timed()
        now = time.time()
        if now > t1:
            break
        k, last = k + 1, now
    if not alive():
        return 0 if _Stop.flag else EXIT_GONE
    emit("result", iters=k, window_s=last - start, iter_per_s=k / (last - start))
    while alive():  # keep the partner's conditions until the orchestrator stops us
        timed()
    out.close()
    return 0 if _Stop.flag else EXIT_GONE


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, lambda s, f: setattr(_Stop, "flag", True))
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    return spec_entry(argv, "gpusched.real.pairs_worker", PairSpec, run)


if __name__ == "__main__":
    exit_now(main())
