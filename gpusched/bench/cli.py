"""``gpusched-bench``: run policies × seeds on a scenario; print tables; write results and plots.

    gpusched-bench scenario=pal_philly policies=[packed_sticky,pm_first,pal] seeds=[0,1,2] out_dir=DIR
    gpusched-bench scenario=philly_full perf=true          # replay-speed benchmark
    gpusched-bench --help                                  # every config key (conf/bench.yaml)
"""

from __future__ import annotations

import difflib
import json
import os
import resource
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import hydra
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from gpusched.bench.bare_loop import time_replay
from gpusched.bench.level_runner import (
    BenchInterrupted,
    LevelPlan,
    check_level,
    level_of,
    run_level_bench,
    sigterm_as_interrupt,
)
from gpusched.bench.report import (
    known_metrics,
    plot,
    print_report,
    results_csv,
    results_document,
    wide_console,
    write_atomic,
    write_json_atomic,
)
from gpusched.bench.runner import (
    BackendSpec,
    Interrupted,
    Task,
    TaskResult,
    aggregate,
    backend_of,
    make_policy,
    paper_values,
    run_tasks,
    tasks_for,
)
from gpusched_env.backends import check_backend
from gpusched_env.cluster.build import simulate
from gpusched_env.cluster.watch import RunLimits, RunProgress
from gpusched_env.config_util import ConfigError
from gpusched_env.data import DataMissing
from gpusched_env.scenario import CONF_DIR, Scenario, build_workloads, load_scenario, override_hint
from gpusched_env.workload.errors import TraceError

PROJECT_ERRORS = (ConfigError, TraceError, DataMissing)
"""Errors in the user's input (config, trace, data, model file): one line, exit code 2."""

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


def _int_list(cfg: DictConfig, key: str, *, empty_ok: bool = False) -> list[int]:
    raw = cfg.get(key)
    if not OmegaConf.is_list(raw) and not isinstance(raw, list):
        raise ConfigError(f"{key}: must be a list of integers, e.g. {key}=[0,1,2], got {raw!r}")
    vals = list(raw)
    if not vals and not empty_ok:
        raise ConfigError(f"{key}: must name at least one value, e.g. {key}=[0], got []")
    if any(isinstance(v, bool) or not isinstance(v, int) for v in vals):
        raise ConfigError(f"{key}: must be a list of integers, got {vals}")
    dup = sorted({v for v in vals if vals.count(v) > 1})
    if dup:
        raise ConfigError(f"{key}: {dup} given more than once (each run would replace the other)")
    return [int(v) for v in vals]


def _seeds(cfg: DictConfig) -> list[int]:
    """``seeds``: distinct integers >= 0 (each is a numpy SeedSequence's entropy)."""
    seeds = _int_list(cfg, "seeds")
    bad = [s for s in seeds if s < 0]
    if bad:
        raise ConfigError(f"seeds: must be integers >= 0, got {bad}")
    return seeds


def _pos_int(cfg: DictConfig, key: str) -> int:
    v = cfg.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ConfigError(f"{key}: must be an integer >= 1, got {v!r}")
    return int(v)


def known_keys() -> list[str]:
    """The top-level keys of conf/bench.yaml (and ``scenario``): the only ones the app reads."""
    import yaml

    doc = yaml.safe_load((CONF_DIR / "bench.yaml").read_text())
    return sorted({"scenario", *(k for k in doc if k not in ("defaults", "hydra"))})


def check_keys(cfg: DictConfig) -> None:
    known = known_keys()
    for raw in cfg:
        key = str(raw)
        if key not in known:
            near = difflib.get_close_matches(key, known, n=1)
            hint = f" (did you mean {near[0]}?)" if near else ""
            raise ConfigError(f"{key}: unknown key{hint}; gpusched-bench reads only {known}")


def check_out_dir(out: Path, overwrite: bool, multirun: bool) -> None:
    """``out`` can be written; in a multirun, a folder that already holds results is refused
    unless ``overwrite``: each job has its own folder, and none replaces another's results."""
    if multirun and not overwrite and (out / "results.json").exists():
        raise ConfigError(f"out_dir: {out} already holds results.json (another job or an earlier sweep); "
                          "give each job its own out_dir, or overwrite=true to replace it")
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / f".write-test-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise ConfigError(f"out_dir: cannot write to {out} ({e.strerror or e})") from None


