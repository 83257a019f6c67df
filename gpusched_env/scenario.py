"""Scenarios: a cluster, a workload and the simulator's physics, read from ``conf/scenario/NAME.yaml``.

Each scenario file documents the source of every number it sets. :func:`load_scenario` turns the YAML
into typed dataclasses (unknown keys are errors naming the key); :func:`build_workloads` makes the
jobs for one seed, from the one ``SeedSequence`` of that run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from gpusched_env.cluster.model import SimModel
from gpusched_env.config_util import ConfigError, from_dict
from gpusched_env.data import data_path
from gpusched_env.topology import NodeGroup, Topology
from gpusched_env.types import Job

CONF_DIR = Path(__file__).resolve().parent / "conf"  # shipped inside the package (wheel installs too)


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
    ``inline`` (the ``jobs`` list, for hand-checked toy scenarios).

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
class PaperClaim:
    """``scenario.paper``: a published figure and how to compute its simulated counterpart.

    ``kind``: ``improvement`` = 1 − metric(policy)/metric(baseline), averaged by ``aggregate``
    (``geomean`` of per-workload ratios, or ``mean``); ``change`` = metric(policy)/metric(baseline) − 1.
    """

    claim: str  # the published statement
    value: float  # the published figure
    metric: str = "avg_jct_s"  # metric compared
    policy: str = ""  # the paper's policy
    baseline: str = ""  # what it is compared against
    kind: str = "improvement"  # improvement (1 - ratio) or change (ratio - 1)
    aggregate: str = "geomean"  # geomean or mean over workloads
    source: str = ""  # where the figure is published


@dataclass(frozen=True)
class Scenario:
    name: str  # scenario name (file stem)
    description: str = ""  # one line shown in tables
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    workload: WorkloadConfig = field(default_factory=WorkloadConfig)
    model: SimModel = field(default_factory=SimModel)
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

    def round_for(self, policy: str) -> float | None:
        """The round length ``policy`` runs with: ``policies.<policy>.round_s`` where the scenario
        sets one, else ``round_s``; None means the policy's own default (``round_s: null``). The
        one place a round length is chosen."""
        rs = self.policies.get(policy, {}).get("round_s", self.round_s)
        return None if rs is None else float(rs)


def load_scenario(name_or_cfg: str | dict[str, Any], overrides: dict[str, Any] | None = None) -> Scenario:
    """A scenario by name (``conf/scenario/NAME.yaml``) or from an already-resolved mapping."""
    if isinstance(name_or_cfg, str):
        path = CONF_DIR / "scenario" / f"{name_or_cfg}.yaml"
        if not path.exists():
            known = sorted(p.stem for p in (CONF_DIR / "scenario").glob("*.yaml"))
            raise ConfigError(f"scenario {name_or_cfg!r}: no file {path}; known scenarios: {known}")
        cfg = yaml.safe_load(path.read_text()) or {}
        cfg.setdefault("name", name_or_cfg)
    else:
        cfg = dict(name_or_cfg)
    for key, value in (overrides or {}).items():
        cfg[key] = value
    return from_dict(Scenario, cfg, "scenario")


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
    """(name, jobs) for every workload of the scenario under ``seed``."""
    w = scn.workload
    rng = run_rngs(seed)["workload"]
    topo = topology or scn.cluster.topology()
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
    for name, rel in zip(scn.workload_names, w.paths, strict=True):
        jobs = load_pal_workload(data_path(rel), strict=w.strict, max_gpus=max_gpus).jobs
        if w.background_jobs:
            jobs = jobs + with_background(
                jobs, rng=rng, n_background=w.background_jobs, rate_per_hour=w.background_rate_per_hour
            )
        out.append((name, jobs))
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
