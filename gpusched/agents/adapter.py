"""A saved model as a policy: ``load_agent_policy(path, scn)`` -> :class:`AgentPolicy` (a
``gpusched/Cluster-v0`` model) or :class:`PreemptAgentPolicy` (``gpusched/Cluster-v1``), name ``agent``.

At each ``decide(view)`` it builds the same observation and mask as the env
(:class:`gpusched_env.envs.observe.DecisionBuilder`, :class:`gpusched_env.envs.preempt.PreemptBuilder`)
and takes the model's actions until "done" or until nothing valid is left, returning the batch
(v0: starts; v1: starts, migrations, preemptions). Its decision points are the env's: every event
plus a tick every ``round_s`` seconds; a v1 policy keeps the env's round clock
(:class:`gpusched_env.rounds.RoundClock`, shown every call), so its preemptions fall on
the same round points. The env id and arguments the model was trained with travel inside
``model.zip`` (member ``gpusched_env.json``), so the file alone is enough; :func:`describe_agent`
says which env and whether the model saw job lengths (``clairvoyant``).

Any cluster shape: a set model (``tokens``) pads its node rows to the cluster decided on; a flat model
sees a cluster of another node count than its own through a :class:`gpusched.agents.fold.NodeFold`
(its actions name window slots and options, no node), logged once per shape. :func:`check_shapes`
refuses a model whose stored queue window or options do not fit its network.
"""

from __future__ import annotations

import inspect
import json
import logging
import math
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from gpusched.agents.fold import NodeFold
from gpusched_env.config_util import ConfigError
from gpusched_env.envs.kernels import NODE_FEATURES
from gpusched_env.envs.observe import DecisionBuilder, JobCache, obs_size
from gpusched_env.envs.options import OptionSet, pal_params
from gpusched_env.envs.preempt import PreemptBuilder, n_actions_v1, obs_size_v1
from gpusched_env.envs.tokens import (
    pad_mask,
    pad_mask_v1,
    to_tokens,
    to_tokens_v1,
    window_action,
    window_action_v1,
)
from gpusched_env.rounds import ROUND_EPS_S, RoundClock
from gpusched_env.scenario import Scenario
from gpusched_env.topology import Topology
from gpusched_env.types import Decision
from gpusched_env.view import ClusterView

META_MEMBER = "gpusched_env.json"
ALGOS = ("maskable_ppo", "ppo", "dqn")
ENV_V0, ENV_V1 = "gpusched/Cluster-v0", "gpusched/Cluster-v1"
PREEMPT_PARAMS = ("min_run_rounds",)  # scenario.policies.agent keys a Cluster-v1 model takes (PreemptAgentPolicy)
log = logging.getLogger("gpusched.agents")
_NOTED: set[tuple[str, int, tuple[int, ...]]] = set()  # (model, N, node sizes) already logged in this process


def write_meta(model_zip: str | Path, meta: dict[str, Any]) -> None:
    """Add the env arguments (and algorithm name) to a saved SB3 ``model.zip``."""
    with zipfile.ZipFile(model_zip, "a") as z:
        if META_MEMBER in z.namelist():
            raise ValueError(f"{model_zip} already holds {META_MEMBER}")
        z.writestr(META_MEMBER, json.dumps(meta, indent=2, sort_keys=True))


def read_meta(model_zip: str | Path) -> dict[str, Any]:
    """The env arguments stored in a gpusched-train ``model.zip`` (or a shipped ``pretrained:NAME``,
    :mod:`gpusched.agents.pretrained`); ConfigError naming the file when it is missing, not a zip, or not a
    gpusched-train model."""
    from gpusched.agents.pretrained import resolve

    where = f"agent_path {str(model_zip)!r}"
    model_zip = resolve(model_zip)
    if not Path(model_zip).is_file():
        raise ConfigError(f"{where}: no such file (a model.zip written by gpusched-train)")
    try:
        with zipfile.ZipFile(model_zip) as z:
            if META_MEMBER not in z.namelist():
                raise ConfigError(f"{where}: not a gpusched-train model (no {META_MEMBER} inside)")
            meta = json.loads(z.read(META_MEMBER))
    except (zipfile.BadZipFile, OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"{where}: not a readable model.zip ({type(e).__name__}: {e})") from None
    if not isinstance(meta, dict):
        raise ConfigError(f"{where}: {META_MEMBER} is not a JSON object")
    return dict(meta)


