"""The one place that builds a scenario's simulator for a run and runs a policy on it.

A run is (scenario, run seed, workload index): its jobs come from :func:`build_workload`, its
simulator seed from :func:`~gpusched_env.scenario.sim_seed`. ``gpusched-bench``, the Gymnasium envs
and the agents' evaluations all build through :func:`build_simulator`, so they simulate exactly the
same runs. Built workloads are kept in a :class:`WorkloadCache` (jobs are frozen, so sharing is safe).
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from collections.abc import Callable

import numpy as np

from gpusched_env.cluster.simulator import Simulator
from gpusched_env.cluster.watch import RunLimits, RunProgress, Watch
from gpusched_env.data import data_path
from gpusched_env.invariants import InvariantChecker
from gpusched_env.metrics import RunResult
from gpusched_env.policy import Policy, run_policy
from gpusched_env.scenario import Scenario, build_workloads, check_job_copies, check_jobs, run_rngs, sim_seed
from gpusched_env.topology import Topology
from gpusched_env.types import Job

Workload = tuple[str, list[Job]]


def build_workload(scn: Scenario, seed: int, index: int, topo: Topology | None = None) -> Workload:
    """Workload ``index`` of :func:`~gpusched_env.scenario.build_workloads` ``(scn, seed)``, built alone.

    Only PAL scenarios have several workloads. They share one workload generator, which draws the
    background arrivals of each distinct trace file in turn; the draws of the files before
    ``index``'s are repeated (arrays only, no jobs built), so the result is the same jobs."""
    topo = topo or scn.cluster.topology()
    w = scn.workload
    if w.kind != "pal" or len(w.paths) == 1:
        return build_workloads(scn, seed, topo)[index]
    from gpusched_env.workload.pal import background_gaps, with_background

    rng = run_rngs(seed)["workload"]
    target = w.paths[index]
    for rel in dict.fromkeys(w.paths):  # a path listed again gives the same jobs (and background)
        if rel == target:
            break
        if w.background_jobs:
            background_gaps(rng, w.background_jobs, w.background_rate_per_hour)
    where = str(data_path(target))
    max_gpus, max_jobs = w.max_gpus or topo.n_gpus, scn.cluster.max_jobs_per_gpu
    jobs = list(_pal_trace(where, w.strict, max_gpus))
    background = (with_background(jobs, rng=rng, n_background=w.background_jobs,
                                  rate_per_hour=w.background_rate_per_hour) if w.background_jobs else [])
    key = (where, w.strict, max_gpus, max_jobs, *_topology_key(topo))
    if key not in _CHECKED_TRACES:  # the trace's jobs are the same for every run seed: checked once
        check_jobs(jobs, topo, max_jobs, where)
        _CHECKED_TRACES.add(key)
    if background:  # copies of checked jobs with new ids and arrivals: only those are checked
        check_job_copies(jobs, background, where)
        jobs = jobs + background
    return scn.workload_names[index], jobs


_CHECKED_TRACES: set[tuple[object, ...]] = set()
"""PAL trace files (path, strict, max_gpus, max_jobs_per_gpu, cluster) whose jobs passed check_jobs."""


def _topology_key(topo: Topology) -> tuple[object, ...]:
    """What :func:`~gpusched_env.scenario.check_jobs` reads of a cluster (GPU types and memory)."""
    return (tuple(topo.gpu_types), np.asarray(topo.gpu_type_idx).tobytes(),
            np.asarray(topo.gpu_mem_gb, dtype=float).tobytes())


@functools.lru_cache(maxsize=16)
def _pal_trace(path: str, strict: bool, max_gpus: int) -> tuple[Job, ...]:
    """A PAL trace file's jobs, read once per process (they do not depend on the run seed)."""
    from gpusched_env.workload.pal import load_pal_workload

    return tuple(load_pal_workload(path, strict=strict, max_gpus=max_gpus).jobs)


def scenario_key(scn: Scenario) -> tuple[str, str, str]:
    """What a scenario's workloads depend on: its name, workload and cluster configuration."""
    return (scn.name, repr(scn.workload), repr(scn.cluster))


