"""Shadow mode against Slurm's own scheduler: what Slurm did next to what the policy would have done.

With ``engine=slurm mode=shadow`` the service launches nothing. Every poll, :class:`SlurmObserver`
reads the partition's jobs that users submitted to Slurm directly (``squeue -t all`` with submit,
start and end times; :meth:`gpusched.real.service.slurm.SlurmClient.job_times`) and keeps what it saw in
``out_dir/slurm_jobs.json`` (written atomically). Every round the service appends to
``shadow.jsonl`` what Slurm did since the last line and the decisions the policy takes on the same
jobs as Slurm placed them (:func:`live_state`).

``gpusched-real report`` then compares both on the exact same jobs (:func:`compare`): those Slurm
ran to the end (start and end known, at least one GPU). Slurm's side is its observed times; the
policy's side is a replay of those jobs in the cluster simulator (:func:`replay`): the partition's
shape (nodes x GPUs), each job arriving at its submit time and running for its observed duration.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from gpusched.real.service.slurm import SlurmClient, SlurmRecord
from gpusched.real.service.spec import DEFAULT_MODEL
from gpusched_env.allocation import ClusterState
from gpusched_env.atomic import write_json_atomic
from gpusched_env.catalog import ModelSpec, base_iter_s
from gpusched_env.cluster.model import SimModel
from gpusched_env.cluster.simulator import Simulator
from gpusched_env.cluster.variability import VariabilityConfig
from gpusched_env.metrics import RunResult, compute_metrics
from gpusched_env.policy import Policy, run_policy
from gpusched_env.topology import NodeGroup, Topology
from gpusched_env.types import InvalidDecision, Job, JobRecord, Start

OBSERVED = "slurm_jobs.json"
# choice: Slurm's times have a resolution of 1 s; a job recorded as running 0 s ran under a second
MIN_RUN_S = 0.5
# A Slurm job's model is unknown: the catalogue's fallback (class A, base_iter_s of an unknown model)
# with util 1.0 and no memory or parameters (choice: nothing is known; a job alone keeps its GPUs busy)
UNKNOWN = ModelSpec(DEFAULT_MODEL, "A", base_iter_s(DEFAULT_MODEL), 1.0, 0.0, 0.0, None, "choice")


class SlurmObserver:
    """The partition's jobs not submitted by gpusched, as Slurm reports them, kept across restarts."""

    def __init__(self, out_dir: str | Path, client: SlurmClient) -> None:
        self.path = Path(out_dir) / OBSERVED
        self.client = client
        self.jobs: dict[int, SlurmRecord] = load_observed(out_dir)

    def observe(self) -> list[dict[str, Any]]:
        """Read Slurm once; returns what changed since the last call (submit, start, end events)."""
        events: list[dict[str, Any]] = []
        for r in self.client.job_times():
            if r.ours:
                continue
            old = self.jobs.get(r.slurm_id)
            if old is None:
                events.append({"job": r.slurm_id, "event": "submit", "gpus": r.gpus})
            if r.start_t is not None and (old is None or old.start_t is None):
                events.append({"job": r.slurm_id, "event": "start", "nodes": list(r.nodes), "gpus": r.gpus})
            if r.end_t is not None and (old is None or old.end_t is None):
                events.append({"job": r.slurm_id, "event": "end", "state": r.state})
            if old != r and not (old is not None and old.end_t is not None):  # an ended job is final
                self.jobs[r.slurm_id] = r
        if events:
            write_json_atomic(self.path, {str(k): asdict(v) for k, v in sorted(self.jobs.items())})
        return events

    def active(self) -> bool:
        return any(r.end_t is None for r in self.jobs.values())


def load_observed(out_dir: str | Path) -> dict[int, SlurmRecord]:
    path = Path(out_dir) / OBSERVED
    if not path.exists():
        return {}
    try:
        raw = json.loads(path.read_text())
        return {int(k): SlurmRecord(**{**v, "nodes": tuple(v["nodes"])}) for k, v in raw.items()}
    except (ValueError, TypeError, KeyError) as e:
        raise ValueError(f"{path}: not a file of observed Slurm jobs ({e})") from None


def compared_jobs(records: dict[int, SlurmRecord], n_gpus: int) -> list[SlurmRecord]:
    """The jobs both sides are measured on: ended after running (start and end known), with 1 to
    ``n_gpus`` GPUs, in submit order."""
    keep = [r for r in records.values() if r.ended and r.submit_t is not None and r.start_t is not None
            and r.end_t is not None and 1 <= r.gpus <= n_gpus]
    return sorted(keep, key=lambda r: (r.submit_t or 0.0, r.slurm_id))


def run_s(r: SlurmRecord) -> float:
    assert r.start_t is not None and r.end_t is not None
    return max(r.end_t - r.start_t, MIN_RUN_S)


