"""Scenarios: a cluster, a workload and the simulator's physics, read from ``conf/scenario/NAME.yaml``.

Each scenario file documents the source of every number it sets. :func:`load_scenario` turns the YAML
into typed dataclasses (unknown keys are errors naming the key); :func:`build_workloads` makes the
jobs for one seed, from the one ``SeedSequence`` of that run.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from gpusched_env.cluster.model import SimModel
from gpusched_env.config_util import CONF_DIR, ConfigError, from_dict, override
from gpusched_env.data import data_path
from gpusched_env.paper import PaperClaim
from gpusched_env.scenario_file import read_scenario_file
from gpusched_env.topology import NodeGroup, Topology
from gpusched_env.types import Job

__all__ = ["CONF_DIR", "PaperClaim", "Scenario", "load_scenario"]  # CONF_DIR, PaperClaim: re-exported


@dataclass(frozen=True)
class ClusterConfig:
    """``scenario.cluster``. With ``from_openb_nodes`` the node list comes from the openb trace."""

    nodes: list[NodeGroup] = field(default_factory=lambda: [NodeGroup(16, 4)])  # node groups (count, gpus_per_node, gpu_type, gpu_mem_gb)
    nodes_per_rack: int = 16  # nodes per rack (locality levels)
    max_jobs_per_gpu: int = 4  # most jobs one GPU may hold (co-location limit)
    from_openb_nodes: str | None = None  # data-relative path of an openb node list

    def topology(self) -> Topology:
        groups = self.nodes
        if self.from_openb_nodes:
            from gpusched_env.workload.openb import load_openb_nodes

            groups = load_openb_nodes(data_path(self.from_openb_nodes))
        return Topology.build(list(groups), self.nodes_per_rack)


@dataclass(frozen=True)
class WorkloadConfig:
    """``scenario.workload``: where jobs come from.

    kind: ``synthetic_philly`` (generator fitted to Philly; ``n_jobs``, ``load`` or ``rate_per_hour``),
    ``philly`` (philly.csv; ``virtual_cluster``, ``start``, ``end``, ``limit``), ``pal`` (one workload
    per entry of ``paths``, optional untracked background load), ``openb`` (pod list ``paths[0]``),
    ``inline`` (the ``jobs`` list, for hand-checked toy scenarios). A ``pal`` path listed more than once
    gives the same jobs (background included) each time, so workloads that differ only by their
    ``scenario.model_per_workload`` entry run the same jobs (``pal_locality``).

    Optional job attributes (EaCO): ``model_mix`` = {model: weight} for ``philly`` (default
    :data:`~gpusched_env.workload.mix.DEFAULT_MODEL_MIX`); ``deadline_factor`` f gives a share
    ``deadline_share`` of the jobs the deadline arrival + f x exclusive runtime (work_iters x the
    model's base iteration time on a V100); ``priority_share`` of the jobs get priority 1. Both shares
    are drawn per job from the workload generator after the jobs are built (nothing is drawn when
    they are unset, so other scenarios keep their jobs).
    """

    kind: str = "synthetic_philly"  # synthetic_philly / philly / pal / openb / inline
    paths: list[str] = field(default_factory=list)  # relative to the data folder
    names: list[str] = field(default_factory=list)  # workload names (default: file stems)
    n_jobs: int = 1000  # synthetic_philly: jobs to generate
    load: float | None = 0.8  # synthetic_philly: offered load (GPU-time / capacity) setting the arrival rate
    rate_per_hour: float | None = None  # synthetic_philly: arrival rate instead of load
    max_gpus: int | None = None  # largest job allowed (default: the cluster); larger = error
    virtual_cluster: str | None = None  # philly: keep one virtual cluster
    start: str | None = None  # philly: first submit time kept (wall clock)
    end: str | None = None  # philly: submit times before this (wall clock)
    limit: int | None = None  # philly: at most this many jobs
    strict: bool = True  # false: skip malformed rows and report how many
    background_rate_per_hour: float = 0.0  # pal: untracked background arrivals per hour
    background_jobs: int = 0  # pal: how many background jobs to generate
    jobs: list[dict[str, Any]] = field(default_factory=list)  # inline: Job fields per job
    model_mix: dict[str, float] | None = None  # philly: {model: weight} assigned to jobs
    deadline_factor: float | None = None  # deadline = arrival + factor x exclusive runtime
    deadline_share: float = 1.0  # share of jobs that get a deadline
    priority_share: float = 0.0  # share of jobs made high priority

    def __post_init__(self) -> None:
        kinds = ("synthetic_philly", "philly", "pal", "openb", "inline")
        if self.kind not in kinds:
            raise ValueError(f"kind must be one of {kinds}, got {self.kind!r}")
        if self.kind in ("philly", "pal", "openb") and not self.paths:
            raise ValueError(f"kind {self.kind!r} needs 'paths'")
        if self.deadline_factor is not None and self.deadline_factor <= 0:
            raise ValueError(f"deadline_factor must be > 0, got {self.deadline_factor}")
        if not (0.0 <= self.deadline_share <= 1.0 and 0.0 <= self.priority_share <= 1.0):
            raise ValueError("deadline_share and priority_share must be in [0, 1]")


@dataclass(frozen=True)
class Scenario:
    name: str  # scenario name (file stem)
    description: str = ""  # one line shown in tables
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    workload: WorkloadConfig = field(default_factory=WorkloadConfig)
    model: SimModel = field(default_factory=SimModel)
    model_per_workload: dict[str, dict[str, Any]] = field(default_factory=dict)  # {workload name: {key of model: value}}: that workload runs under model with these keys replaced (nested keys one by one), e.g. lf-1.0: {locality: {lf: 1.0}}
    round_s: float | None = 360.0  # round length of round-based policies (PAL/Blox default); null = each policy's own
    policies: dict[str, dict[str, Any]] = field(default_factory=dict)  # per-policy parameters
    default_policies: list[str] = field(default_factory=list)  # policies run when none are given
    paper: list[PaperClaim] = field(default_factory=list)  # published claims to reproduce
    sources: dict[str, str] = field(default_factory=dict)  # parameter -> where it comes from

    @property
    def workload_names(self) -> list[str]:
        w = self.workload
        if w.kind != "pal":
            return [self.name]
        return list(w.names) if w.names else [Path(p).stem for p in w.paths]

    def model_for(self, workload: int) -> SimModel:
        """The physics workload number ``workload`` runs under: ``model`` with that workload's entry
        of ``model_per_workload`` (keys of ``model``, nested ones key by key) applied. The one place
        a run's model is chosen (the simulator's and the policies' view of it, e.g. PAL's ``lf``)."""
        names = self.workload_names
        if not 0 <= workload < len(names):
            raise ConfigError(f"workload {workload}: out of range; {self.name} has {len(names)} workload(s)")
        name = names[workload]
        return override(self.model, self.model_per_workload.get(name), f"scenario.model_per_workload.{name}")

    def round_for(self, policy: str) -> float | None:
        """The round length ``policy`` runs with: ``policies.<policy>.round_s`` where the scenario
        sets one, else ``round_s``; None means the policy's own default (``round_s: null``). The
        one place a round length is chosen."""
        rs = self.policies.get(policy, {}).get("round_s", self.round_s)
        return None if rs is None else float(rs)


CLUSTER_DEFAULTS = ["/scenario_defaults/cluster@_here_", "_self_"]
"""The ``defaults`` list of a cluster scenario file: Hydra composes every ``scenario.model`` key's
default (conf/scenario_defaults/cluster.yaml, generated from the dataclasses) under the scenario, so
that ``scenario.model.KEY=VALUE`` works for every key. Read without Hydra, the list is dropped: the
dataclasses hold the same defaults."""


def load_scenario(name_or_cfg: str | dict[str, Any], overrides: dict[str, Any] | None = None) -> Scenario:
    """A scenario by name (``conf/scenario/NAME.yaml``) or from an already-resolved mapping."""
    if isinstance(name_or_cfg, str):
        cfg = read_scenario_file(name_or_cfg)
    else:
        cfg = dict(name_or_cfg)
    if "defaults" in cfg:
        d = cfg.pop("defaults")
        _need(d == CLUSTER_DEFAULTS, "scenario.defaults", f"{CLUSTER_DEFAULTS} (the model defaults) or absent", d)
    for key, value in (overrides or {}).items():
        cfg[key] = value
    scn = from_dict(Scenario, cfg, "scenario")
    check_scenario(scn)
    return scn


def override_hint(message: str, scenario: str) -> str | None:
    """A one-line explanation of Hydra's "Could not override 'scenario.KEY'" for scenario file
    ``scenario`` when KEY is a cluster-level key and the scenario is of another level (device,
    pipeline), which has no such key; None when that is not the case."""
    import re

    m = re.search(r"Could not override '(scenario\.([a-z_]+)[^']*)'", message)
    path = CONF_DIR / "scenario" / f"{scenario}.yaml"
    if m is None or not path.is_file():
        return None
    raw = yaml.safe_load(path.read_text()) or {}
    level = str(raw.get("level", "cluster"))
    top = m.group(2)
    if level == "cluster" or top in raw or top not in {f.name for f in dataclasses.fields(Scenario)}:
        return None
    return (f"{m.group(1)}: scenario {scenario} is a {level}-level scenario; scenario.{top} is a key of "
            f"cluster-level scenarios (the cluster simulator's), which {level}-level runs do not read; "
            f"{scenario}'s keys are {sorted(k for k in raw if k != 'defaults')}")


def _need(ok: bool, key: str, allowed: str, value: Any) -> None:
    if not ok:
        raise ConfigError(f"{key}: must be {allowed}, got {value!r}")


def check_scenario(scn: Scenario) -> None:
    """Values the dataclasses accept but no run can use: a ConfigError naming the config key.

    (Unknown keys and wrong types are caught by :func:`from_dict`; this checks ranges.)
    """
    from gpusched_env.catalog import GPUS

    c, w, m = scn.cluster, scn.workload, scn.model
    if not c.from_openb_nodes:
        _need(len(c.nodes) > 0, "scenario.cluster.nodes", "a non-empty list of node groups", c.nodes)
    for i, g in enumerate(c.nodes):
        key = f"scenario.cluster.nodes[{i}]"
        _need(g.gpu_type in GPUS, f"{key}.gpu_type", f"one of {sorted(GPUS)}", g.gpu_type)
        _need(g.count >= 1, f"{key}.count", "an integer >= 1", g.count)
        _need(g.gpus_per_node >= 1, f"{key}.gpus_per_node", "an integer >= 1", g.gpus_per_node)
        _need(g.gpu_mem_gb > 0, f"{key}.gpu_mem_gb", "> 0", g.gpu_mem_gb)
    _need(c.nodes_per_rack >= 1, "scenario.cluster.nodes_per_rack", "an integer >= 1", c.nodes_per_rack)
    _need(c.max_jobs_per_gpu >= 1, "scenario.cluster.max_jobs_per_gpu", "an integer >= 1", c.max_jobs_per_gpu)
    if w.kind == "synthetic_philly":
        _need(w.n_jobs >= 1, "scenario.workload.n_jobs", "an integer >= 1", w.n_jobs)
        if w.rate_per_hour is not None:
            _need(w.rate_per_hour > 0, "scenario.workload.rate_per_hour", "> 0", w.rate_per_hour)
        elif w.load is not None:
            _need(w.load > 0, "scenario.workload.load", "> 0", w.load)
        else:
            raise ConfigError("scenario.workload: synthetic_philly needs load or rate_per_hour (both are null)")
    if w.kind == "inline":
        _need(len(w.jobs) > 0, "scenario.workload.jobs", "a non-empty list of jobs (kind: inline)", w.jobs)
    if w.max_gpus is not None:
        _need(w.max_gpus >= 1, "scenario.workload.max_gpus", "an integer >= 1 or null", w.max_gpus)
    if w.limit is not None:
        _need(w.limit >= 1, "scenario.workload.limit", "an integer >= 1 or null", w.limit)
    _need(w.background_jobs >= 0, "scenario.workload.background_jobs", "an integer >= 0", w.background_jobs)
    if w.background_jobs:
        _need(w.background_rate_per_hour > 0, "scenario.workload.background_rate_per_hour",
              "> 0 when background_jobs > 0", w.background_rate_per_hour)
    if w.names:
        _need(len(w.names) == len(w.paths), "scenario.workload.names", f"one name per path ({len(w.paths)})", w.names)
    _check_model(m, "scenario.model")
    names = scn.workload_names
    if scn.model_per_workload:
        _need(len(set(names)) == len(names), "scenario.workload.names",
              "distinct workload names (scenario.model_per_workload is keyed by name)", names)
    for name in scn.model_per_workload:
        if name not in names:
            raise ConfigError(f"scenario.model_per_workload.{name}: no workload of that name; "
                              f"{scn.name}'s workloads are {names}")
        _check_model(scn.model_for(names.index(name)), f"scenario.model_per_workload.{name}")
    if scn.round_s is not None:
        _need(scn.round_s > 0, "scenario.round_s", "> 0 seconds or null", scn.round_s)
    for name, params in scn.policies.items():
        rs = params.get("round_s") if isinstance(params, dict) else None
        if rs is not None:
            _need(isinstance(rs, (int, float)) and rs > 0, f"scenario.policies.{name}.round_s", "> 0 seconds", rs)


def _check_finite(value: Any, where: str) -> None:
    """Every number in ``value`` (a config dataclass, list or mapping, walked recursively) is finite:
    a NaN or infinity in a model key is a ConfigError naming it (such a value reaches the event
    queue as a NaN time, and the run never ends)."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return
    if isinstance(value, (int, float)):
        _need(math.isfinite(value), where, "a finite number (not nan or inf)", value)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            _check_finite(getattr(value, f.name), f"{where}.{f.name}")
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _check_finite(v, f"{where}[{i}]")
    elif isinstance(value, dict):
        for k, v in value.items():
            _check_finite(v, f"{where}.{k}")


