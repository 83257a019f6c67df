"""``gpusched-bench``: run policies × seeds on a scenario; print tables; write results and plots.

    gpusched-bench scenario=pal_philly policies=[packed_sticky,pm_first,pal] seeds=[0,1,2] out_dir=DIR
    gpusched-bench scenario=philly_full perf=true          # replay-speed benchmark
    gpusched-bench --help                                  # every config key (conf/bench.yaml)
"""

from __future__ import annotations

import resource
import statistics
import time
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from bench.levels import level_of, run_level_bench
from bench.report import (
    plot,
    print_report,
    results_csv,
    results_document,
    wide_console,
    write_atomic,
    write_json_atomic,
)
from bench.runner import TaskResult, aggregate, paper_values, run_tasks, simulate, tasks_for
from gpusched_env.scenario import CONF_DIR, Scenario, build_workloads, load_scenario

CLASSIC = ["fifo", "sjf", "srtf", "las", "tiresias", "gandiva", "packed_sticky", "packed_nonsticky",
           "random_sticky", "random_nonsticky"]


def scenario_from_cfg(cfg: DictConfig) -> Scenario:
    raw: dict[str, Any] = OmegaConf.to_container(cfg.scenario, resolve=True)  # type: ignore[assignment]
    raw.pop("level", None)  # "cluster" (checked by level_of)
    return load_scenario(raw)


def policies_from_cfg(cfg: DictConfig, scn: Scenario) -> list[str]:
    if cfg.policies:
        return [str(p) for p in cfg.policies]
    return list(scn.default_policies) or CLASSIC


def run_bench(cfg: DictConfig, console: Console) -> dict[str, Any]:
    raw: dict[str, Any] = OmegaConf.to_container(cfg.scenario, resolve=True)  # type: ignore[assignment]
    if level_of(raw) != "cluster":
        return run_level_bench(
            raw, [str(p) for p in cfg.policies] if cfg.policies else None, [int(s) for s in cfg.seeds],
            [int(w) for w in cfg.workloads] if cfg.get("workloads") is not None else None, int(cfg.workers),
            Path(cfg.out_dir), bool(cfg.plots), [str(m) for m in cfg.table_metrics] if cfg.get("table_metrics") else None,
            console,
        )
    scn = scenario_from_cfg(cfg)
    policies = policies_from_cfg(cfg, scn)
    seeds = [int(s) for s in cfg.seeds]
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    workloads = [int(w) for w in cfg.workloads] if cfg.get("workloads") is not None else None
    tasks = tasks_for(scn, policies, seeds, workloads)
    console.print(
        f"[bold]{scn.name}[/]: {len(policies)} policies × {len(seeds)} seeds × "
        f"{len(workloads) if workloads is not None else len(scn.workload_names)} workload(s) = "
        f"{len(tasks)} runs on {cfg.workers} process(es)"
    )
    t0 = time.perf_counter()
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=False) as bar:
        job = bar.add_task("simulating", total=len(tasks))

        def done(r: TaskResult) -> None:
            bar.update(job, advance=1, description=f"{r.task.policy} seed {r.task.seed} {r.workload_name}")

        results = run_tasks(scn, tasks, workers=int(cfg.workers), agent_path=cfg.agent_path,
                            check=bool(cfg.check_invariants), on_done=done)
    wall = time.perf_counter() - t0
    block = aggregate(scn, results, seeds)
    doc = results_document(scn.name, seeds, block, paper_values(scn, block) or None)
    doc["wall_s"] = round(wall, 2)
    write_json_atomic(out / "results.json", doc)
    write_atomic(out / "results.csv", results_csv(doc))
    print_report(doc, console, [str(m) for m in cfg.table_metrics] if cfg.get("table_metrics") else None)
    if cfg.plots:
        first = seeds[0]
        jcts: dict[str, list[float]] = {}
        series = {}
        for r in results:
            if r.task.seed == first:
                jcts.setdefault(r.task.policy, []).extend(r.jcts)
                if r.task.workload == tasks[0].workload and r.timeline:
                    series[r.task.policy] = r.timeline
        plot(out, jcts, series, scn.cluster.topology().n_gpus)
    console.print(f"wrote {out}/results.json, results.csv, jct_cdf.png, cluster_timeline.png "
                  f"({wall:.1f} s wall)")
    return doc


def run_perf(cfg: DictConfig, console: Console) -> dict[str, Any]:
    """Replay speed: load + simulate the scenario with each policy ``perf_repeats`` times, one core."""
    scn = scenario_from_cfg(cfg)
    policies = [str(p) for p in cfg.policies] if cfg.policies else ["fifo"]
    from bench.runner import make_policy

    rows = []
    for p in policies:
        loads, sims, cpus, n_jobs = [], [], [], 0
        for _ in range(int(cfg.perf_repeats)):
            t0 = time.perf_counter()
            topo = scn.cluster.topology()
            n_jobs = len(build_workloads(scn, 0, topo)[0][1])
            t1, c1 = time.perf_counter(), time.process_time()
            simulate(scn, make_policy(p, scn, 0), 0)
            t2, c2 = time.perf_counter(), time.process_time()
            loads.append(t1 - t0)
            sims.append(t2 - t1)
            cpus.append(c2 - c1)
        rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        med, cpu = statistics.median(sims), statistics.median(cpus)
        rows.append({"policy": p, "jobs": n_jobs, "load_s": statistics.median(loads), "simulate_s_median": med,
                     "simulate_s_all": sims, "cpu_s_median": cpu, "jobs_per_s": n_jobs / med,
                     "jobs_per_cpu_s": n_jobs / cpu, "peak_rss_mb": rss_mb})
        console.print(
            f"{scn.name} {p}: {n_jobs} jobs; simulate median of {len(sims)} runs {med:.2f} s wall "
            f"({n_jobs / med:,.0f} jobs/s), {cpu:.2f} s CPU ({n_jobs / cpu:,.0f} jobs/CPU-s); trace load "
            f"{statistics.median(loads):.2f} s (separate); peak RSS {rss_mb:.0f} MB"
        )
    doc = {"scenario": scn.name, "perf": rows}
    write_json_atomic(Path(cfg.out_dir) / "perf.json", doc)
    return doc


@hydra.main(config_path=str(CONF_DIR), config_name="bench", version_base="1.3")
def _main(cfg: DictConfig) -> None:
    console = wide_console()
    if cfg.perf:
        run_perf(cfg, console)
    else:
        run_bench(cfg, console)


def main() -> None:
    _main()


if __name__ == "__main__":
    main()