def check_bench(cfg: DictConfig, out: Path, multirun: bool) -> tuple[Scenario, list[str], list[int], list[Task]]:
    """Everything a bench run needs, checked in this (the parent) process before any run starts:
    a bad value is a ConfigError naming its key."""
    check_keys(cfg)
    seeds = _seeds(cfg)
    workers = _pos_int(cfg, "workers")
    _pos_int(cfg, "perf_repeats")
    for key in ("check_invariants", "plots", "perf", "overwrite"):
        if not isinstance(cfg.get(key), bool):
            raise ConfigError(f"{key}: must be true or false, got {cfg.get(key)!r}")
    if cfg.get("table_metrics") is not None:
        metrics = [str(m) for m in cfg.table_metrics]
        unknown = [m for m in metrics if m not in known_metrics()]
        if not metrics or unknown:
            raise ConfigError(f"table_metrics: unknown metric(s) {unknown or metrics}; known: {known_metrics()}")
    run_limits(cfg)
    scn = scenario_from_cfg(cfg)
    if cfg.policies is not None and (not OmegaConf.is_list(cfg.policies) or len(cfg.policies) == 0):
        raise ConfigError(f"policies: must be a non-empty list of policy names or null, got {cfg.policies!r}")
    policies = policies_from_cfg(cfg, scn)
    dup = sorted({p for p in policies if policies.count(p) > 1})
    if dup:
        raise ConfigError(f"policies: {dup} given more than once")
    workloads = _int_list(cfg, "workloads") if cfg.get("workloads") is not None else None
    tasks = tasks_for(scn, policies, seeds, workloads)
    for p in policies:  # every policy builds (names, parameters, a trained model's file and shapes)
        try:
            make_policy(p, scn, seeds[0], cfg.agent_path)
        except ConfigError:
            raise
        except (ValueError, TypeError, KeyError) as e:
            msg = str(e.args[0]) if isinstance(e, KeyError) and e.args else str(e)
            raise ConfigError(f"policies: {p}: {msg}") from None
    topo = scn.cluster.topology()
    build_workloads(scn, seeds[0], topo)  # files readable, jobs well formed and placeable
    backend_of(backend_spec(cfg, out)).check(scn, seeds[0])  # e.g. backend=real: a stand-in for every model
    check_out_dir(out, bool(cfg.overwrite), multirun)
    if workers > 1 and len(tasks) > 1:
        from gpusched.bench import runner

        runner.cached_workloads(scn, seeds[0])  # forked workers inherit it
    return scn, policies, seeds, tasks


def backend_spec(cfg: DictConfig, out: Path) -> BackendSpec:
    """``backend`` (a ConfigError naming it and the allowed values if unknown) with its options (the
    ``real:`` keys for ``real``); a backend that writes files gets ``out/runs/``."""
    name = check_backend(cfg.get("backend", "sim"))
    if name == "sim":
        return BackendSpec()
    raw = cfg.get(name)
    options = OmegaConf.to_container(raw, resolve=True) if isinstance(raw, DictConfig) else raw
    if options is not None and not isinstance(options, dict):
        raise ConfigError(f"{name}: must be a mapping of the {name} backend's options, got {options!r}")
    return BackendSpec(name, json.dumps(options or {}, sort_keys=True), str(out / "runs"))


def run_limits(cfg: DictConfig) -> RunLimits:
    """``max_events_per_job`` and ``max_wall_s`` (a ConfigError naming the key if bad)."""
    return RunLimits(cfg.get("max_events_per_job"), cfg.get("max_wall_s"))


def _sim_time(s: float) -> str:
    """Simulated seconds as a short text (s, h or d)."""
    return f"{s:.0f} s" if s < 3600 else f"{s / 3600:.1f} h" if s < 86400 else f"{s / 86400:.1f} d"


def check_level_bench(cfg: DictConfig, out: Path, multirun: bool) -> LevelPlan:
    """Every input of a device- or pipeline-level bench, checked as :func:`check_bench` checks a
    cluster one (before any run, in this process; the out_dir last)."""
    check_keys(cfg)
    raw: dict[str, Any] = OmegaConf.to_container(cfg.scenario, resolve=True)  # type: ignore[assignment]
    if check_backend(cfg.get("backend", "sim")) != "sim":
        raise ConfigError(f"backend: {cfg.backend} runs cluster-level scenarios; {raw.get('name')} is a "
                          f"{level_of(raw)}-level scenario (backend=sim runs every level)")
    seeds = _seeds(cfg)
    _pos_int(cfg, "workers")
    for key in ("plots", "overwrite"):
        if not isinstance(cfg.get(key), bool):
            raise ConfigError(f"{key}: must be true or false, got {cfg.get(key)!r}")
    if cfg.policies is not None and (not OmegaConf.is_list(cfg.policies) or len(cfg.policies) == 0):
        raise ConfigError(f"policies: must be a non-empty list of policy names or null, got {cfg.policies!r}")
    workloads = _int_list(cfg, "workloads") if cfg.get("workloads") is not None else None
    plan = check_level(raw, [str(p) for p in cfg.policies] if cfg.policies else None, seeds, workloads,
                       cfg.agent_path)
    check_out_dir(out, bool(cfg.overwrite), multirun)
    return plan