def _check_model(m: SimModel, where: str) -> None:
    """Range checks of one resolved model (``where``: its config key, e.g. ``scenario.model``)."""
    _check_finite(m, where)
    cs = m.sharing.count_slowdown
    _need(len(cs) > 0, f"{where}.sharing.count_slowdown", "a non-empty list (slowdown of k co-located jobs, "
          "index k-1; the last entry extrapolates)", cs)
    for i, k in enumerate(cs):  # < 1 would extrapolate to iteration times <= 0 for larger k
        _need(k >= 1, f"{where}.sharing.count_slowdown[{i}]", "a slowdown factor >= 1 (1 = none)", k)
    lf = m.locality.lf
    _need(math.isfinite(lf) and lf >= 1.0, f"{where}.locality.lf",
          "a finite cross-node slowdown factor >= 1 (1 = no penalty)", lf)
    _need(m.restart_cost_s >= 0, f"{where}.restart_cost_s", ">= 0", m.restart_cost_s)
    _need(m.start_cost_s >= 0, f"{where}.start_cost_s", ">= 0", m.start_cost_s)
    f = m.failures
    if f.mtbf_h is not None:
        _need(f.mtbf_h > 0, f"{where}.failures.mtbf_h", "> 0 hours or null (no failures)", f.mtbf_h)
    _need(f.repair_s >= 0, f"{where}.failures.repair_s", ">= 0", f.repair_s)
    _need(f.checkpoint_interval_s > 0, f"{where}.failures.checkpoint_interval_s", "> 0", f.checkpoint_interval_s)
    st = m.stragglers
    _need(st.sample_s > 0, f"{where}.stragglers.sample_s", "> 0", st.sample_s)
    _need(0 <= st.fraction_scale, f"{where}.stragglers.fraction_scale", ">= 0", st.fraction_scale)
    v = m.variability
    _need(0 <= v.outlier_prob <= 1, f"{where}.variability.outlier_prob", "in [0, 1]", v.outlier_prob)
    _need(v.outlier_factor > 0, f"{where}.variability.outlier_factor", "> 0", v.outlier_factor)
    _need(v.drift_sigma >= 0, f"{where}.variability.drift_sigma", ">= 0", v.drift_sigma)
    _need(v.drift_interval_s > 0, f"{where}.variability.drift_interval_s", "> 0", v.drift_interval_s)


