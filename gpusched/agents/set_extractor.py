"""A policy over sets (``agent=maskable_ppo_set``): one network for any cluster size and queue length.

It reads the token observation of ``gpusched/Cluster-v0`` or ``gpusched/Cluster-v1``
(``env.tokens=true``, :mod:`gpusched_env.envs.tokens`): node rows, queue-window slot rows, a node
presence mask and the global row, and on Cluster-v1 the running-slot rows too. Every row is encoded
by a small MLP shared across rows (one for nodes, one for job slots: start and running slots share
it, feature 1 of a v1 row says which); each slot attends over the nodes (one head, padding masked);
the context is the masked mean of the node and slot encodings (all job slots, start and running)
and the global encoding. The score of "start slot s with option o" is output o of an MLP of (slot
s's encoding, its attention read-out, the context); on Cluster-v1 the score of "lift (preempt)
running slot i" is the output of another MLP of the same three for running slot i; "done" and the
value come from the context. No weight depends on how many nodes or slots there are, so the same
weights score actions on any cluster (``max_nodes`` / ``max_queue`` only size the padding), and the
scores do not change when the node rows are permuted (mean pooling and attention are symmetric).

:class:`SetPolicy` is MaskablePPO's actor-critic with :class:`SetExtractor` as its features
extractor; the extractor's output already holds the action scores (``action_net`` is the
identity) followed by the value features.

Play (the deterministic action: ``predict(deterministic=True)``, the bench's ``agent``, the evaluation
and selection callbacks) takes the mode of a two-level choice, :func:`two_level_mode`: first "done"
against starting anything, by total probability (P("done") against the sum of P(start) over the valid
starts), then, if starting wins, the most probable start. The flat argmax instead pits the one "done"
score against each start alone: with many valid starts of similar score, "done" outscored every one of
them even where the policy put most of its mass on starting (issue 32, item 2). On Cluster-v1 the
lifts count with the starts (every action but "done" is an edit of the running set). Training samples from
the same distribution as before; only the mode read from it changed. Flat (non-set) models keep the
flat argmax.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from torch import nn

HIDDEN = 64  # choice: width of every token encoding (small: the inputs are 8 or 11 features)


def _mlp(n_in: int, hidden: int, n_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(n_in, hidden), nn.ReLU(), nn.Linear(hidden, n_out))


def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over the rows of ``x`` (B, N, d) where ``mask`` (B, N) is 1; zeros where none is."""
    w = mask.unsqueeze(-1)
    return (x * w).sum(1) / w.sum(1).clamp(min=1.0)