def _moved_policy_class(path: str | Path) -> dict[str, Any] | None:
    """SB3 pickles the policy class by module path: a model saved before the packages moved under
    ``gpusched`` (docs/MOVED.md) names ``agents.set_extractor.SetPolicy``; it loads as the class's new
    path. None (nothing replaced) for any other model."""
    try:
        with zipfile.ZipFile(path) as z:
            module = json.loads(z.read("data")).get("policy_class", {}).get("__module__")
    except (KeyError, zipfile.BadZipFile, OSError, json.JSONDecodeError, UnicodeDecodeError, AttributeError):
        return None  # SB3's own load says what is wrong
    if module == "agents.set_extractor":
        from gpusched.agents.set_extractor import SetPolicy

        return {"policy_class": SetPolicy}
    return None


def load_model(path: str | Path, algo: str | None = None) -> Any:
    """Load the SB3 model of a ``model.zip`` written by gpusched-train, or of ``pretrained:NAME`` (CPU)."""
    from gpusched.agents.pretrained import resolve

    algo = algo or read_meta(path).get("algo", "maskable_ppo")
    path = resolve(path)
    custom = _moved_policy_class(path)
    if algo == "maskable_ppo":
        from sb3_contrib import MaskablePPO

        return MaskablePPO.load(str(path), device="cpu", custom_objects=custom)
    if algo == "ppo":
        from stable_baselines3 import PPO

        return PPO.load(str(path), device="cpu", custom_objects=custom)
    if algo == "dqn":
        from stable_baselines3 import DQN

        return DQN.load(str(path), device="cpu", custom_objects=custom)
    raise ConfigError(f"agent_path {str(path)!r}: unknown algo {algo!r} in {META_MEMBER}; known: {ALGOS}")


def load_model_checked(path: str | Path, meta: dict[str, Any], where: str) -> Any:
    """:func:`load_model` on one torch thread; any failure to load is a ConfigError naming ``where``."""
    import torch

    torch.set_num_threads(1)
    try:
        return load_model(path, meta.get("algo"))
    except ConfigError:
        raise
    except Exception as e:  # SB3 raises many kinds on a damaged archive
        raise ConfigError(f"{where}: cannot load the model ({type(e).__name__}: {e})") from None


def predict(model: Any, obs: np.ndarray, mask: np.ndarray, masked: bool) -> int:
    """The model's deterministic action (with the mask when the algorithm supports it)."""
    if masked:
        a, _ = model.predict(obs, action_masks=mask, deterministic=True)
    else:
        a, _ = model.predict(obs, deterministic=True)
    return int(a)


def env_args(meta: dict[str, Any]) -> dict[str, Any]:
    """The arguments of the env a model was trained on: those stored in ``model.zip`` (``env``), and
    for every one not stored (or stored as null) the env's own default, read from its signature
    (Cluster-v1's defaults over Cluster-v0's), so no default is restated here."""
    from gpusched_env.envs import ClusterEnv, ClusterV1Env

    classes = [ClusterEnv, ClusterV1Env] if str(meta.get("env_id", ENV_V0)) == ENV_V1 else [ClusterEnv]
    defaults: dict[str, Any] = {}
    for cls in classes:
        for name, p in inspect.signature(cls).parameters.items():
            if p.default is not inspect.Parameter.empty:
                defaults[name] = p.default
    stored = {k: v for k, v in dict(meta.get("env", {})).items() if v is not None}
    return {**defaults, **stored}


