"""``gpusched-real pairs``: an inference service (HP) beside a training job (BE) on one device, under
the sharing mechanisms real GPUs offer; rows in the format of the measured H100 pairs.

Per repeat (``run`` = 1, 2, ...): each HP model alone and each BE model alone (``exclusive``), then
every (mechanism, HP, BE) cell with both processes at once. The HP standalone run measures the
service time ``hp_solo_ms`` that sets the request rate (``load / hp_solo_ms``) of that repeat's
pair cells. Mechanisms (the names of :mod:`gpusched_env.vocabulary`; the old ``timeslice`` and
``mps_prio``, which data/calibration/colocation-h100 still uses, are accepted with a one-line note):

| name | GPU | CPU stand-in |
|---|---|---|
| time_slicing | two CUDA contexts, no MPS (driver time slicing) | both processes on the device's cores |
| mps | both clients of this cell's own MPS daemon, no limits | as time_slicing (a CPU has no MPS) |
| mps_priority | MPS, CUDA_MPS_CLIENT_PRIORITY 0 for HP, 1 for BE | BE at nice +10 |
| mps_beNN | MPS, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=NN for BE | BE gets NN % of the cores as threads |

Every GPU-only command (the MPS daemon's start and stop) and every process start with its exact
environment goes through the command layer (:mod:`gpusched.real.commands`): executed on a GPU machine,
recorded in ``commands.jsonl`` elsewhere, while the CPU stand-in still runs the two processes.

Output: ``pairs.out`` (CSV, rewritten atomically after every cell, so an interrupted run keeps the
finished cells) with the columns of ``h100_hp_be_pairs.csv`` plus a last ``device`` column (the
GPU's name, or ``CPU cores 0+1``); :func:`gpusched_env.device.measured.measured_cells` reads it
(``measured_cells("/abs/path/pairs.csv")``). Per-cell worker files are under ``cells/``.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import signal
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any

import psutil

from gpusched.real.commands import CommandRunner
from gpusched.real.devices import Devices
from gpusched.real.launcher import REPO_ROOT, _kill_tree
from gpusched.real.mps import MpsDaemon, client_priority_supported
from gpusched.real.pairs_worker import PairSpec
from gpusched.real.replay import shielded
from gpusched_env.atomic import write_atomic, write_json_atomic
from gpusched_env.config_util import ConfigError, from_dict
from gpusched_env.vocabulary import BE_CAPPED, MPS, MPS_PRIORITY, TIME_SLICING, current_names

#: model -> role; the models of h100_hp_be_pairs.csv (gpusched/real/pairs_nets.py builds them)
PAIR_MODELS: dict[str, str] = {
    "resnet50_inf": "hp", "bert_inf": "hp", "resnet50_train": "be", "gpt2_train": "be",
}
MECHANISMS = (TIME_SLICING, MPS, MPS_PRIORITY)  # and mps_be1 .. mps_be99 (vocabulary.BE_CAPPED)
COLUMNS = ("run", "measure_s", "mechanism", "hp_model", "be_model", "hp_load", "hp_solo_ms", "hp_requests",
           "hp_mean_ms", "hp_p50_ms", "hp_p99_ms", "be_iter_per_s", "be_solo_iter_per_s")
DEVICE_COLUMN = "device"
CPU_NICE_BE = 10  # choice: mps_priority on the CPU stand-in: BE this much nicer than HP


@dataclass(frozen=True)
class PairsConf:
    """``pairs.*`` (conf/real/config.yaml documents each key)."""

    hp_models: list[str] = field(default_factory=lambda: ["resnet50_inf", "bert_inf"])
    be_models: list[str] = field(default_factory=lambda: ["resnet50_train", "gpt2_train"])
    mechanisms: list[str] = field(default_factory=lambda: [TIME_SLICING, MPS, MPS_PRIORITY, "mps_be50"])
    load: float = 0.5
    duration_s: float = 8.0
    warmup_s: float = 3.0
    calib_s: float = 2.0
    drain_s: float = 10.0
    repeats: int = 1
    scale: str = "auto"
    out: str = "pairs.csv"
    start_timeout_s: float = 600.0

    def check(self) -> None:
        """Every problem is a :class:`ConfigError` naming its key."""
        for key, role in (("hp_models", "hp"), ("be_models", "be")):
            names = getattr(self, key)
            if not names:
                raise ConfigError(f"pairs.{key}: must list at least one model")
            for m in names:
                if PAIR_MODELS.get(m) != role:
                    ok = sorted(k for k, r in PAIR_MODELS.items() if r == role)
                    raise ConfigError(f"pairs.{key}: unknown {role.upper()} model {m!r}; known: {', '.join(ok)}")
        for m in self.mechanisms:
            if m not in MECHANISMS and not BE_CAPPED.fullmatch(m):
                raise ConfigError(f"pairs.mechanisms: unknown mechanism {m!r}; known: {', '.join(MECHANISMS)}, "
                                  "mps_beNN (BE capped at NN % of the SMs, 1 <= NN <= 99)")
        if not 0.0 < self.load < 1.0:
            raise ConfigError(f"pairs.load: must be in (0, 1) (a fraction of the HP's standalone rate); got {self.load}")
        for key in ("duration_s", "warmup_s", "calib_s", "start_timeout_s"):
            if not getattr(self, key) > 0:
                raise ConfigError(f"pairs.{key}: must be > 0; got {getattr(self, key)}")
        if self.drain_s < 0:
            raise ConfigError(f"pairs.drain_s: must be >= 0; got {self.drain_s}")
        if self.repeats < 1:
            raise ConfigError(f"pairs.repeats: must be >= 1; got {self.repeats}")
        if self.scale not in ("auto", "full", "cpu"):
            raise ConfigError(f"pairs.scale: must be auto, full or cpu; got {self.scale!r}")
        if not self.out:
            raise ConfigError("pairs.out: must name a file")


def load_pairs_conf(data: Any) -> PairsConf:
    conf = from_dict(PairsConf, data, "pairs")
    conf = replace(conf, mechanisms=current_names(list(conf.mechanisms), "pairs.mechanisms"))
    conf.check()
    return conf


@dataclass(frozen=True)
class Side:
    """One process of a cell: its role, model and the environment that places it."""

    role: str
    model: str
    env: dict[str, str]


def cell_sides(mechanism: str, hp: str | None, be: str | None, devices: Devices, mps: MpsDaemon | None,
               ) -> list[Side]:
    """The processes of one cell and their exact environments (device 0; ``mps``: this cell's daemon,
    required for the mps* mechanisms)."""
    sides = []
    cap = BE_CAPPED.fullmatch(mechanism)
    for role, model in (("hp", hp), ("be", be)):
        if model is None:
            continue
        share = int(cap.group(1)) / 100.0 if cap and role == "be" else 1.0
        env = devices.placement_env((0,), share)
        if devices.kind == "cpu":  # two processes on the same cores: OpenMP threads yield instead of spinning
            env["OMP_WAIT_POLICY"] = "PASSIVE"
        if mechanism.startswith("mps"):
            assert mps is not None
            env.update(mps.base_env)
            if mechanism == MPS_PRIORITY:
                env["CUDA_MPS_CLIENT_PRIORITY"] = "0" if role == "hp" else "1"
                if devices.kind == "cpu" and role == "be":
                    nice = int(env.get("GPUSCHED_NICE", "0")) + CPU_NICE_BE
                    env["GPUSCHED_NICE"] = str(min(19, nice))
            if cap and role == "be":
                env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = cap.group(1)
        sides.append(Side(role, model, env))
    return sides


@dataclass
class _Proc:
    side: Side
    proc: Any
    log: IO[bytes]
    progress: Path
    offset: int = 0
    records: list[dict[str, Any]] = field(default_factory=list)

    def poll_records(self) -> list[dict[str, Any]]:
        try:
            with open(self.progress) as f:
                f.seek(self.offset)
                chunk = f.read()
        except FileNotFoundError:
            return self.records
        complete = chunk[: chunk.rfind("\n") + 1]
        self.offset += len(complete.encode())
        self.records += [json.loads(x) for x in complete.splitlines() if x.strip()]
        return self.records

    def get(self, ev: str) -> dict[str, Any] | None:
        return next((r for r in self.poll_records() if r["ev"] == ev), None)


class CellFailed(RuntimeError):
    pass


class PairsRunner:
    """Runs cells one at a time on device 0; :meth:`close` stops whatever is still running."""

    def __init__(self, conf: PairsConf, devices: Devices, runner: CommandRunner, run_dir: Path, seed: int = 0,
                 driver_version: str | None = None, poll_s: float = 0.01) -> None:
        self.conf = conf
        self.devices = devices
        self.runner = runner
        self.run_dir = Path(run_dir)
        self.seed = seed
        self.poll_s = poll_s
        self.scale = conf.scale if conf.scale != "auto" else ("full" if devices.kind == "nvidia" else "cpu")
        self.driver_version = driver_version
        self.live: list[_Proc] = []
        self.mps: MpsDaemon | None = None
        self.n_cells = 0
        if (MPS_PRIORITY in conf.mechanisms and not runner.dry_run
                and not client_priority_supported(driver_version)):
            raise ConfigError(f"pairs.mechanisms: mps_priority needs CUDA_MPS_CLIENT_PRIORITY (an R550+ driver); "
                              f"this driver is {driver_version or 'unknown'}")

    # --- one cell -----------------------------------------------------------------------------
    def run_cell(self, run: int, mechanism: str, hp: str | None, be: str | None,
                 solo_ms: float | None = None) -> dict[str, dict[str, Any]]:
        """Run one cell; return {role: its result record} (hp's includes ``solo_ms``)."""
        c = self.conf
        self.n_cells += 1
        cdir = self.run_dir / "cells" / f"{self.n_cells:03d}-r{run}-{mechanism}-{hp or 'none'}-{be or 'none'}"
        cdir.mkdir(parents=True, exist_ok=True)
        if mechanism.startswith("mps"):
            self.mps = MpsDaemon(self.runner, cdir, self.driver_version)
            self.mps.start()
        try:
            sides = cell_sides(mechanism, hp, be, self.devices, self.mps)
            go = cdir / "go.json"
            for i, s in enumerate(sides):
                spec = PairSpec(
                    role=s.role, model=s.model, scale=self.scale, seed=self.seed * 1000 + run * 100 + i,
                    warmup_s=c.warmup_s, duration_s=c.duration_s, progress=str(cdir / f"{s.role}.progress.jsonl"),
                    go=str(go), load=c.load, solo_ms=solo_ms if s.role == "hp" else None, calib_s=c.calib_s,
                    drain_s=c.drain_s, max_wall_s=c.start_timeout_s + c.duration_s + c.drain_s + 60.0,
                )
                self.live.append(self._spawn(spec, s, cdir))
            self._wait_all("ready", time.monotonic() + c.start_timeout_s, cdir)
            t0 = time.time() + 0.2
            write_atomic(go, json.dumps({"t0": t0}))
            self._wait_all("result", time.monotonic() + 0.2 + c.duration_s + c.drain_s + 60.0, cdir)
            results = {p.side.role: p.get("result") or {} for p in self.live}
            if "hp" in results:
                results["hp"]["solo_ms"] = float(next(p for p in self.live if p.side.role == "hp").get("ready")["solo_ms"])  # type: ignore[index]
            return results
        finally:
            with shielded():
                self.stop_cell()

    def _spawn(self, spec: PairSpec, side: Side, cdir: Path) -> _Proc:
        spec_path = cdir / f"{side.role}.spec.json"
        spec.write(spec_path)
        pythonpath = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)
        env = {**side.env, "PYTHONPATH": pythonpath, "PYTHONUNBUFFERED": "1"}
        log = open(cdir / f"{side.role}.log", "ab")
        argv = [sys.executable, "-m", "gpusched.real.pairs_worker", str(spec_path)]
        proc = self.runner.spawn(argv, env, cwd=cdir, log=log)
        return _Proc(side, proc, log, Path(spec.progress))

    def _wait_all(self, ev: str, deadline: float, cdir: Path) -> None:
        while True:
            waiting = [p for p in self.live if p.get(ev) is None]
            if not waiting:
                return
            for p in waiting:
                rc = p.proc.poll()
                if rc is not None and p.get(ev) is None:
                    tail = _tail(cdir / f"{p.side.role}.log")
                    raise CellFailed(f"{p.side.role} worker ({p.side.model}) exited with {rc} before '{ev}'; "
                                     f"see {cdir / (p.side.role + '.log')}{': ' + tail if tail else ''}")
            if time.monotonic() > deadline:
                raise CellFailed(f"no '{ev}' from {', '.join(p.side.role for p in waiting)} in time; see {cdir}")
            time.sleep(self.poll_s)

    def stop_cell(self, grace_s: float = 5.0) -> None:
        """SIGTERM this cell's processes, SIGKILL what is left after ``grace_s``; stop its MPS daemon."""
        procs, self.live = self.live, []
        for p in procs:
            if p.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for p in procs:
            try:
                p.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except Exception:  # noqa: BLE001 - TimeoutExpired: kill it
                _kill_tree(p.proc.pid)
                with contextlib.suppress(Exception):
                    p.proc.wait(timeout=5.0)
            p.log.close()
        if self.mps is not None:
            mps, self.mps = self.mps, None
            mps.stop()

    close = stop_cell