def check_jobs(jobs: list[Job], topo: Topology, max_jobs_per_gpu: int, where: str) -> None:
    """Every job is well formed and could run on this cluster, else a ConfigError naming ``where``
    and the job: nothing is left in the queue for ever without a word."""
    from gpusched_env.catalog import find_model

    if not jobs:
        raise ConfigError(f"{where}: the workload has no jobs")
    seen: set[int] = set()
    mem = np.asarray(topo.gpu_mem_gb, dtype=float)
    types = np.asarray(topo.gpu_type_idx)
    room: dict[tuple[str | None, float], int] = {}  # (gpu_type, mem_gb) -> GPUs that can hold such a job
    for j in jobs:
        at = f"{where}: job {j.job_id}"
        if j.job_id in seen:
            raise ConfigError(f"{at}: job_id appears twice (job ids must be unique)")
        seen.add(j.job_id)
        _need(j.num_gpus >= 1, f"{at}: num_gpus", "an integer >= 1", j.num_gpus)
        _need(math.isfinite(j.arrival_s) and j.arrival_s >= 0, f"{at}: arrival_s", "a finite time >= 0", j.arrival_s)
        _need(math.isfinite(j.work_iters) and j.work_iters >= 0, f"{at}: work_iters", "a finite count >= 0",
              j.work_iters)
        _need(math.isfinite(j.mem_gb) and j.mem_gb >= 0, f"{at}: mem_gb", "a finite size >= 0", j.mem_gb)
        if find_model(j.model) is None:
            from gpusched_env.catalog import MODELS

            raise ConfigError(f"{at}: model: must be one of {sorted(MODELS)}, got {j.model!r}")
        if j.gpu_type is not None and j.gpu_type not in topo.gpu_types:
            raise ConfigError(f"{at}: gpu_type: must be one of this cluster's {list(topo.gpu_types)}, "
                              f"got {j.gpu_type!r}")
        n_ok = room.get((j.gpu_type, j.mem_gb))
        if n_ok is None:
            ok = mem + 1e-9 >= j.mem_gb
            if j.gpu_type is not None:
                ok &= types == topo.gpu_types.index(j.gpu_type)
            n_ok = room[(j.gpu_type, j.mem_gb)] = int(np.count_nonzero(ok))
        if j.num_gpus > n_ok:
            raise ConfigError(f"{at}: needs {j.num_gpus} GPU(s) with >= {j.mem_gb} GB"
                              f"{f' of type {j.gpu_type}' if j.gpu_type else ''}; the cluster has {n_ok}")