def run_level(cfg: DictConfig, raw: dict[str, Any], console: Console, out: Path, multirun: bool,
              plan: LevelPlan | None = None) -> dict[str, Any]:
    """A device- or pipeline-level scenario (``gpusched.bench.level_runner``), after the same input checks."""
    plan = plan or check_level_bench(cfg, out, multirun)
    return run_level_bench(
        raw, plan.policies, plan.seeds, None, int(cfg.workers), out, bool(cfg.plots),
        [str(m) for m in cfg.table_metrics] if cfg.get("table_metrics") else None, console, cfg.agent_path, plan,
    )


_CHECKED: dict[str, Any] = {}
"""Inputs checked by :class:`CheckFirst` before Hydra wrote anything, by config (run_bench takes them)."""


def _task_cfg(cfg: DictConfig) -> DictConfig:
    """``cfg`` without its ``hydra`` node (what the task function gets)."""
    return OmegaConf.masked_copy(cfg, [str(k) for k in cfg if str(k) != "hydra"])


def _cfg_key(cfg: DictConfig) -> str:
    return OmegaConf.to_yaml(_task_cfg(cfg), resolve=True)


def check_inputs(cfg: DictConfig, out: Path, multirun: bool) -> Any:
    """:func:`check_level_bench` or :func:`check_bench`, as the scenario's level asks."""
    raw: dict[str, Any] = OmegaConf.to_container(cfg.scenario, resolve=True)  # type: ignore[assignment]
    if level_of(raw) != "cluster":
        return check_level_bench(cfg, out, multirun)
    return check_bench(cfg, out, multirun)


