"""The scheduler service: reads the queue, asks a project policy, and runs its decisions as processes.

Every poll (``poll_s``) the service checks its running jobs (finished, crashed, lost, cancelled) and,
on any change or when the policy's round is due, builds the same read-only
:class:`~gpusched_env.view.ClusterView` the simulator gives a policy (one :class:`ClusterState`
rebuilt from the queue), validates the policy's decisions with it, and carries them out:
``Start`` launches one process per node, ``Preempt`` stops the job (``stop_signal``, ``grace_s``,
then SIGKILL) and queues it again, ``Migrate`` stops it and launches it on its new GPUs. A policy that
raises or returns an invalid batch is logged and FIFO decides that round.

The queue is the only state: a service killed with ``kill -9`` and started again re-attaches to the
launches still running (pid and start time in each launch's claim file), records those that ended
while it was away, and relaunches those that were lost from their checkpoints. Nothing is lost and
no launch runs twice (:mod:`gpusched.real.service.runner`).

Without a shared filesystem (``shared_fs=false``) a stopped job's checkpoint folder is packed on its
node and unpacked on the node of its next launch (:mod:`gpusched.real.service.checkpoints`). Shadow mode on
Slurm follows the partition's own jobs instead of the queue (:mod:`gpusched.real.service.slurm_shadow`).
"""

from __future__ import annotations

import fcntl
import json
import math
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

from gpusched.real.service.checkpoints import MB, CheckpointStore
from gpusched.real.service.engine import Engine, LocalEngine, NodeInfo, NodeLost
from gpusched.real.service.gpus import MpsShare
from gpusched.real.service.node import EXITED, LOST, RUNNING
from gpusched.real.service.queue import ACTIVE, JobQueue, JobRow
from gpusched.real.service.spec import DEFAULT_MODEL
from gpusched_env.allocation import ClusterState
from gpusched_env.catalog import base_iter_s
from gpusched_env.config_util import ConfigError
from gpusched_env.policy import Policy
from gpusched_env.topology import NodeGroup, Topology
from gpusched_env.types import WHOLE_GPU, Decision, InvalidDecision, Job, Migrate, Preempt, Sharing, Start
from gpusched_env.view import ClusterView, JobProgress

# choice: the work a job without expected_duration_s is assumed to have (policies that read job
# length, e.g. sjf, see every such job as one hour long; non-clairvoyant policies never read it).
DEFAULT_DURATION_S = 3600.0
ENGINES = ("local", "ray", "slurm")
MODES = ("live", "shadow")


@dataclass(frozen=True)
class ServeConfig:
    """``gpusched-real serve`` keys (docs/DEPLOY.md)."""

    out_dir: str
    policy: str = "fifo"
    agent_path: str | None = None
    engine: str = "local"
    mode: str = "live"
    ray_address: str | None = None
    partition: str | None = None  # slurm engine: the partition whose nodes the policy schedules (None: all)
    scenario: str = "synthetic_philly"  # where the policy's parameters (round length, ...) come from
    seed: int = 0
    round_s: float | None = None  # None: the scenario's round for this policy
    nodes: int = 1  # local engine: stand-in nodes
    devices_per_node: int = 4  # local engine: devices per node
    device_kind: str = "cpu"  # local engine: cpu (stand-ins) | nvidia
    # choice: NVML sampling period on NVIDIA nodes (the replay samples every 0.5 s; a service runs
    # for days, so 1 s keeps the telemetry files at ~50 bytes per GPU per second)
    telemetry_s: float = 1.0
    poll_s: float = 0.2
    stop_signal: str = "SIGTERM"
    grace_s: float = 30.0
    backoff_s: float = 5.0  # crash n waits backoff_s * 2**(n-1) before the job may start again
    drain: bool = False  # on SIGTERM, stop the running jobs (they checkpoint) and queue them again
    shadow_policy: str = "fifo"
    exit_when_idle: bool = False  # stop once no job is pending or running (batch runs and tests)
    max_wall_s: float | None = None
    log_lines: int = 20
    shared_fs: bool = True  # false: checkpoints are node-local and move with a job (engine=ray or local)
    # choice: the largest checkpoint folder moved between nodes without a shared filesystem; the
    # service holds it in memory once and keeps a copy in out_dir/moved/
    checkpoint_max_mb: float = 1024.0

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise ConfigError(f"engine: must be one of {ENGINES}, got {self.engine!r}")
        if self.ray_address is not None and self.engine != "ray":
            raise ConfigError(f"ray_address: only used with engine=ray, got engine={self.engine}")
        if self.partition is not None and self.engine != "slurm":
            raise ConfigError(f"partition: only used with engine=slurm, got engine={self.engine}")
        if self.mode not in MODES:
            raise ConfigError(f"mode: must be one of {MODES}, got {self.mode!r}")
        if not self.stop_signal.startswith("SIG") or not hasattr(signal, self.stop_signal):
            raise ConfigError(f"stop_signal: expected a signal name such as SIGTERM, got {self.stop_signal!r}")
        if not self.shared_fs and self.engine == "slurm":
            raise ConfigError("shared_fs: engine=slurm needs out_dir on a filesystem every node shares (shared_fs=true)")
        for k in ("poll_s", "grace_s", "backoff_s", "nodes", "devices_per_node", "checkpoint_max_mb", "telemetry_s"):
            if getattr(self, k) is None or getattr(self, k) <= 0:
                raise ConfigError(f"{k}: must be > 0, got {getattr(self, k)!r}")