class _ModelPolicy:
    """What every cluster-level model policy holds: the model, its algorithm, its round length, its
    queue window, action cap and placement options."""

    def __init__(self, model: Any, meta: dict[str, Any], scn: Scenario, workload: int = 0) -> None:
        env = env_args(meta)
        self.k = int(env["queue_slots"])
        self.fifo_slots = int(env["fifo_slots"])
        self.max_actions = int(env["max_actions_per_decision"])
        self.options = OptionSet(tuple(env["options"]), pal_params(scn, env["pal"], workload))
        self.name = "agent"
        self.model = model
        self.algo = meta.get("algo", "maskable_ppo")
        self.masked = self.algo == "maskable_ppo"
        rs = dict(meta.get("env", {})).get("round_s")
        self.round_s: float | None = scn.round_for("agent") if rs is None else float(rs)
        self.events = True
        self.cache = JobCache()
        self._n = 0
        self.path = ""  # the agent_path it was loaded from (for the log)
        self.model_nodes: int | None = None  # a flat model: its node rows (check_shapes); None: a set model
        self._fold_topo: Topology | None = None  # the topology the fold below was built for
        self._fold: NodeFold | None = None  # None: the cluster has the model's node count (or a set model)

    def _flat_obs(self, obs: np.ndarray, topo: Topology) -> np.ndarray:
        """A flat model's observation: the builder's own, or on a cluster of another node count its node
        block folded to the model's node rows (:class:`gpusched.agents.fold.NodeFold`)."""
        if topo is not self._fold_topo:
            self._fold_topo = topo
            n = self.model_nodes
            self._fold = None if n is None or n == topo.n_nodes else NodeFold.of(n, topo)
            if self._fold is not None:
                note_fold(self.path, self._fold)
        return obs if self._fold is None else self._fold.apply(obs)

    def _tick(self) -> None:
        """Count a decision; the job cache is cleared every 512 of them."""
        self._n += 1
        if self._n % 512 == 0:
            self.cache.clear()


class AgentPolicy(_ModelPolicy):
    """A trained model as a :class:`gpusched_env.policy.Policy` (sticky starts, no preemption)."""

    def __init__(self, model: Any, meta: dict[str, Any], scn: Scenario, workload: int = 0) -> None:
        super().__init__(model, meta, scn, workload)
        env = env_args(meta)
        # a set model (tokens): padded to the trained maximum, or to this cluster's nodes when it has more
        self.tokens = bool(env["tokens"])
        self.n_nodes = scn.cluster.topology().n_nodes
        self.max_nodes = max(int(env["max_nodes"]), self.n_nodes)
        self.max_queue = int(env["max_queue"])

    def _action(self, b: DecisionBuilder) -> int:
        if not self.tokens:
            return predict(self.model, self._flat_obs(b.observe(), b.topo), b.mask(), self.masked)
        from gpusched.agents.set_extractor import set_action

        p = len(self.options)
        n_nodes = b.topo.n_nodes  # the cluster decided on: the service's may differ from the scenario's
        obs = to_tokens(b.observe(), n_nodes, self.k, max(self.max_nodes, n_nodes), self.max_queue)
        a = set_action(self.model.policy, obs, pad_mask(b.mask(), self.k, p, self.max_queue))
        return window_action(a, self.k, p, self.max_queue)

    def decide(self, view: ClusterView) -> list[Decision]:
        self._tick()
        b = DecisionBuilder(view, self.options, self.k, self.fifo_slots, self.cache)
        for _ in range(self.max_actions):
            if not b.any_valid():
                break
            a = self._action(b)
            if a == b.done_action or b.act(a) is None:
                break  # (the env: "done", or an invalid action repeated until the cap, then done)
        return list(b.decisions)