class WorkloadCache:
    """Built workloads of one scenario per (run seed, workload index), the least recently used
    dropped beyond ``size`` entries."""

    def __init__(self, scn: Scenario, topo: Topology | None = None, size: int = 64) -> None:
        self.scn = scn
        self.topo = topo or scn.cluster.topology()
        self.size = max(1, int(size))
        self.names = scn.workload_names
        self._built: OrderedDict[tuple[int, int], list[Job]] = OrderedDict()

    def get(self, seed: int, index: int) -> Workload:
        """Workload ``index`` under run seed ``seed``; workloads of one PAL trace file share their jobs."""
        w = self.scn.workload
        first = w.paths.index(w.paths[index]) if w.kind == "pal" else index
        key = (int(seed), first)
        jobs = self._built.get(key)
        if jobs is None:
            jobs = self._built[key] = build_workload(self.scn, seed, first, self.topo)[1]
            while len(self._built) > self.size:
                self._built.popitem(last=False)
        else:
            self._built.move_to_end(key)
        return self.names[index], jobs

    def all(self, seed: int) -> list[Workload]:
        """Every workload of the scenario under ``seed`` (as :func:`~gpusched_env.scenario.build_workloads`)."""
        return [self.get(seed, i) for i in range(len(self.names))]


_SHARED: OrderedDict[tuple[str, str, str], WorkloadCache] = OrderedDict()
_SHARED_MAX = 4


def shared_cache(scn: Scenario) -> WorkloadCache:
    """This process's cache for ``scn`` (a bench runs every policy on the same jobs)."""
    key = scenario_key(scn)
    cache = _SHARED.get(key)
    if cache is None:
        cache = _SHARED[key] = WorkloadCache(scn)
        while len(_SHARED) > _SHARED_MAX:
            _SHARED.popitem(last=False)
    return cache


def build_simulator(
    scn: Scenario, seed: int, workload: int = 0, check: bool = False, cache: WorkloadCache | None = None
) -> tuple[str, list[Job], Simulator]:
    """The simulator of one (run seed, workload), not yet run: (workload name, its jobs, simulator).
    ``cache``: where the workload is kept (default :func:`shared_cache`)."""
    cache = cache or shared_cache(scn)
    name, jobs = cache.get(seed, workload)
    model = scn.model_for(workload)
    v = model.variability
    fixed = (v.mode == "pal_artifact" and not v.profile_path and not v.outlier_prob > 0)
    sim = Simulator(
        cache.topo, jobs, model, seed=sim_seed(seed),
        slowdown_profile=_artifact_draw(cache.topo.n_gpus).copy() if fixed else None,
        checker=InvariantChecker() if check else None, max_jobs_per_gpu=scn.cluster.max_jobs_per_gpu,
    )
    return name, jobs, sim


@functools.lru_cache(maxsize=8)
def _artifact_draw(n_gpus: int) -> np.ndarray:
    """PAL's artifact draw of ``n_gpus`` GPUs (:func:`~gpusched_env.cluster.pal_draw.artifact_draw`),
    made once per process: without outliers, ``sample_factors`` draws nothing from the run's
    generator for it, so every run seed gets these factors (callers pass a copy)."""
    from gpusched_env.cluster.pal_draw import artifact_draw

    out = artifact_draw(n_gpus)
    out.flags.writeable = False
    return out


def simulate(
    scn: Scenario, policy: Policy, seed: int, workload: int = 0, check: bool = False,
    limits: RunLimits | None = None, report: Callable[[RunProgress], None] | None = None,
) -> tuple[str, RunResult]:
    """One deterministic simulation; returns (workload name, result). With ``limits`` a run past
    them stops with :class:`~gpusched_env.cluster.watch.RunLimitExceeded`; ``report`` gets its
    progress about twice a second."""
    name, jobs, sim = build_simulator(scn, seed, workload, check)
    if limits is not None or report is not None:
        label = f"{policy.name} seed {seed} on {name}"
        sim.watch = Watch(limits or RunLimits(None, None), sum(j.tracked for j in jobs), label, report,
                          all_jobs=len(jobs))
    run_policy(sim, policy)
    return name, sim.result()


def with_run_time(m: dict[str, float], result: RunResult) -> dict[str, float]:
    """Add ``avg_run_s``: mean of finish - first start over finished tracked jobs (runtime without
    the first wait; EaCO's "average runtime")."""
    runs = [r.finish_s - r.first_start_s for r in result.tracked
            if r.finish_s is not None and r.first_start_s is not None]
    if runs and "avg_run_s" not in m:
        m["avg_run_s"] = float(np.mean(runs))
    return m