def build_engine(cfg: ServeConfig) -> Engine:
    if cfg.engine == "ray":
        from gpusched.real.service.ray_engine import RayEngine

        return RayEngine(cfg.out_dir, cfg.ray_address, cfg.devices_per_node if cfg.device_kind == "cpu" else None,
                         cfg.telemetry_s)
    if cfg.engine == "slurm":
        from gpusched.real.service.slurm_engine import SlurmEngine

        return SlurmEngine(cfg.out_dir, cfg.partition)
    return LocalEngine(cfg.out_dir, cfg.nodes, cfg.devices_per_node, cfg.device_kind, cfg.telemetry_s)


def job_of(row: JobRow, epoch: float) -> Job:
    """The simulator's Job for a queue row (arrival = submit time since the queue's epoch)."""
    s = row.spec
    dur = s.expected_duration_s if s.expected_duration_s is not None else DEFAULT_DURATION_S
    return Job(job_id=row.id, arrival_s=row.submit_t - epoch, num_gpus=s.gpus, work_iters=dur / base_iter_s(s.model),
               model=s.model, perf_class=s.perf_class, priority=s.priority)


class Service:
    """One scheduler service on the queue in ``cfg.out_dir``."""

    def __init__(self, cfg: ServeConfig, engine: Engine | None = None) -> None:
        from gpusched.real.config import make_policy
        from gpusched_env.scenario import load_scenario

        self.cfg = cfg
        self.out = Path(cfg.out_dir)
        self.q = JobQueue(self.out)
        self._lock = open(self.out / "service.lock", "w")
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ConfigError(f"out_dir: a service already runs on {self.out}") from None
        self.epoch = self.q.epoch()
        try:
            self.scn = load_scenario(cfg.scenario)
        except (KeyError, ValueError, FileNotFoundError) as e:
            raise ConfigError(f"scenario: {e}") from e
        kw: dict[str, Any] = {"round_s": cfg.round_s} if cfg.round_s is not None and _has_rounds(cfg.policy) else {}
        self.policy: Policy = make_policy(cfg.policy, self.scn, cfg.seed, cfg.agent_path, kw)
        self.fifo: Policy = make_policy("fifo", self.scn, cfg.seed, None, {})
        self.baseline: Policy = make_policy(cfg.shadow_policy, self.scn, cfg.seed, None, {})
        self.q.set_meta("policy", self.policy.name)
        self.engine = engine if engine is not None else build_engine(cfg)
        self.log: IO[str] = open(self.out / "service.log", "a")
        self.ckpts = None if cfg.shared_fs else CheckpointStore(self.out)
        self.slurm_obs: Any = None  # shadow mode on Slurm: the partition's own jobs (slurm_shadow)
        self._slurm_events: list[dict[str, Any]] = []
        if cfg.engine == "slurm" and cfg.mode == "shadow":
            from gpusched.real.service.slurm_shadow import SlurmObserver

            self.slurm_obs = SlurmObserver(self.out, self.engine.client)  # type: ignore[attr-defined]
            self.q.set_meta("shadow_config", json.dumps({
                "policy": cfg.policy, "agent_path": cfg.agent_path, "scenario": cfg.scenario, "seed": cfg.seed,
                "round_s": cfg.round_s}))
        self._waiting: set[int] = set()  # jobs held back for their node (checkpoint too big to move)
        self.stop_requested = False
        self.nodes: list[NodeInfo] = []
        self.alive: set[str] = set()
        self.topo: Topology | None = None
        self._last_round = -math.inf
        self._seen: frozenset[int] = frozenset()
        self._last_shadow = ""

    # -- bookkeeping ---------------------------------------------------------------------------
    def note(self, msg: str) -> None:
        self.log.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {msg}\n")
        self.log.flush()

    def refresh_nodes(self) -> list[str]:
        """Merge the engine's live nodes into the persisted node order; returns the nodes just lost."""
        live = {n.name: n for n in self.engine.nodes() if n.n_devices > 0}
        known = [NodeInfo(**d) for d in json.loads(self.q.meta("nodes") or "[]")]
        names = {n.name for n in known}
        added = [n for n in live.values() if n.name not in names]
        if added or self.topo is None:
            known += added
            self.q.set_meta("nodes", json.dumps([n.__dict__ for n in known]))
            self.nodes = known
            self.topo = Topology.build([NodeGroup(1, n.n_devices) for n in known])
            if added:
                self.note("nodes: " + ", ".join(f"{n.name} ({n.n_devices} {n.kind})" for n in known))
        lost = sorted(self.alive - set(live))
        self.alive = set(live)
        return lost

    def gpu_ids(self, node: str) -> list[int]:
        assert self.topo is not None
        k = [n.name for n in self.nodes].index(node)
        return list(self.topo.node_gpus(k))

    def locate(self, gpu: int) -> tuple[str, int]:
        """Global GPU id -> (node name, local index)."""
        assert self.topo is not None
        k = int(self.topo.gpu_node[gpu])
        return self.nodes[k].name, gpu - int(self.topo.node_first_gpu[k])

    # -- the loop ------------------------------------------------------------------------------
    def run(self) -> None:
        """Serve until SIGTERM/SIGINT (or idle, with ``exit_when_idle``)."""
        old = {s: signal.signal(s, self._on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        t0 = time.monotonic()
        self.refresh_nodes()
        self.note(f"start: policy={self.policy.name} mode={self.cfg.mode} engine={self.cfg.engine} "
                  f"gpus={self.topo.n_gpus if self.topo else 0}")
        try:
            while not self.stop_requested:
                changed = self.poll()
                rs = self.policy.round_s
                due = rs is not None and time.time() - self._last_round >= rs
                if (changed and self.policy.events) or due or (changed and rs is None):
                    self.schedule()
                if self.cfg.exit_when_idle and not self.q.jobs(ACTIVE) and (
                        self.slurm_obs is None or (self.slurm_obs.jobs and not self.slurm_obs.active())):
                    break
                if self.cfg.max_wall_s is not None and time.monotonic() - t0 > self.cfg.max_wall_s:
                    break
                time.sleep(self.cfg.poll_s)
        finally:
            self.shutdown()
            for s, h in old.items():
                signal.signal(s, h)

    def _on_signal(self, sig: int, frame: object) -> None:
        self.stop_requested = True

    def shutdown(self) -> None:
        if self.cfg.drain:
            rows = self.q.jobs(("running",))
            ended = self.stop(rows)
            for r in rows:
                self._after_stop(r, ended.get(r.id), "drained")
        self.note(f"stop: {len(self.q.jobs(('running',)))} job(s) left running")
        self.engine.close()
        self.log.close()
        self.q.close()
        self._lock.close()

    def poll(self) -> bool:
        """Check nodes and running jobs; True when the queue changed (a decision point)."""
        changed = False
        lost = set(self.refresh_nodes())
        if self.slurm_obs is not None:
            events = self.slurm_obs.observe()
            self._slurm_events += events
            changed |= bool(events)
        for row in self.q.jobs(("running",)):
            gone = {p["node"] for p in row.placement} & lost
            if gone:
                self.requeue(row, f"node {', '.join(sorted(gone))} left the cluster", lost=True, node_gone=True)
                changed = True
            elif row.cancel:
                ended = self.stop([row])
                self._finish_state(row, "cancelled", "by user", ended.get(row.id))
                changed = True
            else:
                changed |= self.check(row)
        now = time.time()
        eligible = frozenset(r.id for r in self.q.jobs(("pending",)) if r.not_before <= now)
        if eligible != self._seen:
            changed |= bool(eligible - self._seen)
            self._seen = eligible
        return changed

    def statuses(self, row: JobRow) -> list[tuple[str, int | None, bool]] | None:
        out = []
        for p in row.placement:
            try:
                out.append(self.engine.status(p["node"], row.id, p["launch"]))
            except NodeLost as e:
                self.requeue(row, str(e), lost=True, node_gone=True)
                return None
        return out

    def check(self, row: JobRow) -> bool:
        if not row.placement:  # cannot happen through launch(); a hand-edited queue, say
            self.requeue(row, "running without a placement", lost=True)
            return True
        st = self.statuses(row)
        if st is None:
            return True
        running = [s for s in st if s[0] == RUNNING]
        failed = [s for s in st if s[0] == LOST or (s[0] == EXITED and s[1] != 0 and not s[2])]
        if running and not failed:
            return False
        if running:  # one rank of a multi-node job ended badly: stop the others
            self.kill(row)
        self._ended(row, st)
        return True

    def _ended(self, row: JobRow, st: list[tuple[str, int | None, bool]]) -> None:
        """Record how a launch ended: finished, stopped by a signal, lost, or crashed."""
        if all(s[0] == EXITED and s[1] == 0 and not s[2] for s in st):
            self._finish_state(row, "finished", "exit 0", None)
        elif any(s[0] == EXITED and s[1] not in (0, None) and not s[2] for s in st):
            rc = next(s[1] for s in st if s[0] == EXITED and s[1] not in (0, None) and not s[2])
            self.crash(row, int(rc or 0))
        elif any(s[0] == LOST for s in st):
            self.requeue(row, "process lost (no exit status); restarting from its checkpoint", lost=True)
        else:
            self.requeue(row, "stopped by a signal; resuming from its checkpoint", lost=True)

    def _ran(self, row: JobRow, now: float) -> dict[str, Any]:
        dt = max(0.0, now - (row.started_t or now))
        return {"ran_s": row.ran_s + dt, "gpu_s": row.gpu_s + dt * len(row.gpu_ids)}

    def _finish_state(self, row: JobRow, state: str, detail: str, ended: list[Any] | None) -> None:
        if ended is not None and state == "cancelled" and all(s[0] == EXITED and s[1] == 0 and not s[2] for s in ended):
            state, detail = "finished", "exit 0 (before the cancel reached it)"
        now = time.time()
        self.q.update(row.id, state, detail, finish_t=now, exit_code=0 if state == "finished" else None,
                      placement=(), **self._ran(row, now))
        self.note(f"job {row.id}: {state} ({detail})")
        if self.ckpts is not None:
            self.ckpts.drop(row.id)

    def requeue(self, row: JobRow, detail: str, lost: bool = False, preempted: bool = False,
                node_gone: bool = False) -> None:
        """Back to the queue (a lost launch counts as a restart, a preemption as a preemption). Without
        a shared filesystem the checkpoint is packed first, unless its node is gone."""
        if not node_gone:
            self.pack(row)
        now = time.time()
        self.q.update(row.id, "pending", detail, placement=(), gpu_ids=(), started_t=None,
                      restarts=row.restarts + (1 if lost else 0),
                      preemptions=row.preemptions + (1 if preempted else 0), **self._ran(row, now))
        self.note(f"job {row.id}: pending again ({detail})")

    def crash(self, row: JobRow, rc: int) -> None:
        crashes = sum(1 for _, _, s, d in self.q.history(row.id) if s == "pending" and d.startswith("crashed")) + 1
        tail = self.engine.tail(row.placement[0]["node"], row.id, self.cfg.log_lines) if row.placement else []
        now = time.time()
        if crashes > row.spec.max_restarts:
            err = f"exit code {rc} after {crashes - 1} restart(s); last log lines:\n" + "\n".join(tail)
            self.q.update(row.id, "failed", f"exit code {rc}", finish_t=now, exit_code=rc, error=err,
                          placement=(), **self._ran(row, now))
            self.note(f"job {row.id}: failed, exit code {rc}")
            if self.ckpts is not None:
                self.ckpts.drop(row.id)
            return
        self.pack(row)
        wait = self.cfg.backoff_s * 2 ** (crashes - 1)
        self.q.update(row.id, "pending", f"crashed: exit code {rc}; restart {crashes} in {wait:g} s", placement=(),
                      gpu_ids=(), started_t=None, restarts=row.restarts + 1, not_before=now + wait,
                      **self._ran(row, now))
        self.note(f"job {row.id}: crashed with exit code {rc}; restart {crashes}/{row.spec.max_restarts} in {wait:g} s")

    # -- checkpoints without a shared filesystem -------------------------------------------------
    def checkpoint_dir(self, row: JobRow, node: str) -> str:
        """The job's checkpoint folder on ``node``: the spec's, else ``out_dir/checkpoints/<id>`` on a
        shared filesystem or ``out_dir/nodes/<node>/checkpoints/<id>`` on the node's own disk."""
        if row.spec.checkpoint_dir:
            return row.spec.checkpoint_dir
        base = self.out.resolve() if self.cfg.shared_fs else self.out.resolve() / "nodes" / node
        return str(base / "checkpoints" / str(row.id))

    def _max_bytes(self) -> int:
        return int(self.cfg.checkpoint_max_mb * MB)

    def _too_big(self, row: JobRow, node: str, size: int) -> None:
        msg = (f"job {row.id}: checkpoint of {size} bytes ({size / MB:.1f} MB) on node {node} is above checkpoint_max_mb="
               f"{self.cfg.checkpoint_max_mb:g}: not moved (raise checkpoint_max_mb or use a shared filesystem)")
        self.note(msg)
        self.q.update(row.id, None, msg)

    def pack(self, row: JobRow) -> None:
        """A job stopped on its rank-0 node: without a shared filesystem, pack that node's checkpoint
        folder into the service folder (or record that it is too big to move and stays there)."""
        if self.ckpts is None or not row.placement:
            return
        node = row.placement[0]["node"]
        try:
            size, data = self.engine.pack_checkpoint(node, self.checkpoint_dir(row, node), self._max_bytes())
        except NodeLost:
            return  # the node took its checkpoint along; an older packed copy, if any, is used
        self.ckpts.put(row.id, node, size, data)
        if data is None:
            self._too_big(row, node, size)
        else:
            self.note(f"job {row.id}: checkpoint packed on {node} ({size} bytes)")

    def _may_move(self, row: JobRow, gpus: tuple[int, ...]) -> bool:
        """False (with the one-line error) when migrating ``row`` to ``gpus`` would move a checkpoint
        above the limit off its node."""
        if self.ckpts is None or not row.placement:
            return True
        node = row.placement[0]["node"]
        if self.locate(gpus[0])[0] == node:
            return True
        try:
            size, _ = self.engine.pack_checkpoint(node, self.checkpoint_dir(row, node), -1)  # size only
        except NodeLost:
            return True
        if size <= self._max_bytes():
            return True
        self._too_big(row, node, size)
        return False

    def bring_checkpoint(self, row: JobRow, names: list[str]) -> bool:
        """Before a launch on ``names`` (rank 0 first): unpack the job's packed checkpoint on every node
        that does not hold it. False when the launch must not happen (the checkpoint is too big to move
        and its node is alive, or a node is gone)."""
        if self.ckpts is None:
            return True
        held = self.ckpts.held(row.id)
        if held is None:
            return True
        if not held.packed and held.node != names[0]:
            if held.node in self.alive:
                if row.id not in self._waiting:
                    self._waiting.add(row.id)
                    msg = (f"job {row.id}: waits for node {held.node}, which holds its checkpoint "
                           f"({held.size} bytes, above checkpoint_max_mb={self.cfg.checkpoint_max_mb:g})")
                    self.note(msg)
                    self.q.update(row.id, None, msg)
                return False
            self.note(f"job {row.id}: its checkpoint was on node {held.node}, which is gone; starting without it")
            self.ckpts.drop(row.id)
            return True
        self._waiting.discard(row.id)
        if held.packed:
            try:
                data = self.ckpts.data(row.id)
            except OSError as e:
                self.note(f"job {row.id}: packed checkpoint unreadable ({e}); starting without it")
                self.ckpts.drop(row.id)
                return True
            for nm in names:
                if nm == held.node:
                    continue
                try:
                    self.engine.unpack_checkpoint(nm, self.checkpoint_dir(row, nm), data)
                except NodeLost:
                    return False  # the next poll sees the node gone
                self.note(f"job {row.id}: checkpoint from {held.node} unpacked on {nm} ({len(data)} bytes)")
        self.ckpts.moved_to(row.id, names[0])
        return True

    # -- stopping ------------------------------------------------------------------------------
    def stop(self, rows: list[JobRow]) -> dict[int, list[Any]]:
        """The preemption protocol: stop_signal to every part, up to grace_s to exit, then SIGKILL.
        Returns each job's final part statuses."""
        sig = getattr(signal, self.cfg.stop_signal)
        for r in rows:
            self._signal(r, sig)
        deadline = time.monotonic() + self.cfg.grace_s
        left = {r.id: r for r in rows}
        ended: dict[int, list[Any]] = {}
        while left:
            for r in list(left.values()):
                st = self.statuses(r)
                if st is None:
                    left.pop(r.id)
                elif not any(s[0] == RUNNING for s in st):
                    ended[r.id] = st
                    left.pop(r.id)
            if not left:
                break
            if time.monotonic() > deadline:
                for r in left.values():
                    self.note(f"job {r.id}: no exit within {self.cfg.grace_s:g} s of {self.cfg.stop_signal}: SIGKILL")
                    self._signal(r, signal.SIGKILL)
                deadline = math.inf
            time.sleep(0.05)
        return ended

    def kill(self, row: JobRow) -> None:
        self._signal(row, signal.SIGKILL)

    def _signal(self, row: JobRow, sig: int) -> None:
        for p in row.placement:
            try:
                self.engine.signal(p["node"], row.id, p["launch"], sig)
            except NodeLost:
                pass

    def _after_stop(self, row: JobRow, st: list[Any] | None, why: str) -> None:
        """A stopped job: finished if it completed before the signal reached it, else queued again."""
        if st is not None and all(s[0] == EXITED and s[1] == 0 and not s[2] for s in st):
            self._finish_state(row, "finished", "exit 0", None)
        else:
            self.requeue(row, why, preempted=True)

    # -- deciding ------------------------------------------------------------------------------
    def build(self, rows: list[JobRow], now_wall: float) -> tuple[ClusterState, ClusterView]:
        assert self.topo is not None
        state = ClusterState(self.topo, self.scn.cluster.max_jobs_per_gpu)
        down = [g for n in self.nodes if n.name not in self.alive for g in self.gpu_ids(n.name)]
        if down:
            state.set_up(down, False)
        by_id = {r.id: r for r in rows}
        n = self.topo.n_gpus
        placed = [r for r in rows if r.state == "running" and all(0 <= g < n and state.up[g] for g in r.gpu_ids)]
        placed_ids = {r.id for r in placed}
        for r in rows:  # a running job whose GPUs are gone is left out until the next poll requeues it
            if r.id in placed_ids or (r.state == "pending" and r.not_before <= now_wall):
                state.submit(job_of(r, self.epoch))
        for r in placed:
            sh = r.placement[0].get("sharing") if r.placement else None
            sharing = Sharing(*sh) if sh else WHOLE_GPU
            try:
                state.apply([Start(r.id, tuple(r.gpu_ids), sharing)], (r.started_t or now_wall) - self.epoch)
            except InvalidDecision as e:  # never offered to the policy as pending: it is running
                state._dequeue(state.jobs[r.id])
                self.note(f"job {r.id}: running where the cluster cannot hold it ({e})")
        for node, held in self.engine.foreign_gpus().items():  # other users' jobs (Slurm): never given away
            if node in self.alive:
                state.set_up([g for g in self.gpu_ids(node) if state.free_mask[g]][:held], False)

        def progress(job_id: int) -> JobProgress:
            r = by_id[job_id]
            base = base_iter_s(r.spec.model)
            dt = max(0.0, now_wall - r.started_t) if r.state == "running" and r.started_t else 0.0
            done = (r.ran_s + dt) / base
            work = state.jobs[job_id].work_iters
            return JobProgress(done, max(work - done, 0.0), r.gpu_s + dt * len(r.gpu_ids),
                               1.0 / base if dt > 0 else 0.0, r.restarts)

        view = ClusterView(state, now_wall - self.epoch, np.ones((self.topo.n_gpus, 4)), progress)
        return state, view

    def _decide(self, policy: Policy, view: ClusterView) -> list[Decision] | None:
        try:
            return list(policy.decide(view))
        except Exception as e:  # a policy bug must not stop the cluster
            self.note(f"policy {policy.name} raised {type(e).__name__}: {e}; FIFO decides this round")
            return None

    def schedule(self) -> None:
        self._last_round = now_wall = time.time()
        if self.slurm_obs is not None:
            self.shadow_slurm(now_wall)
            return
        rows = self.q.jobs(ACTIVE)
        state, view = self.build(rows, now_wall)
        if not view.pending and not view.running:
            return
        if self.cfg.mode == "shadow":
            self.shadow(rows, now_wall)
            return
        decisions = self._decide(self.policy, view)
        applied = None
        if decisions is not None:
            try:
                applied = state.apply(decisions, view.now)
            except InvalidDecision as e:
                self.note(f"policy {self.policy.name}: {e}; FIFO decides this round")
        if applied is None:
            state, view = self.build(rows, now_wall)
            decisions = self._decide(self.fifo, view) or []
            try:
                applied = state.apply(decisions, view.now)
            except InvalidDecision as e:
                self.note(f"fifo: {e}; no decision this round")
                return
        self.carry_out(decisions or [], {r.id: r for r in rows}, now_wall)

    def carry_out(self, decisions: list[Decision], rows: dict[int, JobRow], now_wall: float) -> None:
        decisions = [d for d in decisions if not isinstance(d, Migrate) or self._may_move(rows[d.job_id], d.gpus)]
        stops = [rows[d.job_id] for d in decisions if isinstance(d, (Preempt, Migrate))]
        ended = self.stop(stops) if stops else {}
        for d in decisions:
            r = rows[d.job_id]
            if isinstance(d, Preempt):
                self._after_stop(r, ended.get(r.id), "preempted")
            elif isinstance(d, Migrate):
                st = ended.get(r.id)
                if st is not None and all(s[0] == EXITED and s[1] == 0 and not s[2] for s in st):
                    self._finish_state(r, "finished", "exit 0", None)
                    continue
                self.pack(r)
                self.q.update(r.id, None, "migrating", migrations=r.migrations + 1, **self._ran(r, time.time()))
                moved = self.q.get(r.id)
                assert moved is not None
                if not self.launch(moved, d.gpus, d.sharing):
                    self.requeue(moved, "migration not carried out; queued again", preempted=True, node_gone=True)
        for d in decisions:
            if isinstance(d, Start):
                self.launch(rows[d.job_id], d.gpus, d.sharing)

    def _dry_run(self, pol: Policy, state: ClusterState, view: ClusterView) -> dict[str, Any]:
        """``pol``'s decisions on ``view``, applied to ``state`` only (nothing is launched): its name,
        the decisions and the error that made them invalid, if any."""
        ds = self._decide(pol, view)
        err = None
        if ds is not None:
            try:
                state.apply(ds, view.now)
            except InvalidDecision as e:
                err = str(e)
        return {"name": pol.name, "decisions": [_describe(d) for d in ds or []], "error": err}

    def shadow(self, rows: list[JobRow], now_wall: float) -> None:
        """Log the policy's decisions next to the baseline's; launch nothing."""
        out: dict[str, Any] = {}
        for key, pol in (("policy", self.policy), ("baseline", self.baseline)):
            state, view = self.build(rows, now_wall)
            out[key] = self._dry_run(pol, state, view)
        line = json.dumps(out, sort_keys=True)
        if line != self._last_shadow:
            self._last_shadow = line
            with open(self.out / "shadow.jsonl", "a") as f:
                f.write(json.dumps({"t": round(now_wall - self.epoch, 3), **out}, sort_keys=True) + "\n")

    def shadow_slurm(self, now_wall: float) -> None:
        """Log what Slurm did since the last line next to what the policy decides on the same jobs as
        Slurm placed them (shadow mode on Slurm; launch nothing)."""
        from gpusched.real.service.slurm_shadow import live_state

        recs = self.slurm_obs.jobs
        state = live_state(recs, [n.name for n in self.nodes], [n.n_devices for n in self.nodes], self.epoch,
                           self.scn.cluster.max_jobs_per_gpu)
        base = base_iter_s(DEFAULT_MODEL)

        def progress(job_id: int) -> JobProgress:
            r = recs[job_id]
            dt = max(0.0, now_wall - r.start_t) if r.start_t is not None else 0.0
            work = state.jobs[job_id].work_iters
            return JobProgress(dt / base, max(work - dt / base, 0.0), dt * r.gpus, 1.0 / base if dt > 0 else 0.0, 0)

        view = ClusterView(state, now_wall - self.epoch, np.ones((state.topology.n_gpus, 4)), progress)
        if not view.pending and not view.running and not self._slurm_events:
            return
        pol = self._dry_run(self.policy, state, view)
        line = json.dumps({"slurm": self._slurm_events, "policy": pol}, sort_keys=True)
        if self._slurm_events or line != self._last_shadow:
            self._last_shadow = line
            with open(self.out / "shadow.jsonl", "a") as f:
                f.write(json.dumps({"t": round(now_wall - self.epoch, 3), "slurm": self._slurm_events,
                                    "running": sorted(view.running), "pending": sorted(view.pending_ids),
                                    "policy": pol}, sort_keys=True) + "\n")
        self._slurm_events = []

    # -- launching -----------------------------------------------------------------------------
    def launch(self, row: JobRow, gpus: tuple[int, ...], sharing: Sharing = WHOLE_GPU) -> bool:
        """Start one launch of ``row`` on ``gpus``; False when it was held back (its checkpoint)."""
        parts: dict[str, list[int]] = {}
        for g in gpus:
            node, local = self.locate(g)
            parts.setdefault(node, []).append(local)
        n = row.launches  # launches before this one = the restart count the job sees
        s = row.spec
        names = list(parts)
        if not self.bring_checkpoint(row, names):
            return False
        env = {**dict(s.env), "GPUSCHED_JOB_ID": str(row.id),
               "GPUSCHED_RESTART_COUNT": str(n), "GPUSCHED_STOP_SIGNAL": self.cfg.stop_signal}
        mps = None
        if sharing.is_mps:
            env["GPUSCHED_SM_PCT"] = f"{sharing.sm_pct:g}"
            # the client priority follows the policy's MPS priority where it sets one, else the job's
            mps = MpsShare(sharing.sm_pct, sharing.priority or s.priority)
        if len(names) > 1:
            addr = next(x.address for x in self.nodes if x.name == names[0])
            env.update(MASTER_ADDR=addr, MASTER_PORT=str(self.engine.free_port(names[0])), WORLD_SIZE=str(len(names)))
        placement = [{"node": nm, "local": parts[nm], "launch": n,
                      **({"sharing": [sharing.kind, sharing.sm_pct, sharing.priority, sharing.oversubscribe]}
                         if i == 0 and sharing != WHOLE_GPU else {})} for i, nm in enumerate(names)]
        now = time.time()
        # recorded before the processes start: a launch recorded but never started is declared
        # dead by the next status check after a crash, so it can never run later
        self.q.update(row.id, "running", f"launch {n} on GPUs {list(gpus)} ({', '.join(names)})", launches=n + 1,
                      started_t=now, first_start_t=row.first_start_t or now, gpu_ids=gpus, placement=placement)
        argv = ["/bin/sh", "-c", s.command[0]] if s.shell else list(s.command)
        for rank, nm in enumerate(names):
            ckpt = self.checkpoint_dir(row, nm)
            e = {**env, "GPUSCHED_NODE": nm, "GPUSCHED_CHECKPOINT_DIR": ckpt}
            if len(names) > 1:
                e.update(RANK=str(rank), NODE_RANK=str(rank))
            try:
                self.engine.launch(nm, row.id, n, argv, e, s.workdir, parts[nm], ckpt, mps)
            except NodeLost:
                pass  # the next poll requeues the job
            except OSError as err:
                self.note(f"job {row.id}: cannot launch on {nm}: {err}")
        return True


def _has_rounds(policy: str) -> bool:
    """Whether the heuristic ``policy`` takes a round length (``round_s`` is not passed to event-driven
    policies nor to a trained agent, which keeps the rounds of the env it was trained in)."""
    from gpusched.baselines import POLICIES, policy_params

    return policy in POLICIES and "round_s" in policy_params(policy)


def _describe(d: Decision) -> dict[str, Any]:
    out: dict[str, Any] = {"op": type(d).__name__.lower(), "job": d.job_id}
    if isinstance(d, (Start, Migrate)):
        out["gpus"] = list(d.gpus)
    return out
