"""Stopwatch of the device level: its speed benchmark and held-out tables (a script, not a timed test).

    python -m gpusched_env.device.stopwatch           # one pair, 60 s simulated, then tally_pairs (seed 0) on 2 workers
    python -m gpusched_env.device.stopwatch cpu       # CPU seconds: one 60-s pair per mechanism, tally_pairs seed 0 on one core
Prints medians of repeated runs and the paper-vs-sim rows of tally_pairs.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace

import numpy as np

from gpusched_env.device import bench, pairs
from gpusched_env.device.engine import simulate
from gpusched_env.device.gpus import device_gpu
from gpusched_env.device.mechanisms import make_mechanism
from gpusched_env.scenario_file import read_scenario_file


def _scenario(name: str) -> bench.DeviceScenario:
    return bench.load(read_scenario_file(name, level="device"), name)  # type: ignore[return-value]


def one_pair(repeats: int = 3) -> float:
    """Median wall seconds of bert_inf+gpt2_large_train under tally, 60 s simulated (standalone runs excluded)."""
    scn = replace(_scenario("tally_pairs"), duration_s=60.0)
    w = scn.workload_names.index("bert_inf+gpt2_large_train")
    bench.run(scn, "exclusive", 0, w)  # the standalone reference, cached
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        bench.run(scn, "tally", 0, w)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _task(args: tuple[str, int]) -> tuple[str, int, dict[str, float]]:
    policy, w = args
    return policy, w, bench.run(_scenario("tally_pairs"), policy, 0, w).metrics


def all_pairs(workers: int = 2, repeats: int = 3) -> tuple[float, dict[str, dict[str, float]]]:
    """Median wall seconds of every (policy, pair) of tally_pairs at seed 0 (``repeats`` runs, each in
    fresh worker processes, so no cache carries over), and the mean metrics per policy."""
    scn = _scenario("tally_pairs")
    tasks = [(p, w) for w in range(len(scn.workload_names)) for p in scn.default_policies]
    walls = []
    for _ in range(repeats):
        t = time.perf_counter()
        with ProcessPoolExecutor(workers) as pool:
            res = list(pool.map(_task, tasks, chunksize=6))
        walls.append(time.perf_counter() - t)
    means = {p: {k: float(np.mean([m[k] for q, _, m in res if q == p])) for k in res[0][2]} for p in scn.default_policies}
    return statistics.median(walls), means


PAIR = "bert_inf+gpt2_large_train"  # choice: the pair the wall-clock figures above have always used


def pair_cpu(mechanism: str, repeats: int = 5, pair: str = PAIR) -> float:
    """Median CPU seconds (``time.process_time``) of one tally_pairs pair under ``mechanism``, 60 s
    simulated: the engine run alone (the kernel sequences are built and cached first); ``exclusive``
    times the two standalone runs (HP alone, BE alone) with their caches cleared."""
    scn = replace(_scenario("tally_pairs"), duration_s=60.0)
    setup = scn.setup(scn.workload_names.index(pair))
    hp, be = pairs.clients(setup, 0)  # builds and caches the sequences
    gpu = device_gpu(setup.gpu_type)
    times = []
    for _ in range(repeats):
        if mechanism == "exclusive":
            pairs.hp_alone.cache_clear()
            pairs.be_alone.cache_clear()
            t = time.process_time()
            pairs.standalone(setup, 0)
        else:
            mech = make_mechanism(mechanism, scn.mechanisms.get(mechanism))
            t = time.process_time()
            simulate(gpu, [hp, be], mech, setup.duration_s)
        times.append(time.process_time() - t)
    return statistics.median(times)


def all_pairs_cpu() -> float:
    """CPU seconds of every (policy, pair) of tally_pairs at seed 0 in this process (one core), the
    caches cleared first: sequences and standalone runs are built as ``gpusched.bench.cli workers=1`` builds them."""
    for f in (pairs.sequence, pairs.hp_alone, pairs.be_alone):
        f.cache_clear()
    scn = _scenario("tally_pairs")
    t = time.process_time()
    for w in range(len(scn.workload_names)):
        for p in scn.default_policies:
            bench.run(scn, p, 0, w)
    return time.process_time() - t


def cpu_main(repeats: int = 5) -> None:
    """Print the CPU figures of issue 29 item 7 and the load average."""
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    scn = _scenario("tally_pairs")
    for m in scn.default_policies:
        print(f"one pair ({PAIR}), 60 s simulated, {m}: {pair_cpu(m, repeats):.3f} CPU s (median of {repeats})")
    runs = len(scn.workload_names) * len(scn.default_policies)
    print(f"tally_pairs, seed 0, {runs} runs, one core: {all_pairs_cpu():.1f} CPU s")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


def main() -> None:
    if sys.argv[1:2] == ["cpu"]:
        cpu_main(int(sys.argv[2]) if len(sys.argv) > 2 else 5)
        return
    print(f"one pair, 60 s simulated, tally: {one_pair(5):.2f} s wall (median of 5)")
    wall, means = all_pairs()
    print(f"tally_pairs, seed 0, {len(_scenario('tally_pairs').workload_names)} pairs x 6 policies, 2 workers: "
          f"{wall:.1f} s wall (median of 3)")
    for p, m in means.items():
        print(f"  {p:13s} hp_p99_ratio {m['hp_p99_ratio']:.3f}  be_norm {m['be_norm_throughput']:.3f}  "
              f"system {m['system_throughput']:.3f}")
    print(f"paper vs sim (service p99): tally overhead 0.072 vs {means['tally']['hp_service_p99_ratio'] - 1:.3f}; "
          f"tgs 1.889 vs {means['tgs']['hp_service_p99_ratio'] - 1:.3f}; "
          f"tally/tgs system throughput >= 0.8 vs {means['tally']['system_throughput'] / means['tgs']['system_throughput']:.3f}")


def h100_table(seed: int = 0) -> list[str]:
    """Markdown rows: simulated vs measured BE throughput and HP p99 per h100_pairs cell."""
    scn = _scenario("h100_pairs")
    rows = ["| policy | pair | BE norm sim | BE norm measured | error | HP p99 sim (ms) | measured range | in range |",
            "|---|---|---|---|---|---|---|---|"]
    for p in scn.default_policies:
        for w, name in enumerate(scn.workload_names):
            m = bench.run(scn, p, seed, w).metrics
            if "be_norm_throughput_measured" not in m:
                continue
            rows.append(f"| {p} | {name} | {m['be_norm_throughput']:.3f} | {m['be_norm_throughput_measured']:.3f} | "
                        f"{m['be_norm_error']:+.1%} | {m['hp_p99_ms']:.1f} | {m['hp_p99_ms_measured_lo']:.1f}-"
                        f"{m['hp_p99_ms_measured_hi']:.1f} | {'yes' if m['hp_p99_in_range'] else 'no'} |")
    return rows


def h100_heldout(seed: int = 0) -> list[str]:
    """Markdown rows: per h100_pairs cell, BE normalised throughput and HP mean latency ratio (shared ÷
    alone) simulated vs measured in runs 1 and 2 of colocation-h100. Fitted: the block-duration cap, on
    run 1's mps_priority HP mean ratios (profiles.BLOCK_CAP_S); every other figure is held out. Targets
    (issue 29): BE within 15 % of the runs' mean; HP mean ratio inside [min/1.3, max·1.3] of the runs."""
    import csv

    from gpusched_env.data import data_path
    from gpusched_env.device.measured import CSV, policy_name

    with open(data_path(CSV), newline="") as f:
        rows = list(csv.DictReader(f))
    solo = {(r["run"], r["hp_model"]): float(r["hp_mean_ms"]) for r in rows if r["mechanism"] == "exclusive" and r["hp_model"]}
    meas: dict[tuple[str, str, str], dict[str, tuple[float, float]]] = {}
    for r in rows:
        if r["mechanism"] != "exclusive":
            meas.setdefault((policy_name(r["mechanism"]), r["hp_model"], r["be_model"]), {})[r["run"]] = (
                float(r["be_iter_per_s"]) / float(r["be_solo_iter_per_s"]), float(r["hp_mean_ms"]) / solo[(r["run"], r["hp_model"])])
    scn = _scenario("h100_pairs")
    out = ["| policy | pair | BE sim | BE run 1 / 2 | BE error | within 15 % | HP mean ratio sim | run 1 / 2 | in range ±30 % |",
           "|---|---|---|---|---|---|---|---|---|"]
    for p in scn.default_policies:
        for w, name in enumerate(scn.workload_names):
            h, b = name.split("+")
            cell = meas.get((p, h, b))
            if cell is None:
                continue
            m = bench.run(scn, p, seed, w).metrics
            be = [v[0] for v in cell.values()]
            hr = [v[1] for v in cell.values()]
            err = m["be_norm_throughput"] / (sum(be) / len(be)) - 1
            ok = min(hr) / 1.3 <= m["hp_mean_ratio"] <= max(hr) * 1.3
            fmt = " / ".join(f"{cell[k][0]:.3f}" if k in cell else "-" for k in ("1", "2"))
            fmr = " / ".join(f"{cell[k][1]:.2f}" if k in cell else "-" for k in ("1", "2"))
            out.append(f"| {p} | {name} | {m['be_norm_throughput']:.3f} | {fmt} | {err:+.1%} | {'yes' if abs(err) <= 0.15 else 'no'} | "
                       f"{m['hp_mean_ratio']:.2f} | {fmr} | {'yes' if ok else 'no'} |")
    return out