def check_job_copies(jobs: list[Job], copies: list[Job], where: str) -> None:
    """The checks of :func:`check_jobs` for ``copies`` of the (checked) ``jobs`` that differ from
    their sources only in id, arrival time and ``tracked`` (PAL's background load,
    :func:`gpusched_env.workload.pal.with_background`): every id unique across both lists, every
    arrival a finite time >= 0; the same ConfigError as :func:`check_jobs` for the first bad copy."""
    arrivals = np.fromiter((j.arrival_s for j in copies), dtype=np.float64, count=len(copies))
    ids = {j.job_id for j in jobs}
    ids.update(j.job_id for j in copies)
    if len(ids) == len(jobs) + len(copies) and bool(np.all(arrivals >= 0.0)) and bool(np.isfinite(arrivals).all()):
        return
    seen = {j.job_id for j in jobs}
    for j in copies:  # the first bad copy, named as check_jobs names it
        at = f"{where}: job {j.job_id}"
        if j.job_id in seen:
            raise ConfigError(f"{at}: job_id appears twice (job ids must be unique)")
        seen.add(j.job_id)
        _need(math.isfinite(j.arrival_s) and j.arrival_s >= 0, f"{at}: arrival_s", "a finite time >= 0", j.arrival_s)


FAILURE_MAX_TRIES = 1000.0
"""choice: most expected attempts a job may need to get one failure-free stretch (see check_failures)."""


