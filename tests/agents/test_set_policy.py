"""The set policy (agent=maskable_ppo_set): one checkpoint plays clusters of other sizes, its weights do
not depend on the padding, and its scores do not depend on the order of the node rows."""

from __future__ import annotations

import math
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
import yaml

import gpusched_env  # noqa: F401
from gpusched.agents.adapter import AgentPolicy, load_agent_policy, write_meta
from gpusched.agents.set_extractor import SetPolicy, action_probs, set_action, two_level_mode
from gpusched_env.cluster.build import simulate
from gpusched_env.config_util import CONF_DIR
from gpusched_env.envs.tokens import token_space
from gpusched_env.metrics import compute_metrics
from gpusched_env.scenario import Scenario, load_scenario

SCN = "synthetic_small"  # 2 nodes x 4 GPUs
OPTIONS = ["pal", "pm_first", "packed", "spread", "least_interference"]


def _variant(nodes: int, gpus_per_node: int, n_jobs: int) -> Scenario:
    """synthetic_small with another cluster and job count (max job size = one node)."""
    cfg = yaml.safe_load((CONF_DIR / "scenario" / f"{SCN}.yaml").read_text())
    cfg["cluster"]["nodes"][0].update(count=nodes, gpus_per_node=gpus_per_node)
    cfg["cluster"]["nodes_per_rack"] = nodes
    cfg["workload"].update(n_jobs=n_jobs, max_gpus=gpus_per_node)
    cfg["name"] = f"{SCN}_{nodes}x{gpus_per_node}"
    return load_scenario(cfg)


def _n_params(policy: torch.nn.Module) -> list[tuple[str, tuple[int, ...]]]:
    return [(n, tuple(p.shape)) for n, p in policy.named_parameters()]


def _policy(max_nodes: int, max_queue: int, seed: int = 0) -> SetPolicy:
    torch.manual_seed(seed)
    return SetPolicy(token_space(max_nodes, max_queue), gym.spaces.Discrete(max_queue * len(OPTIONS) + 1),
                     lambda _: 1e-3)


def test_parameters_do_not_depend_on_the_padding():
    a, b = _policy(4, 8), _policy(64, 32)
    assert _n_params(a) == _n_params(b)
    assert sum(p.numel() for p in a.parameters()) == sum(p.numel() for p in b.parameters()) > 0


@pytest.fixture(scope="module")
def set_model(tmp_path_factory) -> Path:
    from sb3_contrib import MaskablePPO

    torch.set_num_threads(1)
    env = gym.make("gpusched/Cluster-v0", scenario=SCN, tokens=True, max_nodes=8, max_queue=16)
    model = MaskablePPO(SetPolicy, env, n_steps=64, batch_size=32, n_epochs=1, seed=0, device="cpu",
                        policy_kwargs={"hidden": 16})
    model.learn(128)
    path = tmp_path_factory.mktemp("set") / "model.zip"
    model.save(str(path))
    write_meta(path, {"algo": "maskable_ppo", "scenario": SCN, "env": {
        "queue_slots": 16, "fifo_slots": 8, "options": OPTIONS, "max_actions_per_decision": 64,
        "tokens": True, "max_nodes": 8, "max_queue": 16}})
    return path


@pytest.mark.parametrize("scn", [
    "synthetic_quick",  # same 2 x 4 shape, 120 jobs
    "3x8",  # 24 GPUs in 3 nodes of 8
    "16x4",  # 64 GPUs, more nodes than the padding the model was trained with (8)
])
def test_one_checkpoint_plays_other_cluster_sizes(set_model, scn):
    trained = load_agent_policy(set_model, load_scenario(SCN))
    shapes = _n_params(trained.model.policy)
    scenario = load_scenario(scn) if scn == "synthetic_quick" else _variant(*map(int, scn.split("x")), 30)
    policy = load_agent_policy(set_model, scenario)
    assert isinstance(policy, AgentPolicy) and policy.tokens
    assert _n_params(policy.model.policy) == shapes
    assert policy.max_nodes == max(8, scenario.cluster.topology().n_nodes)
    _, res = simulate(scenario, policy, 0, 0)
    n_jobs = scenario.workload.n_jobs
    assert compute_metrics(res)["jobs_finished"] == n_jobs