class SetExtractor(BaseFeaturesExtractor):
    """Token observation -> (slot x option scores, [v1: lift scores,] "done" score, value features);
    see the module docstring. ``features_dim`` = ``max_queue x n_options [+ max_running] + 1 + hidden``
    (sized by the padding, but no parameter is)."""

    def __init__(self, observation_space: spaces.Dict, n_options: int, hidden: int = HIDDEN) -> None:
        nodes, slots, glob = (observation_space[k].shape for k in ("nodes", "slots", "glob"))
        assert nodes is not None and slots is not None and glob is not None
        self.preempt = "running" in observation_space.spaces  # Cluster-v1: lift actions per running slot
        n_run = int(observation_space["running"].shape[0]) if self.preempt else 0  # type: ignore[index]
        super().__init__(observation_space, slots[0] * n_options + n_run + 1 + hidden)
        self.n_options, self.hidden = n_options, hidden
        self.node_enc = nn.Sequential(_mlp(nodes[1], hidden, hidden), nn.ReLU())
        self.slot_enc = nn.Sequential(_mlp(slots[1], hidden, hidden), nn.ReLU())
        self.glob_enc = nn.Sequential(nn.Linear(glob[0], hidden), nn.ReLU())
        self.query = nn.Linear(hidden, hidden, bias=False)
        self.key = nn.Linear(hidden, hidden, bias=False)
        self.value = nn.Linear(hidden, hidden, bias=False)
        self.context = nn.Sequential(nn.Linear(3 * hidden, hidden), nn.ReLU())
        self.score = _mlp(3 * hidden, hidden, n_options)
        self.done = nn.Linear(hidden, 1)
        heads = [self.score[-1], self.done]
        if self.preempt:
            self.lift = _mlp(3 * hidden, hidden, 1)
            heads.append(self.lift[-1])
        for head in heads:  # near-uniform first policy (as SB3's action_net gain 0.01)
            assert isinstance(head, nn.Linear)
            nn.init.orthogonal_(head.weight, gain=0.01)
            nn.init.zeros_(head.bias)

    def forward(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:  # type: ignore[override]
        node_mask = obs["node_mask"]
        slots = obs["slots"]
        n_start = slots.shape[1]
        if self.preempt:  # start and running slots: one set of job rows, split again for the scores
            slots = torch.cat([slots, obs["running"]], 1)
        slot_mask = (slots[..., 0] > 0.5).to(slots.dtype)  # feature 0: the slot holds a job
        hn = self.node_enc(obs["nodes"])  # (B, N, d)
        hs = self.slot_enc(slots)  # (B, S, d)
        att = torch.einsum("bsd,bnd->bsn", self.query(hs), self.key(hn)) / math.sqrt(self.hidden)
        att = att.masked_fill(node_mask.unsqueeze(1) < 0.5, -1e9).softmax(-1)
        read = torch.einsum("bsn,bnd->bsd", att, self.value(hn))
        ctx = self.context(torch.cat([_masked_mean(hn, node_mask), _masked_mean(hs, slot_mask),
                                      self.glob_enc(obs["glob"])], -1))
        per_slot = torch.cat([hs, read, ctx.unsqueeze(1).expand_as(hs)], -1)
        scores = self.score(per_slot[:, :n_start]).flatten(1)  # (B, S x P): slot-major, as the env's actions
        if not self.preempt:
            return torch.cat([scores, self.done(ctx), ctx], -1)
        lifts = self.lift(per_slot[:, n_start:]).flatten(1)  # (B, R): one per running slot
        return torch.cat([scores, lifts, self.done(ctx), ctx], -1)


class _Split(nn.Module):
    """The policy's "mlp extractor": the scores go to the actor as they are, the rest to the critic."""

    def __init__(self, features_dim: int, hidden: int) -> None:
        super().__init__()
        self.hidden = hidden
        self.latent_dim_pi, self.latent_dim_vf = features_dim - hidden, hidden

    def forward(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.forward_actor(features), self.forward_critic(features)

    def forward_actor(self, features: torch.Tensor) -> torch.Tensor:
        return features[:, : -self.hidden]

    def forward_critic(self, features: torch.Tensor) -> torch.Tensor:
        return features[:, -self.hidden:]


class SetPolicy(MaskableActorCriticPolicy):
    """MaskablePPO's actor-critic over the token observation (see the module docstring); ``hidden`` is
    the width of the token encodings."""

    def __init__(self, observation_space: spaces.Space, action_space: spaces.Space, lr_schedule: Any,
                 hidden: int = HIDDEN, **kwargs: Any) -> None:
        if not isinstance(observation_space, spaces.Dict) or "slots" not in observation_space.spaces:
            raise ValueError("agent=maskable_ppo_set needs the token observation (env.tokens=true)")
        assert isinstance(action_space, spaces.Discrete)
        max_queue = observation_space["slots"].shape[0]  # type: ignore[index]
        run = observation_space.spaces.get("running")
        max_running = int(run.shape[0]) if run is not None and run.shape is not None else 0
        self.hidden = int(hidden)
        kwargs.pop("net_arch", None)
        kwargs["ortho_init"] = False  # the extractor initialises its own heads
        kwargs["features_extractor_class"] = SetExtractor
        n_options = (int(action_space.n) - 1 - max_running) // max_queue
        kwargs["features_extractor_kwargs"] = {"n_options": n_options, "hidden": self.hidden}
        super().__init__(observation_space, action_space, lr_schedule, **kwargs)

    def _build_mlp_extractor(self) -> None:
        self.mlp_extractor = _Split(self.features_dim, self.hidden)  # type: ignore[assignment]

    def _predict(  # type: ignore[override]
        self, observation: Any, deterministic: bool = False, action_masks: np.ndarray | None = None
    ) -> torch.Tensor:
        """Sampled actions, or with ``deterministic`` the two-level mode (:func:`two_level_mode`) per row."""
        dist = self.get_distribution(observation, action_masks)
        if not deterministic:
            return dist.get_actions(deterministic=False)
        logits = dist.distribution.logits  # type: ignore[union-attr]
        # (masked logits are -1e8 in sb3-contrib: far below any real score)
        valid = logits > -1e7
        return torch.as_tensor([two_level_mode(row.numpy(), ok.numpy()) for row, ok in zip(logits, valid, strict=True)],
                               dtype=torch.long)

    def _build(self, lr_schedule: Any) -> None:
        self._build_mlp_extractor()
        self.action_net = nn.Identity()
        self.value_net = nn.Linear(self.hidden, 1)
        self.optimizer = self.optimizer_class(self.parameters(), lr=lr_schedule(1), **self.optimizer_kwargs)  # type: ignore[call-arg]


def action_probs(policy: MaskableActorCriticPolicy, obs: dict[str, np.ndarray], mask: np.ndarray) -> np.ndarray:
    """The masked action probabilities for one token observation of any padding (the rows need not
    match the spaces the policy was built with: its weights do not depend on them)."""
    with torch.no_grad():
        t = {k: torch.as_tensor(np.asarray(v, dtype=np.float32)).unsqueeze(0) for k, v in obs.items()}
        dist = policy.get_distribution(t, action_masks=np.asarray(mask, dtype=bool)[None])
        return dist.distribution.probs[0].numpy()  # type: ignore[union-attr]


def two_level_mode(scores: np.ndarray, mask: np.ndarray) -> int:
    """The mode of the two-level choice over ``scores`` (logits; "done" is the last action) restricted
    to ``mask``: "done" if P("done") >= P(any valid start), i.e. if its score is at least the
    log-sum-exp of the valid starts' scores; otherwise the highest-scoring valid start (the first on a
    tie). With no valid start it is "done" (when valid)."""
    ok = np.asarray(mask, dtype=bool)
    x = np.asarray(scores, dtype=np.float64)
    starts = np.flatnonzero(ok[:-1])
    done = len(x) - 1
    if starts.size == 0:
        return done
    best = int(starts[np.argmax(x[starts])])
    if not ok[-1]:
        return best
    m = float(x[best])
    lse = m + math.log(float(np.exp(x[starts] - m).sum()))
    return done if float(x[-1]) >= lse else best


def set_action(policy: MaskableActorCriticPolicy, obs: dict[str, np.ndarray], mask: np.ndarray) -> int:
    """The deterministic action (:func:`two_level_mode`, as ``predict(deterministic=True)``) for one
    token observation of any padding; the scores only, no distribution object (a fast path for play)."""
    with torch.no_grad():
        t = {k: torch.as_tensor(np.asarray(v, dtype=np.float32)).unsqueeze(0) for k, v in obs.items()}
        features = policy.extract_features(t)
        assert isinstance(features, torch.Tensor)  # one extractor shared by actor and critic
        scores = policy.action_net(policy.mlp_extractor.forward_actor(features))[0].numpy()
    return two_level_mode(scores, mask)