def check_failures(jobs: list[Job], topo: Topology, m: SimModel, where: str) -> None:
    """A failure rate at which some tracked job would (almost) never finish is a ConfigError.

    A job keeps progress only once it has run without a failure of any of its nodes for
    T = restart_cost_s + the shorter of its shortest run (catalogue speed on the cluster's fastest GPU
    type) and checkpoint_interval_s (the work since the last checkpoint is lost). Its n nodes (at
    least num_gpus / the largest node) fail at rate n / mtbf, so a stretch of T needs on average
    exp(T n / mtbf) attempts; more than :data:`FAILURE_MAX_TRIES` is refused. The run ends only when
    every tracked job has finished, so one such job is enough to make it run for ever."""
    f = m.failures
    if not f.mtbf_h:
        return
    from gpusched_env.catalog import GPUS, model_spec

    fastest = max(GPUS[t].speed for t in topo.gpu_types)
    per_node = topo.max_gpus_per_node
    worst: tuple[float, Job, int, float, float] | None = None
    for j in jobs:
        if not j.tracked:
            continue
        run_s = j.work_iters * model_spec(j.model).base_iter_s / fastest
        cost = m.restart_cost_s
        stretch = min(cost + run_s, f.checkpoint_interval_s * (math.floor(cost / f.checkpoint_interval_s) + 1))
        nodes = -(-j.num_gpus // per_node)
        x = stretch * nodes / (f.mtbf_h * 3600.0)  # expected attempts: exp(x)
        if worst is None or x > worst[0]:
            worst = (x, j, nodes, stretch, run_s)
    if worst is None or worst[0] <= math.log(FAILURE_MAX_TRIES):
        return
    x, j, nodes, stretch, run_s = worst
    need_h = stretch * nodes / 3600.0 / math.log(FAILURE_MAX_TRIES)
    raise ConfigError(
        f"scenario.model.failures.mtbf_h: {f.mtbf_h:g} h leaves job {j.job_id} of {where} ({j.num_gpus} GPU(s) on "
        f">= {nodes} node(s)) practically no chance to finish: it keeps progress only after {stretch:.0f} s "
        f"without a failure of its nodes (restart_cost_s {m.restart_cost_s:g} s + the shorter of its shortest "
        f"run, {run_s:.0f} s, and checkpoint_interval_s, {f.checkpoint_interval_s:g} s), and its nodes fail "
        f"every {f.mtbf_h * 3600.0 / nodes:.0f} s on average, so it needs about e^{x:.1f} attempts (at most "
        f"{FAILURE_MAX_TRIES:g} allowed); set mtbf_h >= {need_h:.3g}, or a shorter checkpoint_interval_s")


def run_rngs(seed: int) -> dict[str, np.random.Generator]:
    """The run's generators, all children of one ``SeedSequence(seed)``: workload, simulator, policy."""
    ss = np.random.SeedSequence(seed)
    wl, sim, pol = ss.spawn(3)
    return {
        "workload": np.random.default_rng(wl),
        "sim_seed": np.random.default_rng(sim),
        "policy": np.random.default_rng(pol),
    }


def sim_seed(seed: int) -> int:
    """Integer seed for the simulator, derived from the run's SeedSequence."""
    return int(run_rngs(seed)["sim_seed"].integers(2**63 - 1))


def build_workloads(scn: Scenario, seed: int, topology: Topology | None = None) -> list[tuple[str, list[Job]]]:
    """(name, jobs) for every workload of the scenario under ``seed``; a workload with no jobs, or a
    job no GPU set of the cluster can hold, is a ConfigError naming the workload's source."""
    topo = topology or scn.cluster.topology()
    out = _build_workloads(scn, seed, topo)
    w = scn.workload
    sources = (["scenario.workload.jobs"] if w.kind == "inline" else
               [f"scenario {scn.name} (synthetic_philly)"] if w.kind == "synthetic_philly" else
               [str(data_path(p)) for p in w.paths[: len(out)]] if w.kind == "pal" else [str(data_path(w.paths[0]))])
    for i, ((_, jobs), where) in enumerate(zip(out, sources, strict=True)):
        check_jobs(jobs, topo, scn.cluster.max_jobs_per_gpu, where)
        check_failures(jobs, topo, scn.model_for(i), where)
    return out


def _build_workloads(scn: Scenario, seed: int, topo: Topology) -> list[tuple[str, list[Job]]]:
    w = scn.workload
    rng = run_rngs(seed)["workload"]
    max_gpus = w.max_gpus or topo.n_gpus
    if w.kind == "synthetic_philly":
        from gpusched_env.workload.synthetic import SyntheticPhilly

        gen = SyntheticPhilly().scaled(
            n_gpus=topo.n_gpus if w.load is not None else None,
            load=w.load if w.rate_per_hour is None else None,
            rate_per_hour=w.rate_per_hour,
            max_gpus=max_gpus,
        )
        return [(scn.name, gen.generate(rng, w.n_jobs))]
    if w.kind == "inline":
        jobs = [from_dict(Job, j, f"scenario.workload.jobs[{i}]") for i, j in enumerate(w.jobs)]
        return [(scn.name, with_slos(jobs, w, rng))]
    if w.kind == "philly":
        from gpusched_env.workload.philly import load_philly

        mix = {"model_mix": tuple(w.model_mix.items())} if w.model_mix else {}
        wl = load_philly(
            data_path(w.paths[0]), rng=rng, virtual_cluster=w.virtual_cluster, start=w.start, end=w.end,
            limit=w.limit, strict=w.strict, max_gpus=max_gpus, **mix,
        )
        return [(scn.name, with_slos(wl.jobs, w, rng))]
    if w.kind == "openb":
        from gpusched_env.workload.openb import load_openb

        wl = load_openb(data_path(w.paths[0]), rng=rng, strict=w.strict, max_gpus=topo.max_gpus_per_node)
        return [(scn.name, wl.jobs)]
    from gpusched_env.workload.pal import load_pal_workload, with_background

    out = []
    built: dict[str, list[Job]] = {}  # a path listed again gives the same jobs (and background)
    for name, rel in zip(scn.workload_names, w.paths, strict=True):
        if rel not in built:
            jobs = load_pal_workload(data_path(rel), strict=w.strict, max_gpus=max_gpus).jobs
            if not jobs:  # background jobs copy the trace's jobs: there would be none to copy
                raise ConfigError(f"{data_path(rel)}: the workload has no jobs")
            if w.background_jobs:
                jobs = jobs + with_background(
                    jobs, rng=rng, n_background=w.background_jobs, rate_per_hour=w.background_rate_per_hour
                )
            built[rel] = jobs
        out.append((name, built[rel]))
    return out


def with_slos(jobs: list[Job], w: WorkloadConfig, rng: np.random.Generator) -> list[Job]:
    """Deadlines and priorities per ``w`` (see :class:`WorkloadConfig`); ``jobs`` unchanged if unset.

    Per job (in list order), one uniform draw decides the deadline (< ``deadline_share``) and one the
    priority (< ``priority_share``); the exclusive runtime is work_iters x base_iter_s of the model.
    """
    if w.deadline_factor is None and w.priority_share <= 0:
        return jobs
    from dataclasses import replace

    from gpusched_env.catalog import model_spec

    u = rng.random((len(jobs), 2))
    out = []
    for j, (ud, up) in zip(jobs, u, strict=True):
        changes: dict[str, Any] = {}
        if w.deadline_factor is not None and ud < w.deadline_share:
            changes["deadline_s"] = j.arrival_s + w.deadline_factor * j.work_iters * model_spec(j.model).base_iter_s
        if up < w.priority_share:
            changes["priority"] = 1
        out.append(replace(j, **changes) if changes else j)
    return out