class CheckFirst(Callback):
    """Hydra callback (conf/bench.yaml): a single run's inputs are checked before Hydra creates the
    out_dir, its ``.hydra/`` and its log, so a bad input leaves nothing behind. A multirun's jobs are
    checked in their own folders. Hydra turns a callback's exceptions into warnings, so a bad input
    ends the process here (one line, exit code 2)."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        if config.get("perf"):
            return
        cfg = _task_cfg(config)
        _CHECKED.clear()
        try:
            _CHECKED[_cfg_key(cfg)] = check_inputs(cfg, Path(cfg.out_dir), False)
        except PROJECT_ERRORS as e:
            fail(str(e))


def run_bench(
    cfg: DictConfig, console: Console, out: Path | None = None, multirun: bool = False,
    on_done: Callable[[TaskResult], None] | None = None,
) -> dict[str, Any]:
    """One bench run of ``cfg`` (a composed ``bench`` config) writing ``out``; ``on_done`` is called
    after each finished simulation (a caller's own progress display)."""
    out = Path(cfg.out_dir) if out is None else out
    raw: dict[str, Any] = OmegaConf.to_container(cfg.scenario, resolve=True)  # type: ignore[assignment]
    checked = _CHECKED.pop(_cfg_key(cfg), None) if _CHECKED and not multirun else None
    if level_of(raw) != "cluster":
        return run_level(cfg, raw, console, out, multirun, checked)
    scn, policies, seeds, tasks = checked or check_bench(cfg, out, multirun)
    workloads = [int(w) for w in cfg.workloads] if cfg.get("workloads") is not None else None
    backend = backend_spec(cfg, out)
    workers = int(cfg.workers) if backend_of(backend).parallel else 1
    on = "" if backend.name == "sim" else f" ({backend.name} backend, one at a time; run folders in {backend.runs_dir})"
    console.print(
        f"[bold]{scn.name}[/]: {len(policies)} policies × {len(seeds)} seeds × "
        f"{len(workloads) if workloads is not None else len(scn.workload_names)} workload(s) = "
        f"{len(tasks)} runs on {workers} process(es){on}"
    )
    t0 = time.perf_counter()
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=False) as bar:
        job = bar.add_task("simulating" if backend.name == "sim" else "running", total=len(tasks))
        rows: dict[Task, Any] = {}  # a bar per running run: its tracked jobs finished, simulated time
        finished: set[Task] = set()

        def done(r: TaskResult) -> None:
            finished.add(r.task)
            if r.task in rows:
                bar.remove_task(rows.pop(r.task))
            bar.update(job, advance=1, description=f"{r.task.policy} seed {r.task.seed} {r.workload_name}")
            if on_done is not None:
                on_done(r)

        def moved(t: Task, p: RunProgress) -> None:
            if t in finished:
                return
            if t not in rows:
                rows[t] = bar.add_task("", total=p.jobs)
            name = scn.workload_names[t.workload]
            bar.update(rows[t], completed=p.finished,
                       description=f"  {t.policy} seed {t.seed} {name}: simulated {_sim_time(p.sim_s)}, jobs")

        interrupted = False
        try:
            with sigterm_as_interrupt():
                results = run_tasks(scn, tasks, workers=workers, agent_path=cfg.agent_path,
                                    check=bool(cfg.check_invariants), on_done=done, limits=run_limits(cfg),
                                    on_progress=moved, backend=backend)
        except Interrupted as e:
            results, interrupted = e.done, True
    wall = time.perf_counter() - t0
    block = aggregate(scn, results, sorted({r.task.seed for r in results}, key=seeds.index))
    doc = results_document(scn.name, seeds, block, paper_values(scn, block) or None, len(scn.workload_names))
    if "agent" in policies and cfg.agent_path:
        from gpusched.agents.adapter import describe_agent

        doc["agent"] = describe_agent(cfg.agent_path)  # which env, clairvoyant or not, training seed
        a = doc["agent"]
        console.print(f"agent: {a['path']} ({a['env_id']}, clairvoyant={a['clairvoyant']}, {a['algo']}, "
                      f"trained on {a['scenario']}, seed {a['seed']}, {a['num_timesteps']} steps)")
    if interrupted:
        doc["partial"] = True
        doc["runs_finished"] = len(results)
        doc["runs_planned"] = len(tasks)
    write_json_atomic(out / "results.json", doc)
    write_atomic(out / "results.csv", results_csv(doc))
    if interrupted:
        raise BenchInterrupted(f"interrupted: wrote the {len(results)} of {len(tasks)} runs that finished to "
                               f"{out / 'results.json'} (marked \"partial\": true)")
    print_report(doc, console, [str(m) for m in cfg.table_metrics] if cfg.get("table_metrics") else None)
    plot_s = time.perf_counter()
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
    plot_s = time.perf_counter() - plot_s
    pngs = ", jct_cdf.png, cluster_timeline.png" if cfg.plots else ""
    timing = f"{wall:.1f} s wall" + (f", plots {plot_s:.1f} s" if cfg.plots else "")
    console.print(f"wrote {out}/results.json, results.csv{pngs} (runs {timing})")
    return doc


def run_perf(cfg: DictConfig, console: Console) -> dict[str, Any]:
    """Replay speed: load + simulate the scenario with each policy ``perf_repeats`` times, one core."""
    check_keys(cfg)
    if check_backend(cfg.get("backend", "sim")) != "sim":
        raise ConfigError(f"backend: perf=true times the simulator (backend=sim), got backend={cfg.backend}")
    _pos_int(cfg, "perf_repeats")
    scn = scenario_from_cfg(cfg)
    policies = [str(p) for p in cfg.policies] if cfg.policies else ["fifo"]
    for p in policies:
        try:
            make_policy(p, scn, 0, cfg.agent_path)
        except (ValueError, TypeError) as e:
            raise ConfigError(f"policies: {p}: {e}") from None
    build_workloads(scn, 0)
    check_out_dir(Path(cfg.out_dir), True, False)
    rows = []
    for p in policies:
        loads, sims, cpus, bares, bare_cpus, n_jobs = [], [], [], [], [], 0
        for _ in range(int(cfg.perf_repeats)):
            t0 = time.perf_counter()
            topo = scn.cluster.topology()
            jobs = build_workloads(scn, 0, topo)[0][1]
            n_jobs = len(jobs)
            t1, c1 = time.perf_counter(), time.process_time()
            simulate(scn, make_policy(p, scn, 0), 0)
            t2, c2 = time.perf_counter(), time.process_time()
            loads.append(t1 - t0)
            sims.append(t2 - t1)
            cpus.append(c2 - c1)
            bare_wall, bare_cpu = time_replay(jobs, 1)  # the bare heap loop on the same jobs and core, right after
            bares.append(bare_wall)
            bare_cpus.append(bare_cpu)
        rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        med, cpu, bare = statistics.median(sims), statistics.median(cpus), statistics.median(bares)
        bare_cpu = statistics.median(bare_cpus)
        rows.append({"policy": p, "jobs": n_jobs, "load_s": statistics.median(loads), "simulate_s_median": med,
                     "simulate_s_all": sims, "cpu_s_median": cpu, "jobs_per_s": n_jobs / med,
                     "jobs_per_cpu_s": n_jobs / cpu, "peak_rss_mb": rss_mb, "bare_loop_s_median": bare,
                     "bare_loop_cpu_s_median": bare_cpu, "ratio_to_bare_loop": med / bare,
                     "cpu_ratio_to_bare_loop": cpu / bare_cpu})
        console.print(
            f"{scn.name} {p}: {n_jobs} jobs; simulate median of {len(sims)} runs {med:.2f} s wall "
            f"({n_jobs / med:,.0f} jobs/s), {cpu:.2f} s CPU ({n_jobs / cpu:,.0f} jobs/CPU-s); trace load "
            f"{statistics.median(loads):.2f} s (separate); peak RSS {rss_mb:.0f} MB"
        )
        console.print(f"{scn.name} {p}: bare heap loop on the same jobs {bare:.3f} s wall, {bare_cpu:.3f} s CPU; "
                      f"simulation / bare loop = {med / bare:.1f}x wall, {cpu / bare_cpu:.1f}x CPU")
    doc = {"scenario": scn.name, "perf": rows}
    write_json_atomic(Path(cfg.out_dir) / "perf.json", doc)
    return doc


