"""The set policy on gpusched/Cluster-v1 (``tokens=True``): one preemptive checkpoint, trained on one
cluster size, plays clusters of other sizes; its weights do not depend on the padding; lifts are
scored per running slot and count with the starts in the deterministic mode."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

import gpusched_env  # noqa: F401
from gpusched.agents.adapter import PreemptAgentPolicy, load_agent_policy, write_meta
from gpusched.agents.bc import clone, collect_v1, make_teacher
from gpusched.agents.set_extractor import SetPolicy, action_probs, set_action
from gpusched_env.cluster.build import simulate
from gpusched_env.envs import ClusterV1Env
from gpusched_env.envs.tokens import TOKEN_SLOT_FEATURES_V1 as W
from gpusched_env.envs.tokens import token_space_v1
from gpusched_env.metrics import compute_metrics
from gpusched_env.scenario import load_scenario
from tests.agents.test_set_policy import SCN, _variant  # synthetic_small (2 nodes x 4 GPUs) resized

OPTIONS = ["packed", "pal", "pm_first", "spread", "least_interference"]  # the teacher's placement first
PAD = {"max_nodes": 8, "max_queue": 16, "max_running": 8}


def _shapes(policy: torch.nn.Module) -> list[tuple[str, tuple[int, ...]]]:
    return [(n, tuple(p.shape)) for n, p in policy.named_parameters()]


def _policy(max_nodes: int, max_queue: int, max_running: int, seed: int = 0) -> SetPolicy:
    torch.manual_seed(seed)
    n = max_queue * len(OPTIONS) + max_running + 1
    return SetPolicy(token_space_v1(max_nodes, max_queue, max_running), gym.spaces.Discrete(n), lambda _: 1e-3)


def test_parameters_do_not_depend_on_the_padding():
    a, b = _policy(4, 8, 2), _policy(64, 32, 16)
    assert _shapes(a) == _shapes(b)
    assert any(n.startswith("features_extractor.lift.") for n, _ in _shapes(a))  # the v1 lift head
    assert a.features_extractor.features_dim == 8 * 5 + 2 + 1 + 64


@pytest.fixture(scope="module")
def v1_model(tmp_path_factory) -> Path:
    """A tiny preemptive set model: a few epochs of cloning LAS on one episode, then 128 PPO steps,
    on synthetic_small (2 x 4 GPUs)."""
    from sb3_contrib import MaskablePPO

    torch.set_num_threads(1)
    scn = load_scenario(SCN)
    env = ClusterV1Env(scn, tokens=True, options=OPTIONS, **PAD)
    model = MaskablePPO(SetPolicy, env, n_steps=64, batch_size=32, n_epochs=1, seed=0, device="cpu",
                        policy_kwargs={"hidden": 16})
    data = collect_v1(ClusterV1Env(scn, tokens=True, options=OPTIONS, **PAD),
                      lambda rs: make_teacher("las", scn, rs), 1, 0)
    clone(model.policy, data, 3, 64, 3e-3, 0, True)
    model.learn(128)
    path = tmp_path_factory.mktemp("set_v1") / "model.zip"
    model.save(str(path))
    write_meta(path, {"algo": "maskable_ppo", "env_id": "gpusched/Cluster-v1", "scenario": SCN,
                      "env": {"options": OPTIONS, "tokens": True, **PAD}})
    return path


@pytest.mark.parametrize("shape", ["2x4", "3x8", "16x4"])  # trained on 2 x 4; 16 nodes > the trained padding
def test_one_preemptive_checkpoint_plays_other_cluster_sizes(v1_model, shape):
    trained = load_agent_policy(v1_model, load_scenario(SCN))
    scenario = _variant(*map(int, shape.split("x")), 30)
    policy = load_agent_policy(v1_model, scenario)
    assert isinstance(policy, PreemptAgentPolicy) and policy.tokens
    assert (policy.k, policy.r, policy.max_queue, policy.max_running) == (12, 8, 16, 8)
    assert _shapes(policy.model.policy) == _shapes(trained.model.policy)
    _, res = simulate(scenario, policy, 0, 0)
    assert compute_metrics(res)["jobs_finished"] == 30


def test_the_token_env_plays_the_checkpoint_on_another_size(v1_model):
    """The same weights drive the token env of a 3 x 8 cluster (its spaces differ from the trained
    ones only in the padding): every job finishes, no action is invalid."""
    policy = load_agent_policy(v1_model, load_scenario(SCN))
    env = ClusterV1Env(_variant(3, 8, 30), tokens=True, options=OPTIONS, max_nodes=3, max_queue=12, max_running=8)
    obs, info = env.reset(options={"workload": 0, "run_seed": 0})
    over = False
    while not over:
        a = set_action(policy.model.policy, obs, info["action_mask"])
        obs, _, term, trunc, info = env.step(a)
        over = term or trunc
    assert compute_metrics(env.result())["jobs_finished"] == 30 and env.invalid_actions == 0


def test_a_flat_v1_model_plays_another_shape_through_the_node_fold(tmp_path):
    """A flat v1 model of synthetic_small (2 nodes x 4 GPUs) plays 3 x 8 GPUs to the end (its 3 nodes grouped
    into the model's 2 node slots)."""
    from sb3_contrib import MaskablePPO

    model = MaskablePPO("MlpPolicy", ClusterV1Env(SCN), n_steps=16, batch_size=16, seed=0, device="cpu")
    path = tmp_path / "flat.zip"
    model.save(str(path))
    write_meta(path, {"algo": "maskable_ppo", "env_id": "gpusched/Cluster-v1", "scenario": SCN, "env": {}})
    scn = _variant(3, 8, 30)
    policy = load_agent_policy(path, scn)
    assert policy.model_nodes == 2
    _, res = simulate(scn, policy, 0, 0)
    assert compute_metrics(res)["jobs_finished"] == 30


def test_lifts_are_scored_per_running_row_and_count_with_the_starts():
    """Lift scores follow their running row (a permutation of the running rows permutes them), and the
    deterministic action is the two-level mode with lifts on the "not done" side."""
    policy = _policy(4, 3, 4, seed=2)
    ext = policy.features_extractor
    with torch.no_grad():
        ext.lift[-1].weight.mul_(300.0)
    rng = np.random.default_rng(0)
    obs = {"nodes": rng.uniform(0, 1, (4, 8)).astype(np.float32), "node_mask": np.ones(4, np.float32),
           "slots": np.zeros((3, W), np.float32), "running": rng.uniform(0, 1, (4, W)).astype(np.float32),
           "glob": rng.uniform(0, 1, 10).astype(np.float32)}
    obs["running"][:, 0] = 1.0
    lift0 = 3 * len(OPTIONS)
    mask = np.zeros(lift0 + 4 + 1, bool)
    mask[lift0: lift0 + 4] = True
    mask[-1] = True
    p = action_probs(policy, obs, mask)
    assert p.sum() == pytest.approx(1.0) and np.all(p[:lift0] == 0.0)
    assert np.ptp(p[lift0: lift0 + 4]) > 0
    perm = np.array([2, 0, 3, 1])
    moved = action_probs(policy, dict(obs, running=obs["running"][perm]), mask)
    np.testing.assert_allclose(moved[lift0: lift0 + 4], p[lift0: lift0 + 4][perm], rtol=1e-5, atol=1e-7)
    predicted, _ = policy.predict(obs, deterministic=True, action_masks=mask)
    want = lift0 + int(np.argmax(p[lift0: lift0 + 4])) if p[-1] < p[lift0: lift0 + 4].sum() else len(mask) - 1
    assert int(predicted) == want == set_action(policy, obs, mask)


def test_accuracy_in_chunks_is_the_accuracy_at_once(monkeypatch):
    from gpusched.agents import bc

    policy = _policy(4, 3, 4, seed=5)
    with torch.no_grad():
        policy.features_extractor.score[-1].weight.mul_(300.0)
        policy.features_extractor.lift[-1].weight.mul_(300.0)
    rng = np.random.default_rng(2)
    n, n_act = 20, 3 * len(OPTIONS) + 4 + 1
    obs = {"nodes": rng.uniform(0, 1, (n, 4, 8)).astype(np.float32), "node_mask": np.ones((n, 4), np.float32),
           "slots": rng.uniform(0, 1, (n, 3, W)).astype(np.float32),
           "running": rng.uniform(0, 1, (n, 4, W)).astype(np.float32), "glob": rng.uniform(0, 1, (n, 10)).astype(np.float32)}
    mask = rng.uniform(size=(n, n_act)) < 0.6
    mask[:, -1] = True
    with torch.no_grad():  # the flat argmax of the masked scores, sample by sample
        best = [int(np.argmax(np.where(mask[i], action_probs(policy, {k: v[i] for k, v in obs.items()}, mask[i]), -1.0)))
                for i in range(n)]
    action = np.array(best)
    action[::4] = n_act - 1 - (action[::4] == n_act - 1)  # 5 of 20 changed: 15 reproduced
    data = {"obs": obs, "mask": mask, "action": action}
    assert bc.accuracy(policy, data, True) == pytest.approx(15 / 20)
    monkeypatch.setattr(bc, "ACCURACY_CHUNK", 7)  # 3 chunks: 7, 7, 6
    assert bc.accuracy(policy, data, True) == pytest.approx(15 / 20)