def daris_configs(seed: int = 0) -> list[str]:
    """Markdown rows: DARIS's simulated throughput per (taskset, contexts/streams/oversubscription)
    against the DARIS repository's result summaries (daris.reference; nothing fitted on them)."""
    from gpusched_env.device.daris.reference import THROUGHPUT
    from gpusched_env.device.daris.scenario import DarisScenario, run_taskset
    from gpusched_env.device.daris.scheduler import DarisConfig

    scn = bench.load(read_scenario_file("daris_rt", level="device"), "daris_rt")
    assert isinstance(scn, DarisScenario)
    out = ["| taskset | contexts/streams/OS | sim jobs/s | DARIS summaries | error | within 25 % |", "|---|---|---|---|---|---|"]
    for w, ts in enumerate(scn.tasksets):
        for (c, s, o), ref in THROUGHPUT[ts].items():
            sim = run_taskset(replace(scn, daris=DarisConfig(c, s, o)), "daris", seed, w)["throughput_jobs_s"]
            err = sim / ref - 1
            out.append(f"| {ts} | {c}/{s}/{o:g} | {sim:.0f} | {ref:.0f} | {err:+.0%} | {'yes' if abs(err) <= 0.25 else 'no'} |")
    return out


if __name__ == "__main__":
    main()