class PreemptAgentPolicy(_ModelPolicy):
    """A trained ``gpusched/Cluster-v1`` model as a policy (starts, preemptions, migrations).

    ``min_run_rounds`` (``scenario.policies.agent.min_run_rounds``, default 0: off) is a play-time guard
    against preemption cycles: a running job may be lifted (preempted or migrated) only once it has run
    at least ``min_run_rounds`` round lengths on its current GPUs (since its last start or move,
    ``Allocation.since_s``; 1 ms of slack, as :class:`~gpusched_env.rounds.RoundClock`), as Tiresias's lease. It only removes lift actions from the mask the
    model is given; starts and "done" keep the builder's validity, so some action always stays valid."""

    def __init__(self, model: Any, meta: dict[str, Any], scn: Scenario, workload: int = 0,
                 min_run_rounds: float = 0.0) -> None:
        super().__init__(model, meta, scn, workload)
        ok = isinstance(min_run_rounds, int | float) and not isinstance(min_run_rounds, bool)
        if not (ok and math.isfinite(min_run_rounds) and min_run_rounds >= 0):
            raise ConfigError(f"scenario.policies.agent.min_run_rounds: expected a number >= 0, got {min_run_rounds!r}")
        if min_run_rounds > 0 and self.round_s is None:
            raise ConfigError("scenario.policies.agent.min_run_rounds: needs a round length (the model's round_s or "
                              "the scenario's), found none")
        self.min_run_rounds = float(min_run_rounds)
        env = env_args(meta)
        self.r = int(env["running_slots"])
        self.clairvoyant = bool(env["clairvoyant"])
        self.migrations = bool(env["migrations"])
        self.clock = RoundClock(self.round_s)
        # a set model (tokens): padded as trained, or to this cluster's nodes when it has more
        self.tokens = bool(env["tokens"])
        self.max_nodes = int(env["max_nodes"])
        self.max_queue = int(env["max_queue"])
        self.max_running = int(env["max_running"])

    def guard_mask(self, b: PreemptBuilder) -> np.ndarray:
        """The builder's mask with the guard applied: the lift of a running slot whose job has run
        less than ``min_run_rounds`` round lengths on its current GPUs is removed (a copy; the
        builder's own mask when the guard is off or removes nothing)."""
        m = b.mask()
        if self.min_run_rounds <= 0 or self.round_s is None:
            return m
        lifts = m[b.lift0 : b.done_action]
        if not lifts.any():
            return m
        now, running = b.view.now, b.view.running
        quantum = self.min_run_rounds * self.round_s - ROUND_EPS_S  # as RoundClock: Q rounds after a start is Q rounds
        young = [i for i, jid in enumerate(b.running_window) if lifts[i] and now - running[jid].since_s < quantum]
        if not young:
            return m
        g = m.copy()
        g[b.lift0 + np.asarray(young)] = False
        return g

    def _action(self, b: PreemptBuilder, mask: np.ndarray) -> int:
        if not self.tokens:
            return predict(self.model, self._flat_obs(b.observe(), b.topo), mask, self.masked)
        from gpusched.agents.set_extractor import set_action

        p = len(self.options)
        n_nodes = b.topo.n_nodes  # the cluster decided on: the service's may differ from the scenario's
        obs = to_tokens_v1(b.observe(), n_nodes, self.k, self.r, max(self.max_nodes, n_nodes), self.max_queue,
                           self.max_running)
        a = set_action(self.model.policy, obs, pad_mask_v1(mask, self.k, self.r, p, self.max_queue,
                                                           self.max_running))
        return window_action_v1(a, self.k, self.r, p, self.max_queue, self.max_running)

    def decide(self, view: ClusterView) -> list[Decision]:
        self._tick()
        b = PreemptBuilder(view, self.options, self.k, self.fifo_slots, self.r, self.cache,
                           clairvoyant=self.clairvoyant, is_round=self.clock.tick(view.now),
                           migrations=self.migrations)
        for _ in range(self.max_actions):
            if not b.any_valid():
                break
            mask = self.guard_mask(b)
            if mask is not b.mask() and not mask[:-1].any():
                break  # only "done" is left once the guard is applied
            a = self._action(b, mask)
            if a == b.done_action or b.act(a) is None:
                break
        return b.decisions


def describe_agent(path: str | Path) -> dict[str, Any]:
    """What results should say about a trained model: its file, env id, whether it was clairvoyant
    (saw job lengths), algorithm, scenario, training seed and steps."""
    meta = read_meta(path)
    env_id = str(meta.get("env_id", ENV_V0))
    # a v0 model's window is ordered by work estimate and shows it: it is clairvoyant
    clair = bool(env_args(meta)["clairvoyant"]) if env_id == ENV_V1 else True
    return {"path": str(path), "env_id": env_id, "clairvoyant": clair, "algo": meta.get("algo"),
            "scenario": meta.get("scenario"), "seed": meta.get("seed"), "num_timesteps": meta.get("num_timesteps"),
            "bc_teacher": meta.get("bc_teacher")}