def _tail(path: Path, n: int = 300) -> str:
    try:
        lines = [x for x in path.read_text(errors="replace").splitlines() if x.strip()]
    except OSError:
        return ""
    return lines[-1][-n:] if lines else ""


def _f(x: float | None, nd: int = 3) -> str:
    if x is None or x != x:
        return ""
    return f"{round(float(x), nd):g}" if abs(x) < 1e15 else str(x)


def device_label(devices: Devices) -> str:
    name = devices.names()[0]
    if devices.kind == "cpu":
        return "CPU cores " + name.removeprefix("cpu")
    return name


def rows_csv(rows: list[dict[str, str]]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=[*COLUMNS, DEVICE_COLUMN], lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


def plan(conf: PairsConf) -> list[tuple[int, str, str | None, str | None]]:
    """Every cell in run order: (run, mechanism, hp, be)."""
    out: list[tuple[int, str, str | None, str | None]] = []
    for run in range(1, conf.repeats + 1):
        out += [(run, "exclusive", h, None) for h in conf.hp_models]
        out += [(run, "exclusive", None, b) for b in conf.be_models]
        out += [(run, m, h, b) for m in conf.mechanisms for h in conf.hp_models for b in conf.be_models]
    return out


def run_pairs(conf: PairsConf, devices: Devices, runner: CommandRunner, run_dir: Path, seed: int = 0,
              out: Path | None = None, log: Any = print) -> list[dict[str, str]]:
    """Run every cell of ``conf``; write the CSV after each; return its rows. Stops every process
    and daemon it started however it ends (use under :func:`gpusched.real.replay.terminate_as_exception` so
    SIGTERM counts as an interruption too)."""
    run_dir = Path(run_dir)
    out = out or run_dir / conf.out
    label = device_label(devices)
    pr = PairsRunner(conf, devices, runner, run_dir, seed, getattr(devices, "driver_version", None))
    cells = plan(conf)
    rows: list[dict[str, str]] = []
    solo_hp: dict[tuple[int, str], float] = {}
    solo_be: dict[tuple[int, str], float] = {}
    write_json_atomic(run_dir / "pairs_meta.json", {
        "conf": {k: getattr(conf, k) for k in conf.__dataclass_fields__}, "device": label, "device_kind": devices.kind,
        "scale": pr.scale, "dry_run": runner.dry_run, "cells": len(cells), "csv": str(out),
    })
    t_all = time.monotonic()
    try:
        for i, (run, mech, hp, be) in enumerate(cells, 1):
            what = " + ".join(x for x in (hp, be) if x)
            t = time.monotonic()
            log(f"[{i}/{len(cells)}] run {run} {mech:<10} {what} ...", flush=True)
            res = pr.run_cell(run, mech, hp, be, solo_hp.get((run, hp)) if hp and mech != "exclusive" else None)
            row = dict.fromkeys(COLUMNS, "")
            row.update(run=str(run), measure_s=_f(conf.duration_s), mechanism=mech, hp_model=hp or "",
                       be_model=be or "")
            row[DEVICE_COLUMN] = label
            msg = []
            if hp:
                r = res["hp"]
                if mech == "exclusive":
                    solo_hp[(run, hp)] = float(r["solo_ms"])
                row.update(hp_load=_f(conf.load), hp_solo_ms=_f(r["solo_ms"]), hp_requests=str(r["requests"]),
                           hp_mean_ms=_f(r["mean_ms"]), hp_p50_ms=_f(r["p50_ms"]), hp_p99_ms=_f(r["p99_ms"]))
                msg.append(f"hp {r['requests']} req p50 {r['p50_ms']:.2f} p99 {r['p99_ms']:.2f} ms"
                           + (f" ({r['dropped']} not served)" if r.get("dropped") else ""))
            if be:
                r = res["be"]
                if mech == "exclusive":
                    solo_be[(run, be)] = float(r["iter_per_s"])
                row.update(be_iter_per_s=_f(r["iter_per_s"]), be_solo_iter_per_s=_f(solo_be[(run, be)]))
                msg.append(f"be {r['iter_per_s']:.2f} it/s")
            rows.append(row)
            write_atomic(out, rows_csv(rows))
            log(f"    {'; '.join(msg)} ({time.monotonic() - t:.1f} s)", flush=True)
    finally:
        with shielded():
            pr.close()
    log(f"pairs: {len(rows)} rows on {label} in {time.monotonic() - t_all:.0f} s -> {out}", flush=True)
    return rows


def usable_cores() -> list[int]:
    return sorted(psutil.Process().cpu_affinity() or range(psutil.cpu_count() or 1))
