"""Build cluster views for policy tests without a simulator: a ClusterState plus a stub progress."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gpusched_env.allocation import ClusterState
from gpusched_env.policy import Policy
from gpusched_env.topology import NodeGroup, Topology
from gpusched_env.types import Decision, Job, Start
from gpusched_env.view import ClusterView, JobProgress


def make_state(nodes: int, gpus_per_node: int, max_jobs: int = 4, mem_gb: float = 32.0) -> ClusterState:
    return ClusterState(Topology.build([NodeGroup(nodes, gpus_per_node, "V100", mem_gb)]), max_jobs)


def job(
    jid: int,
    n: int = 1,
    arrival: float | None = None,
    *,
    model: str = "resnet50",
    cls: str = "A",
    work: float = 1000.0,
    mem: float = 0.0,
    prio: int = 0,
    deadline: float | None = None,
) -> Job:
    return Job(
        jid,
        float(jid if arrival is None else arrival),
        n,
        work,
        model,
        perf_class=cls,
        mem_gb=mem,
        priority=prio,
        deadline_s=deadline,
    )


def run_on(state: ClusterState, jid: int, gpus: tuple[int, ...], now: float = 0.0) -> None:
    """Start a submitted job on ``gpus`` through the normal validation."""
    state.apply([Start(jid, gpus)], now)


@dataclass
class Progress:
    """Stub progress: defaults from the job, overridable per job id."""

    state: ClusterState
    done: dict[int, float] = field(default_factory=dict)
    attained: dict[int, float] = field(default_factory=dict)
    ips: dict[int, float] = field(default_factory=dict)

    def __call__(self, jid: int) -> JobProgress:
        j = self.state.jobs[jid]
        done = self.done.get(jid, 0.0)
        return JobProgress(done, j.work_iters - done, self.attained.get(jid, 0.0), self.ips.get(jid, 0.0), 0)


def make_view(
    state: ClusterState,
    now: float = 0.0,
    slowdown: np.ndarray | None = None,
    progress: Progress | None = None,
    util: np.ndarray | None = None,
) -> ClusterView:
    n = state.topology.n_gpus
    sd = np.ones((n, 4)) if slowdown is None else slowdown
    return ClusterView(state, now, sd, progress or Progress(state), gpu_util=util)


def step(policy: Policy, state: ClusterState, view: ClusterView) -> list[Decision]:
    """Ask the policy, apply its decisions (must be valid), return them."""
    out = policy.decide(view)
    state.apply(out, view.now)
    return out