def sim_job(r: SlurmRecord, epoch: float) -> Job:
    """The simulator's job for a Slurm record: its GPUs, arriving at its submit time, with the work
    that takes its observed run time alone on whole GPUs of one node (the catalogue's fallback model,
    whose iteration time is :func:`base_iter_s`)."""
    assert r.submit_t is not None
    return Job(job_id=r.slurm_id, arrival_s=r.submit_t - epoch, num_gpus=r.gpus,
               work_iters=run_s(r) / base_iter_s(DEFAULT_MODEL), model=DEFAULT_MODEL)


def slurm_side(jobs: list[SlurmRecord], n_gpus: int) -> RunResult:
    """Slurm's run of ``jobs`` as the simulator's result type (times since the first submit)."""
    epoch = min(r.submit_t or 0.0 for r in jobs)
    recs = []
    for r in jobs:
        assert r.start_t is not None and r.end_t is not None
        recs.append(JobRecord(sim_job(r, epoch), first_start_s=r.start_t - epoch, finish_s=r.end_t - epoch,
                              gpu_seconds=(r.end_t - r.start_t) * r.gpus))
    makespan = max((x.finish_s or 0.0) for x in recs) - min(x.job.arrival_s for x in recs)
    return RunResult(recs, n_gpus, makespan, 0.0, sum(x.gpu_seconds for x in recs))


def replay_model(restart_cost_s: float) -> SimModel:
    """The simulator's physics for a replay: identical GPUs (no profile of the lab's GPUs exists:
    ``variability=none``), no stragglers or failures (Slurm's run had none we could see), the
    scenario's restart cost for the policy's preemptions."""
    return SimModel(variability=VariabilityConfig(mode="none"), restart_cost_s=restart_cost_s, timeline=False)


def replay(jobs: list[SlurmRecord], node_gpus: list[int], policy: Policy, model: SimModel, seed: int = 0,
           max_jobs_per_gpu: int = 4) -> RunResult:
    """The policy's run of ``jobs`` in the simulator on nodes of ``node_gpus`` GPUs."""
    epoch = min(r.submit_t or 0.0 for r in jobs)
    topo = Topology.build([NodeGroup(1, g) for g in node_gpus])
    sim = Simulator(topo, [sim_job(r, epoch) for r in jobs], model, seed=seed, models={DEFAULT_MODEL: UNKNOWN},
                    max_jobs_per_gpu=max_jobs_per_gpu)
    run_policy(sim, policy)
    return sim.result()


def compare(records: dict[int, SlurmRecord], node_gpus: list[int], policy: Policy, model: SimModel,
            seed: int = 0, max_jobs_per_gpu: int = 4) -> dict[str, Any]:
    """Both sides on the same jobs: ``{"jobs": [ids], "slurm": metrics, "policy": metrics,
    "per_job": {id: {"slurm": [start, finish], "policy": [start, finish]}}}`` (seconds since the first
    submit); empty metrics when no job has ended yet."""
    n_gpus = sum(node_gpus)
    jobs = compared_jobs(records, n_gpus)
    if not jobs:
        return {"jobs": [], "slurm": {}, "policy": {}, "per_job": {}}
    ours, theirs = slurm_side(jobs, n_gpus), replay(jobs, node_gpus, policy, model, seed, max_jobs_per_gpu)
    sim = {x.job.job_id: x for x in theirs.records}
    per_job = {str(x.job.job_id): {"slurm": [x.first_start_s, x.finish_s],
                                   "policy": [sim[x.job.job_id].first_start_s, sim[x.job.job_id].finish_s]}
               for x in ours.records}
    return {"jobs": [r.slurm_id for r in jobs], "slurm": compute_metrics(ours), "policy": compute_metrics(theirs),
            "per_job": per_job}


def live_state(records: dict[int, SlurmRecord], node_names: list[str], node_gpus: list[int], epoch: float,
               max_jobs_per_gpu: int = 4) -> ClusterState:
    """The partition now as the policy would see it: Slurm's pending jobs waiting, its running jobs
    on GPUs of the nodes Slurm put them on (the first free ones: Slurm does not say which)."""
    topo = Topology.build([NodeGroup(1, g) for g in node_gpus])
    state = ClusterState(topo, max_jobs_per_gpu)
    default = 3600.0  # choice: as the service's DEFAULT_DURATION_S: a running job's length is unknown
    for r in sorted(records.values(), key=lambda r: (r.submit_t or 0.0, r.slurm_id)):
        if r.end_t is not None or r.submit_t is None or not 1 <= r.gpus <= topo.n_gpus:
            continue
        job = Job(job_id=r.slurm_id, arrival_s=r.submit_t - epoch, num_gpus=r.gpus,
                  work_iters=default / base_iter_s(DEFAULT_MODEL), model=DEFAULT_MODEL)
        state.submit(job)
        if r.start_t is None:
            continue
        gpus: list[int] = []
        for n in r.nodes:
            if n in node_names:
                k = node_names.index(n)
                gpus += [g for g in topo.node_gpus(k) if state.free_mask[g]][:r.gpus_per_node]
        try:
            state.apply([Start(r.slurm_id, tuple(gpus))], r.start_t - epoch)
        except InvalidDecision:  # not where we can place it (a node outside the partition): left out
            state._dequeue(state.jobs[r.slurm_id])
    return state