def test_node_order_does_not_change_the_action_probabilities():
    policy = _policy(12, 6, seed=3)
    with torch.no_grad():  # sharper scores than the near-uniform initial head
        policy.features_extractor.score[-1].weight.mul_(300.0)
    rng = np.random.default_rng(0)
    n = 9  # real nodes; rows 9..11 are padding
    obs = {"nodes": np.zeros((12, 8), np.float32), "node_mask": np.zeros(12, np.float32),
           "slots": rng.uniform(0, 1, (6, 11)).astype(np.float32), "glob": rng.uniform(0, 1, 8).astype(np.float32)}
    obs["nodes"][:n] = rng.uniform(0, 1, (n, 8))
    obs["node_mask"][:n] = 1.0
    obs["slots"][:, 0] = [1, 1, 1, 1, 0, 0]
    obs["slots"][4:] = 0.0
    mask = np.zeros(6 * len(OPTIONS) + 1, dtype=bool)
    mask[: 4 * len(OPTIONS)] = True
    mask[-1] = True
    base = action_probs(policy, obs, mask)
    assert base.shape == mask.shape and np.all(base[~mask] == 0.0) and base.sum() == pytest.approx(1.0)
    assert np.ptp(base[mask]) > 0  # the scores differ, so the check below is not trivial
    for seed in range(3):
        perm = np.random.default_rng(seed).permutation(12)  # padding rows move too
        moved = dict(obs, nodes=obs["nodes"][perm], node_mask=obs["node_mask"][perm])
        np.testing.assert_allclose(action_probs(policy, moved, mask), base, rtol=1e-5, atol=1e-7)
    # and a different node set does change them
    other = dict(obs, nodes=obs["nodes"] * 0.5)
    assert not np.allclose(action_probs(policy, other, mask), base, rtol=1e-5, atol=1e-7)


def test_fast_action_is_the_deterministic_prediction():
    policy = _policy(5, 4, seed=1)
    with torch.no_grad():
        policy.features_extractor.score[-1].weight.mul_(300.0)
    rng = np.random.default_rng(1)
    for _ in range(5):
        obs = {"nodes": rng.uniform(0, 1, (5, 8)).astype(np.float32), "node_mask": np.ones(5, np.float32),
               "slots": rng.uniform(0, 1, (4, 11)).astype(np.float32), "glob": rng.uniform(0, 1, 8).astype(np.float32)}
        mask = rng.uniform(size=4 * len(OPTIONS) + 1) < 0.5
        mask[-1] = True
        a = set_action(policy, obs, mask)
        predicted, _ = policy.predict(obs, deterministic=True, action_masks=mask)
        assert a == int(predicted)
        assert a == two_level_mode(np.log(np.maximum(action_probs(policy, obs, mask), 1e-30)), mask)


def test_two_level_mode_by_hand():
    # starts 0..3 score 0, "done" scores 1: the flat argmax picks "done" (1 > 0), but P(done) =
    # e / (e + 4) = 0.405 < P(start) = 4 / (e + 4): start, the first of the tied best ones
    scores = np.array([0.0, 0.0, 0.0, 0.0, 1.0])
    assert int(np.argmax(scores)) == 4
    assert two_level_mode(scores, np.ones(5, bool)) == 0
    # two valid starts: log(2) = 0.693 < 1, so P(done) = e / (e + 2) = 0.576 >= 1/2: "done"
    assert two_level_mode(scores, np.array([False, True, False, True, True])) == 4
    # three: log(3) = 1.0986 > 1: start, and the best valid start wins
    assert two_level_mode(np.array([0.0, -0.5, 0.2, 0.1, 1.0]), np.array([False, True, True, True, True])) == 2
    # "done" at exactly the log-sum-exp of the starts is "done"; no valid start: "done"; "done" masked: the best start
    assert two_level_mode(np.array([0.0, 0.0, math.log(2.0)]), np.ones(3, bool)) == 2
    assert two_level_mode(scores, np.array([False, False, False, False, True])) == 4
    assert two_level_mode(np.array([0.0, 3.0, 9.0]), np.array([True, True, False])) == 1


def test_deterministic_play_is_the_two_level_mode_on_a_hand_set_network():
    """Every start scores 0 and "done" scores 1 (heads set by hand): the set policy starts when 3 or more
    starts are valid (P(done) = e / (e + n) < 1/2 for n >= 3) and says "done" with 1 or 2."""
    policy = _policy(3, 2, seed=0)
    ext = policy.features_extractor
    with torch.no_grad():
        for p in (*ext.score[-1].parameters(), ext.done.weight):
            p.zero_()
        ext.done.bias.fill_(1.0)
    obs = {"nodes": np.full((3, 8), 0.5, np.float32), "node_mask": np.ones(3, np.float32),
           "slots": np.full((2, 11), 0.5, np.float32), "glob": np.full(8, 0.5, np.float32)}
    n = 2 * len(OPTIONS) + 1
    for valid, want in ((3, 0), (10, 0), (2, n - 1), (1, n - 1)):
        mask = np.zeros(n, bool)
        mask[:valid] = True
        mask[-1] = True
        probs = action_probs(policy, obs, mask)
        assert probs[-1] == pytest.approx(math.e / (math.e + valid), rel=1e-5)
        assert int(np.argmax(probs)) == n - 1  # the flat argmax would always say "done"
        predicted, _ = policy.predict(obs, deterministic=True, action_masks=mask)
        assert int(predicted) == want == set_action(policy, obs, mask)