def load_agent_policy(
    path: str | Path, scn: Scenario, *, workload: int = 0, **params: Any
) -> AgentPolicy | PreemptAgentPolicy:
    """The policy named ``agent`` of gpusched-bench: ``agent_path=FILE`` (a gpusched-train model.zip),
    for workload number ``workload`` of ``scn`` (its PAL option plans with that workload's lf).
    ``params`` (``scenario.policies.agent``): ``min_run_rounds`` (a Cluster-v1 model only; the
    guard of :class:`PreemptAgentPolicy`)."""
    meta = read_meta(path)
    env_id = str(meta.get("env_id", ENV_V0))
    known = PREEMPT_PARAMS if env_id == ENV_V1 else ()
    unknown = sorted(set(params) - set(known))
    if unknown:
        raise ConfigError(f"scenario.policies.agent: unknown parameter(s) for policy 'agent' ({env_id} model): "
                          f"{unknown}; known: {list(known)}")
    model = load_model_checked(path, meta, f"agent_path {str(path)!r}")
    policy: AgentPolicy | PreemptAgentPolicy
    if env_id == ENV_V1:
        policy = PreemptAgentPolicy(model, meta, scn, workload, **params)
    elif env_id == ENV_V0:
        policy = AgentPolicy(model, meta, scn, workload)
    else:
        raise ConfigError(f"agent_path {str(path)!r}: env_id {env_id!r} in {META_MEMBER}; known: {[ENV_V0, ENV_V1]}")
    policy.path = str(path)
    check_shapes(policy, model, meta, scn, path)
    if policy.model_nodes is not None and policy.model_nodes != scn.cluster.topology().n_nodes:
        note_fold(policy.path, NodeFold.of(policy.model_nodes, scn.cluster.topology()))
    return policy


def note_fold(path: str, fold: NodeFold) -> None:
    """Log once per process and cluster shape that a flat model sees the cluster through a node fold."""
    key = (path, fold.model_nodes, fold.node_sizes)
    if key not in _NOTED:
        _NOTED.add(key)
        log.warning(f"agent_path {path!r}: {fold.describe()}")


def check_shapes(
    policy: AgentPolicy | PreemptAgentPolicy, model: Any, meta: dict[str, Any], scn: Scenario, path: str | Path
) -> None:
    """The model's action count and the window part of its observation are those of its stored queue
    window and options, else a ConfigError naming the scenario the model was trained on. The node count
    may differ from this scenario's: a set model pads to it; a flat one records its node rows in
    ``policy.model_nodes`` and is shown the cluster through a :class:`NodeFold`."""
    if policy.tokens:  # a set model fits any cluster: check its options
        if isinstance(policy, PreemptAgentPolicy):
            want_act = policy.max_queue * len(policy.options) + policy.max_running + 1
            what = "max_queue x options + max_running + 1"
        else:
            want_act, what = policy.max_queue * len(policy.options) + 1, "max_queue x options + 1"
        if int(getattr(model.action_space, "n", want_act)) != want_act:
            raise ConfigError(f"agent_path {str(path)!r}: {model.action_space} does not match its stored "
                              f"{what} = {want_act}")
        return
    if isinstance(policy, PreemptAgentPolicy):
        window = obs_size_v1(0, policy.k, policy.r)  # the slot rows and globals: no node row
        want_act = n_actions_v1(policy.k, policy.r, len(policy.options))
        stored = f"queue_slots={policy.k}, running_slots={policy.r}, {len(policy.options)} options"
    else:
        window = obs_size(0, policy.k)
        want_act = policy.k * len(policy.options) + 1
        stored = f"queue_slots={policy.k}, {len(policy.options)} options"
    got_obs = tuple(getattr(model.observation_space, "shape", ()) or ())
    got_act = int(getattr(model.action_space, "n", want_act))
    rows, left = divmod(got_obs[0] - window, NODE_FEATURES) if len(got_obs) == 1 else (0, 1)
    if got_act != want_act or left or rows < 1:
        raise ConfigError(
            f"agent_path {str(path)!r}: this model was trained on scenario {meta.get('scenario', '?')!r} "
            f"(observation {list(got_obs)}, {got_act} actions); scenario {scn.name!r} needs {want_act} actions "
            f"and an observation of nodes x {NODE_FEATURES} + {window} for its stored {stored}: train one "
            f"with them (gpusched-train scenario={scn.name})"
        )
    policy.model_nodes = rows  # another node count than the cluster's is folded (NodeFold)