def fail(msg: str, code: int = 2) -> NoReturn:
    """The one line an input error prints (on stderr), then exit ``code``."""
    line = " ".join(part.strip() for part in str(msg).splitlines() if part.strip())
    print(f"gpusched-bench: error: {line}", file=sys.stderr, flush=True)
    raise SystemExit(code)


def _job_dir(cfg: DictConfig) -> tuple[Path, bool]:
    """Where this job writes, and whether it is one job of a multirun (then: its own sweep folder)."""
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        hc = HydraConfig.get()
        if hc.mode == RunMode.MULTIRUN:
            return Path(hc.runtime.output_dir), True
    except ValueError:  # HydraConfig not set: called outside Hydra
        pass
    return Path(cfg.out_dir), False


def policy_names_help() -> str:
    """The policies of every level, read from their registries (``--help`` shows this)."""
    import textwrap

    from gpusched.baselines import POLICIES
    from gpusched_env.device import bench as device_bench
    from gpusched_env.pipeline.schedules import SCHEDULES

    lines = [f"cluster: {' '.join(POLICIES)} agent (with agent_path=FILE)",
             f"device: {' '.join(device_bench.policies())} agent", f"pipeline: {' '.join(SCHEDULES)} agent"]
    return "\n".join(textwrap.fill(x, 100, subsequent_indent="          ") for x in lines)


OmegaConf.register_new_resolver("gpusched_policies", policy_names_help, replace=True)


@hydra.main(config_path=str(CONF_DIR), config_name="bench", version_base="1.3")
def _main(cfg: DictConfig) -> None:
    console = wide_console()
    try:
        if cfg.get("perf"):
            run_perf(cfg, console)
        else:
            out, multirun = _job_dir(cfg)
            run_bench(cfg, console, out, multirun)
    except PROJECT_ERRORS as e:
        fail(str(e))
    except BenchInterrupted as e:
        print(f"gpusched-bench: {e}", file=sys.stderr, flush=True)
        raise SystemExit(130) from None
    except KeyboardInterrupt:
        print("gpusched-bench: interrupted before any run finished; nothing written", file=sys.stderr, flush=True)
        raise SystemExit(130) from None


def _scenario_arg(argv: list[str]) -> str:
    """The scenario named on the command line (the first of a sweep), else conf/bench.yaml's default."""
    for arg in reversed(argv):
        if arg.startswith("scenario="):
            return arg.split("=", 1)[1].split(",")[0]
    return "synthetic_philly"


def main() -> None:
    """Entry point: Hydra's own errors (a bad override, an out_dir it cannot create) are one line and
    exit code 2 as well; anything else (a bug) keeps its traceback."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    os.environ.setdefault("HYDRA_FULL_ERROR", "1")  # let exceptions reach this function
    try:
        _main()
    except (HydraException, OmegaConfBaseException) as e:
        fail(override_hint(str(e), _scenario_arg(sys.argv[1:])) or str(e))
    except OSError as e:
        if e.filename is None or isinstance(e, DataMissing):
            raise
        fail(f"out_dir: cannot create or write {e.filename} ({e.strerror})")


if __name__ == "__main__":
    main()
