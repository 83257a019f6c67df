"""Behaviour cloning warm start: imitate a heuristic through the env, then hand over to RL.

No maintained imitation library fits the pinned versions (``imitation`` 1.0 pins gymnasium 0.29 and
stable-baselines3 2.2), so this is a short loop:

1. :func:`collect` runs the teacher (any :mod:`baselines` policy) in the env's own decision points:
   at each, the teacher's ``decide(view)`` batch is mapped to actions with
   :meth:`~gpusched_env.envs.observe.DecisionBuilder.action_for` (its starts, in order, each as
   the slot of the job and the placement option that gives the same GPUs; the first valid option if
   none does), then "done". Preemptions and migrations have no action and are dropped; a start of a
   job outside the queue window ends the batch. The env is stepped with those actions, so the
   data are on the teacher's state distribution.
2. :func:`clone` minimises the cross-entropy of the policy's (masked) action distribution on the
   (obs, mask, action) triples with Adam — on an SB3 ``ActorCriticPolicy`` / sb3-contrib
   ``MaskableActorCriticPolicy``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from gpusched_env.envs.cluster import ClusterEnv
from gpusched_env.types import Start


def collect(env: ClusterEnv, make_teacher: Any, episodes: int, seed: int) -> dict[str, np.ndarray]:
    """(obs, mask, action) of ``episodes`` teacher episodes (workloads/run seeds from the env's RNG).

    ``make_teacher(run_seed)`` builds a fresh teacher policy per episode.
    """
    obs_l: list[np.ndarray] = []
    mask_l: list[np.ndarray] = []
    act_l: list[int] = []
    for ep in range(episodes):
        obs, info = env.reset(seed=seed + ep)
        teacher = make_teacher(env.run_seed)
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
            obs_l.append(obs)
            mask_l.append(np.array(info["action_mask"], dtype=bool))
            act_l.append(a)
            obs, _, term, trunc, info = env.step(a)
            over = term or trunc
    return {"obs": np.asarray(obs_l, dtype=np.float32), "mask": np.asarray(mask_l, dtype=bool),
            "action": np.asarray(act_l, dtype=np.int64)}


def clone(policy: Any, data: dict[str, np.ndarray], epochs: int, batch_size: int, lr: float,
          seed: int, masked: bool) -> list[float]:
    """Fit ``policy`` to the data by cross-entropy; returns the mean loss per epoch."""
    gen = torch.Generator().manual_seed(seed)
    obs = torch.as_tensor(data["obs"])
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
                _, logp, _ = policy.evaluate_actions(obs[idx], act[idx], action_masks=mask[idx.numpy()])
            else:
                _, logp, _ = policy.evaluate_actions(obs[idx], act[idx])
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
    """Share of the data's actions that the policy's deterministic choice reproduces."""
    with torch.no_grad():
        obs = torch.as_tensor(data["obs"])
        if masked:
            dist = policy.get_distribution(obs, action_masks=data["mask"])
        else:
            dist = policy.get_distribution(obs)
        pred = dist.get_actions(deterministic=True).numpy()
    return float(np.mean(pred == data["action"]))


def make_teacher(name: str, scn: Any, run_seed: int) -> Any:
    """Heuristic ``name`` with the scenario's parameters and the run's policy RNG, passing only
    the parameters the policy accepts (``rng``, ``round_s`` where it takes them)."""
    from bench.runner import make_policy

    return make_policy(name, scn, run_seed)
