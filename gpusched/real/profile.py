"""PAL-style variability profiling of this machine's devices.

For each catalogue model and each repeat, one short fixed benchmark (``warmup_iters`` then
``iters`` timed iterations of the real worker) runs on every device at once, exclusively (SM share
1). Written to the run folder:

- ``profile_runs.csv``: one row per (device, model, repeat): iter_s, startup_s (spawn to first
  iteration: interpreter, torch import, model build).
- ``profile.csv``: ``gpu,node,A,B,C,D``, per-class slowdown normalised to the median device (1.0 =
  median, > 1 slower), the format ``gpusched_env.cluster.variability.load_profile`` reads. A class with no
  catalogue model gets the device's mean factor over the measured classes.
- ``models.json``: {model: base_iter_s on the median device}; ``profile_meta.json``: settings,
  device names, median start-up time.
"""

from __future__ import annotations

import csv
import io
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from gpusched.real.config import perf_class
from gpusched.real.devices import Devices
from gpusched.real.launcher import NodeAgent
from gpusched.real.models import ModelSize
from gpusched.real.mps import MpsDaemon
from gpusched.real.worker import EXIT_DONE, WorkerSpec
from gpusched_env.atomic import write_atomic, write_json_atomic
from gpusched_env.cluster.variability import load_profile
from gpusched_env.topology import Topology
from gpusched_env.types import PERF_CLASSES


@dataclass(frozen=True)
class ProfileConf:
    """``profile.*``."""

    models: list[str] | None = None
    repeats: int = 3
    warmup_iters: int = 10
    iters: int = 60
    timeout_s: float = 300.0

    def __post_init__(self) -> None:
        if self.repeats < 1 or self.iters < 1 or self.warmup_iters < 0:
            raise ValueError("profile.repeats and profile.iters must be >= 1, profile.warmup_iters >= 0")


@dataclass(frozen=True)
class ProfileResult:
    factors: np.ndarray  # (n_devices, 4)
    base_iter_s: dict[str, float]
    startup_s: float
    run_dir: Path


def run_profile(
    sizes: dict[str, ModelSize], topology: Topology, devices: Devices, agent: NodeAgent, run_dir: Path,
    cfg: ProfileConf, seed: int, mps: MpsDaemon | None = None,
) -> ProfileResult:
    run_dir.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, object]] = []
    names = devices.names()
    seeds = iter(np.random.SeedSequence(seed).generate_state(len(sizes) * cfg.repeats * devices.n))
    if cfg.models is not None:
        unknown = sorted(set(cfg.models) - set(sizes))
        if unknown:
            raise ValueError(f"profile.models: {unknown} not in models ({sorted(sizes)})")
        sizes = {m: sizes[m] for m in cfg.models}
    if mps is not None:
        mps.start()
    try:
        for rep in range(cfg.repeats):
            for model, size in sizes.items():
                handles = []
                for d in range(devices.n):
                    jid = len(rows) + d
                    jd = run_dir / "jobs" / str(jid)
                    jd.mkdir(parents=True, exist_ok=True)
                    spec = WorkerSpec(
                        job_id=jid, model=model, size=asdict(size), total_iters=cfg.warmup_iters + cfg.iters,
                        seed=int(next(seeds)), checkpoint=str(jd / "ckpt.pt"), progress=str(jd / "progress.jsonl"),
                        warmup_iters=cfg.warmup_iters, report_every_s=1e9,
                    )
                    env = devices.placement_env((d,), 1.0)
                    if mps is not None:
                        env.update(mps.client_env(1, 1.0, 0.0, 0))
                    handles.append((d, agent.launch(spec, env, 0)))
                deadline = time.monotonic() + cfg.timeout_s
                for d, h in handles:
                    rc = agent.wait(h, max(0.1, deadline - time.monotonic()))
                    recs = agent.progress(h)
                    done = [r for r in recs if r["ev"] == "done"]
                    ready = [r for r in recs if r["ev"] == "ready"]
                    if rc != EXIT_DONE or not done or done[-1].get("steady_iter_s") is None or not ready:
                        raise RuntimeError(f"profile run of {model} on device {d} failed (exit {rc}); "
                                           f"see {run_dir / 'jobs' / str(h.job_id) / 'worker.log'}")
                    rows.append({
                        "device": d, "node": int(topology.gpu_node[d]), "name": names[d], "model": model,
                        "perf_class": perf_class(model, size), "repeat": rep, "iter_s": float(done[-1]["steady_iter_s"]),
                        "startup_s": float(ready[0]["t"]) - h.spawn_t,
                    })
    finally:
        agent.stop_all(5.0)
        if mps is not None:
            mps.stop()
    return _write(rows, sizes, topology, devices.n, run_dir, cfg)


def _write(rows: list[dict[str, object]], sizes: dict[str, ModelSize], topology: Topology, n: int, run_dir: Path,
           cfg: ProfileConf) -> ProfileResult:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(rows[0]))
    w.writeheader()
    w.writerows(rows)
    write_atomic(run_dir / "profile_runs.csv", buf.getvalue())
    med = {m: np.array([np.median([float(r["iter_s"]) for r in rows if r["model"] == m and r["device"] == d])  # type: ignore[arg-type]
                        for d in range(n)]) for m in sizes}
    base = {m: float(np.median(v)) for m, v in med.items()}
    factors = np.full((n, len(PERF_CLASSES)), np.nan)
    for c, cls in enumerate(PERF_CLASSES):
        ms = [m for m, sz in sizes.items() if perf_class(m, sz) == cls]
        if ms:
            factors[:, c] = np.mean([med[m] / base[m] for m in ms], axis=0)
    fill = np.nanmean(factors, axis=1)
    factors = np.where(np.isnan(factors), fill[:, None], factors)
    buf = io.StringIO()
    w2 = csv.writer(buf)
    w2.writerow(["gpu", "node", *PERF_CLASSES])
    for d in range(n):
        w2.writerow([d, int(topology.gpu_node[d]), *(f"{x:.6f}" for x in factors[d])])
    write_atomic(run_dir / "profile.csv", buf.getvalue())
    startup = float(np.median([float(r["startup_s"]) for r in rows]))  # type: ignore[arg-type]
    write_json_atomic(run_dir / "models.json", base)
    write_json_atomic(run_dir / "profile_meta.json", {
        "startup_s": startup, "devices": sorted({str(r["name"]) for r in rows}), **asdict(cfg),
        "sizes": {m: asdict(s) for m, s in sizes.items()},
    })
    return ProfileResult(factors, base, startup, run_dir)


def load_profile_dir(run_dir: Path) -> ProfileResult:
    """Read a profile run folder back (profile.csv, models.json, profile_meta.json)."""
    run_dir = Path(run_dir)
    factors = load_profile(run_dir / "profile.csv")
    base = json.loads((run_dir / "models.json").read_text())
    meta = json.loads((run_dir / "profile_meta.json").read_text())
    return ProfileResult(factors, {k: float(v) for k, v in base.items()}, float(meta["startup_s"]), run_dir)

