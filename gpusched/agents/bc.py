"""Behaviour cloning warm start: imitate a heuristic through the env, then hand over to RL.

No maintained imitation library fits the pinned versions (``imitation`` 1.0 pins gymnasium 0.29 and
stable-baselines3 2.2), so this is a short loop:

1. :func:`collect` (``gpusched/Cluster-v0``) runs the teacher (any :mod:`baselines` policy) in the env's own decision points:
   at each, the teacher's ``decide(view)`` batch is mapped to actions with
   :meth:`~gpusched_env.envs.observe.DecisionBuilder.action_for` (its starts, in order, each as
   the slot of the job and the placement option that gives the same GPUs; the first valid option if
   none does), then "done" (with ``tokens=True`` as the token env's actions, :func:`token_action`; the
   observations are then dicts of arrays, stacked per key). Preemptions and migrations have no action and are dropped; a start of a
   job outside the queue window ends the batch. The env is stepped with those actions, so the
   data are on the teacher's state distribution. :func:`collect_v1` does the same on
   ``gpusched/Cluster-v1``, where preemptions and migrations are actions too
   (:func:`gpusched_env.envs.preempt.actions_for`): a round-based teacher is asked for a round at the
   env's round points and for a fill between them (:func:`decide_at`), so a LAS / SRTF / Tiresias
   teacher is replayed exactly; a batch with a decision outside the window is mapped with the first
   valid option, and where that fails too the point ends with "done" (the teacher's state and the
   env's then part). With ``tokens=True`` the window actions are mapped to the token env's
   (:meth:`~gpusched_env.envs.cluster_v1.ClusterV1Env.token_action`) and the observations stacked per key.
   :func:`collect_mix` collects across a training mix's variants (round-robin over them, each
   variant's episodes drawn from its own child of the run's SeedSequence).
   :func:`dagger_v1` adds DAgger rounds: the clone drives the episodes and the teacher labels the
   states it reaches (where its batch is defined), so the clone learns to recover from its own
   mistakes; the data are pooled and the clone refitted after each round. :func:`dagger_mix` runs
   the learner's episodes round-robin over a training mix's variants, as :func:`collect_mix` does.
2. :func:`clone` minimises the cross-entropy of the policy's (masked) action distribution on the
   (obs, mask, action) triples with Adam — on an SB3 ``ActorCriticPolicy`` / sb3-contrib
   ``MaskableActorCriticPolicy``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from gpusched_env.envs.cluster import ClusterEnv
from gpusched_env.envs.cluster_v1 import ClusterV1Env
from gpusched_env.envs.preempt import actions_for
from gpusched_env.metrics import RunResult
from gpusched_env.policy import Policy
from gpusched_env.types import Decision, Start
from gpusched_env.view import ClusterView

# choice: samples per forward pass in accuracy; all at once, 65k Cluster-v1 token samples make GB-sized
# activations (one of them, slots x (encoding, read-out, context): 65k x 48 x 192 floats = 2.4 GB)
ACCURACY_CHUNK = 4096


def collect(env: ClusterEnv, make_teacher: Any, episodes: int, seed: int) -> dict[str, np.ndarray]:
    """(obs, mask, action) of ``episodes`` teacher episodes (workloads/run seeds from the env's RNG).

    ``make_teacher(run_seed)`` builds a fresh teacher policy per episode.
    """
    rec: dict[str, list[Any]] = {"obs": [], "mask": [], "action": []}
    for ep in range(episodes):
        obs, info = env.reset(seed=seed + ep)
        _teacher_episode(env, obs, info, make_teacher(env.run_seed), rec)
    return _stack(rec)


def token_action(env: ClusterEnv, a: int) -> int:
    """A window action of ``env``'s decision builder (``k x P + 1``) as the env's own action: the same
    index for a flat env; for a token env (``tokens=True``) "done" moves to the last token action
    (:func:`gpusched_env.envs.tokens.window_action` inverted)."""
    if not env.tokens:
        return a
    n_opts = len(env.option_set)
    return env.max_queue * n_opts if a >= env.k * n_opts else a


def _teacher_episode(env: ClusterEnv, obs: Any, info: dict[str, Any], teacher: Any, rec: dict[str, list[Any]]) -> None:
    """Play one Cluster-v0 episode (already reset to ``obs``, ``info``) with ``teacher``'s starts as
    actions (module docstring), appending every step's (obs, mask, action) to ``rec``."""
    over = False
    point = -1
    starts: list[Start] = []
    while not over:
        b = env.builder
        assert b is not None
        if env.decision_points != point:  # a new decision point: ask the teacher once
            point = env.decision_points
            starts = [d for d in teacher.decide(env.view()) if isinstance(d, Start)]
        a = b.done_action
        while starts:
            d = starts.pop(0)
            found = b.action_for(d.job_id, d.gpus)
            if found is None:  # outside the window: the batch ends here
                starts.clear()
                break
            a = found
            break
        a = token_action(env, a)
        rec["obs"].append(obs)
        rec["mask"].append(np.array(info["action_mask"], dtype=bool))
        rec["action"].append(a)
        obs, _, term, trunc, info = env.step(a)
        over = term or trunc


def _stack(rec: dict[str, list[Any]]) -> dict[str, Any]:
    """Recorded steps as arrays; a token observation (a dict of arrays) as a dict of stacked arrays."""
    obs: Any
    if rec["obs"] and isinstance(rec["obs"][0], dict):
        obs = {k: np.asarray([o[k] for o in rec["obs"]], dtype=np.float32) for k in rec["obs"][0]}
    else:
        obs = np.asarray(rec["obs"], dtype=np.float32)
    return {"obs": obs, "mask": np.asarray(rec["mask"], dtype=bool), "action": np.asarray(rec["action"], dtype=np.int64)}


def collect_mix(envs: list[tuple[str, Any, Any]], make_teacher: Any, episodes: int,
                seed_seq: np.random.SeedSequence) -> dict[str, Any]:
    """:func:`collect` (or :func:`collect_v1`) across a training mix's variants: ``envs`` holds
    (name, scenario, env) per variant (one observation and action space; Cluster-v0, token or flat,
    or Cluster-v1), ``make_teacher(scenario, run_seed)`` the teacher of an episode (with its
    variant's scenario).

    Episode ``e`` runs on variant ``e mod V`` (round-robin, so ``episodes`` >= V covers every variant
    and a multiple of V covers them evenly); each variant's env draws its workloads and run seeds
    from its own child of ``seed_seq``, seeded at its first episode
    (:class:`gpusched.agents.scenario_mix.MixEnv` with ``cycle=True``). The data add ``variant`` (the
    variant index of every sample) and ``variant_names``."""
    from gpusched.agents.scenario_mix import MixEnv

    mix = MixEnv([(name, env) for name, _, env in envs], seed_seq, cycle=True)
    rec: dict[str, list[Any]] = {"obs": [], "mask": [], "action": []}
    variant: list[int] = []
    for _ in range(episodes):
        obs, info = mix.reset()
        i = mix.current
        env, scn = envs[i][2], envs[i][1]
        before = len(rec["action"])
        if isinstance(env, ClusterV1Env):
            play_v1(env, make_teacher(scn, env.run_seed), env.workload_index, env.run_seed, record=rec)
        else:
            _teacher_episode(env, obs, info, make_teacher(scn, env.run_seed), rec)
        variant += [i] * (len(rec["action"]) - before)
    v1 = isinstance(envs[0][2], ClusterV1Env)
    data = _arrays(rec, envs[0][2]) if v1 else _stack(rec)
    return {**data, "variant": np.asarray(variant, dtype=np.int64), "variant_names": [n for n, _, _ in envs]}


def decide_at(policy: Policy, view: ClusterView, is_round: bool) -> list[Decision]:
    """The policy's decisions at a Cluster-v1 decision point: a round-based queue scheduler
    (:class:`gpusched.baselines.scheduler.QueueScheduler` with ``round_s``) runs its round exactly at the
    env's round points and its fill between them (the env passes over points where nothing is
    possible, so the scheduler's own clock would see fewer calls than in the bench); any other
    policy is asked with ``decide``."""
    from gpusched.baselines.scheduler import QueueScheduler

    if isinstance(policy, QueueScheduler) and policy.round_s is not None:
        if is_round:
            policy._clock.last = view.now
            return policy._round(view)
        return policy._fill(view)
    return policy.decide(view)


def _v1_actions(env: ClusterV1Env, teacher: Policy) -> list[int]:
    b = env.builder
    assert b is not None
    decisions = decide_at(teacher, env.view(), b.is_round)
    make = lambda: env._build(b.is_round)  # noqa: E731
    acts = actions_for(make, decisions) if decisions else []
    if acts is None:
        acts = actions_for(make, decisions, exact=False) or []
    return acts


def play_v1(env: ClusterV1Env, teacher: Policy, workload: int | None = None, run_seed: int | None = None,
            seed: int | None = None, record: dict[str, list[object]] | None = None) -> RunResult:
    """Drive a Cluster-v1 episode with ``teacher``'s decisions as actions (:func:`actions_for`),
    each point ending with "done"; ``record`` (lists ``obs``, ``mask``, ``action``) collects the
    steps. Returns the run's result."""
    opts = {} if workload is None else {"workload": workload, "run_seed": run_seed}
    obs, info = env.reset(seed=seed, options=opts)
    over = env._over
    while not over:
        b = env.builder
        assert b is not None
        acts = [env.token_action(a) for a in (*_v1_actions(env, teacher), b.done_action)]
        for a in acts:
            _record(record, obs, info, a)
            obs, _, term, trunc, info = env.step(a)
            over = term or trunc
            if over or env.builder is not b:  # the point ended (nothing valid left, or "done")
                break
        else:  # "done" was masked (the teacher would idle the cluster): take the first valid start
            a = int(np.flatnonzero(info["action_mask"])[0])
            _record(record, obs, info, a)
            obs, _, term, trunc, info = env.step(a)
            over = term or trunc
    return env.result()


def _record(record: dict[str, list[object]] | None, obs: Any, info: dict[str, Any], action: int) -> None:
    """Append (obs, mask, action) to ``record`` where the mask allows the action: a masked one (the
    teacher's "done" where it would idle the cluster) is stepped as a no-op but is no label."""
    mask = np.array(info["action_mask"], dtype=bool)
    if record is not None and mask[action]:
        record["obs"].append(obs)
        record["mask"].append(mask)
        record["action"].append(action)


def collect_v1(env: ClusterV1Env, make_teacher: Any, episodes: int, seed: int) -> dict[str, np.ndarray]:
    """:func:`collect` for ``gpusched/Cluster-v1`` (module docstring)."""
    rec: dict[str, list[object]] = {"obs": [], "mask": [], "action": []}
    for ep in range(episodes):
        env.reset(seed=seed + ep)  # draws the workload and run seed, as collect does
        wl, rs = env.workload_index, env.run_seed
        play_v1(env, make_teacher(rs), wl, rs, record=rec)
    return _arrays(rec, env)


def _arrays(rec: dict[str, list[object]], env: ClusterV1Env) -> dict[str, Any]:
    """Recorded ``obs``, ``mask``, ``action`` lists as the arrays :func:`clone` fits (also when empty;
    token observations as a dict of stacked arrays)."""
    if env.tokens:
        n = len(rec["action"])
        spaces = env.observation_space.spaces  # type: ignore[attr-defined]
        obs = {k: np.asarray([o[k] for o in rec["obs"]], dtype=np.float32).reshape(n, *spaces[k].shape)  # type: ignore[index]
               for k in spaces}
        return {"obs": obs, "mask": np.asarray(rec["mask"], dtype=bool).reshape(n, int(env.n_actions)),
                "action": np.asarray(rec["action"], dtype=np.int64)}
    n, n_obs = len(rec["action"]), int(np.prod(env.observation_space.shape or (0,)))
    return {"obs": np.asarray(rec["obs"], dtype=np.float32).reshape(n, n_obs),
            "mask": np.asarray(rec["mask"], dtype=bool).reshape(n, int(env.n_actions)),
            "action": np.asarray(rec["action"], dtype=np.int64)}


def dagger_v1(env: ClusterV1Env, make_teacher: Any, act: Any, episodes: int, seed: int) -> dict[str, Any]:
    """DAgger's data: ``episodes`` episodes driven by ``act(obs, mask)`` (the learner), each state
    labelled with the teacher's action where the teacher's batch for the point is still defined.

    At each decision point the teacher is asked once (:func:`decide_at`, as in :func:`play_v1`) for
    its actions; while the learner's actions at the point agree with them, every state is labelled
    with the teacher's next action (the learner's own state distribution across points, which the
    teacher's episodes never reach); after the first disagreement the teacher's batch no longer
    applies, and the point's remaining states go unlabelled. Returns the labelled (obs, mask,
    action) arrays, the counts, and the learner's episodes' results (``results``)."""
    rec: dict[str, list[object]] = {"obs": [], "mask": [], "action": []}
    steps = agreed = 0
    results: list[RunResult] = []
    for ep in range(episodes):
        obs, info = env.reset(seed=seed + ep)
        s, a = _dagger_episode(env, obs, info, make_teacher(env.run_seed), act, rec)
        steps, agreed = steps + s, agreed + a
        results.append(env.result())
    return {**_arrays(rec, env), "steps": steps, "labelled": len(rec["action"]), "agreed": agreed, "results": results}


def _dagger_episode(env: ClusterV1Env, obs: Any, info: dict[str, Any], teacher: Policy, act: Any,
                    rec: dict[str, list[object]]) -> tuple[int, int]:
    """One learner-driven episode from a reset env (:func:`dagger_v1`), its labelled states appended
    to ``rec``; returns (steps, labelled steps where the learner agreed)."""
    steps = agreed = 0
    over = env._over
    point: Any = None
    labels: list[int] = []
    i = -1  # the teacher's next action at this point; -1 once the learner left the teacher's batch
    while not over:
        b = env.builder
        assert b is not None
        if b is not point:  # a new decision point: ask the teacher once
            point, i = b, 0
            labels = [env.token_action(a) for a in (*_v1_actions(env, teacher), b.done_action)]
        mask = np.array(info["action_mask"], dtype=bool)
        label = labels[i] if 0 <= i < len(labels) and mask[labels[i]] else None
        a = int(act(obs, mask))
        if label is not None:
            rec["obs"].append(obs)
            rec["mask"].append(mask)
            rec["action"].append(label)
            agreed += int(a == label)
        i = i + 1 if label is not None and a == label else -1
        steps += 1
        obs, _, term, trunc, info = env.step(a)
        over = term or trunc
    return steps, agreed


def dagger_mix(envs: list[tuple[str, Any, ClusterV1Env]], make_teacher: Any, act: Any, episodes: int,
               seed_seq: np.random.SeedSequence) -> dict[str, Any]:
    """:func:`dagger_v1` across a training mix's variants, as :func:`collect_mix` collects: ``envs``
    holds (name, scenario, Cluster-v1 env) per variant, ``make_teacher(scenario, run_seed)`` the
    teacher of an episode; episode ``e`` runs on variant ``e mod V``, each variant's workloads and
    run seeds drawn from its own child of ``seed_seq``. Adds ``variant`` (per labelled sample) and
    ``per_variant``: per variant name its episodes, steps, labelled samples and the learner's results."""
    from gpusched.agents.scenario_mix import MixEnv

    mix = MixEnv([(name, env) for name, _, env in envs], seed_seq, cycle=True)
    rec: dict[str, list[object]] = {"obs": [], "mask": [], "action": []}
    variant: list[int] = []
    per: dict[str, dict[str, Any]] = {name: {"episodes": 0, "steps": 0, "labelled": 0, "results": []}
                                      for name, _, _ in envs}
    steps = agreed = 0
    results: list[RunResult] = []
    for _ in range(episodes):
        obs, info = mix.reset()
        i = mix.current
        name, scn, env = envs[i]
        before = len(rec["action"])
        s, a = _dagger_episode(env, obs, info, make_teacher(scn, env.run_seed), act, rec)
        steps, agreed = steps + s, agreed + a
        n = len(rec["action"]) - before
        variant += [i] * n
        res = env.result()
        results.append(res)
        v = per[name]
        v["episodes"] += 1
        v["steps"] += s
        v["labelled"] += n
        v["results"].append(res)
    return {**_arrays(rec, envs[0][2]), "variant": np.asarray(variant, dtype=np.int64), "steps": steps,
            "labelled": len(rec["action"]), "agreed": agreed, "results": results, "per_variant": per}


def pool(data: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """The (obs, mask, action) samples of ``data`` followed by those of ``new`` (token observations
    key by key)."""
    obs = ({k: np.concatenate([data["obs"][k], new["obs"][k]]) for k in data["obs"]}
           if isinstance(data["obs"], dict) else np.concatenate([data["obs"], new["obs"]]))
    return {"obs": obs, **{k: np.concatenate([data[k], new[k]]) for k in ("mask", "action")}}


def clone(policy: Any, data: dict[str, np.ndarray], epochs: int, batch_size: int, lr: float,
          seed: int, masked: bool) -> list[float]:
    """Fit ``policy`` to the data by cross-entropy; returns the mean loss per epoch."""
    gen = torch.Generator().manual_seed(seed)
    obs = _tensor(data["obs"])
    act = torch.as_tensor(data["action"])
    mask = data["mask"]
    opt = torch.optim.Adam(policy.parameters(), lr=lr)
    n = len(act)
    losses: list[float] = []
    policy.set_training_mode(True)
    for _ in range(epochs):
        perm = torch.randperm(n, generator=gen)
        tot, cnt = 0.0, 0
        for i in range(0, n, batch_size):
            idx = perm[i : i + batch_size]
            if masked:
                _, logp, _ = policy.evaluate_actions(_rows(obs, idx), act[idx], action_masks=mask[idx.numpy()])
            else:
                _, logp, _ = policy.evaluate_actions(_rows(obs, idx), act[idx])
            loss = -logp.mean()
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
            opt.step()
            tot += float(loss.detach()) * len(idx)
            cnt += len(idx)
        losses.append(tot / max(cnt, 1))
    policy.set_training_mode(False)
    return losses


def accuracy(policy: Any, data: dict[str, np.ndarray], masked: bool) -> float:
    """Share of the data's actions that the policy's deterministic choice reproduces (in chunks of
    ``ACCURACY_CHUNK`` samples, so memory does not grow with the data)."""
    obs = _tensor(data["obs"])
    n = len(data["action"])
    pred = np.empty(n, dtype=np.int64)
    with torch.no_grad():
        for i in range(0, n, ACCURACY_CHUNK):
            idx = torch.arange(i, min(i + ACCURACY_CHUNK, n))
            if masked:
                dist = policy.get_distribution(_rows(obs, idx), action_masks=data["mask"][i: i + ACCURACY_CHUNK])
            else:
                dist = policy.get_distribution(_rows(obs, idx))
            pred[i: i + ACCURACY_CHUNK] = dist.get_actions(deterministic=True).numpy()
    return float(np.mean(pred == data["action"])) if n else float("nan")


def _tensor(obs: Any) -> Any:
    """Observations as a tensor, or a dict of tensors (token observations)."""
    return {k: torch.as_tensor(v) for k, v in obs.items()} if isinstance(obs, dict) else torch.as_tensor(obs)


def _rows(obs: Any, idx: torch.Tensor) -> Any:
    return {k: v[idx] for k, v in obs.items()} if isinstance(obs, dict) else obs[idx]


def make_teacher(name: str, scn: Any, run_seed: int) -> Any:
    """Heuristic ``name`` with the scenario's parameters and the run's policy RNG, passing only
    the parameters the policy accepts (``rng``, ``round_s`` where it takes them)."""
    from gpusched.agents.policies import make_policy

    return make_policy(name, scn, run_seed)
