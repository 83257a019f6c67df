"""BC warm start, evaluation and checkpoint selection across a training mix (mix=NAME): the teacher's
episodes go round-robin over the training variants, token actions map to the builder's, the same seed
gives the same data and weights, and the callbacks score the training variants only."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch
import yaml

import gpusched_env  # noqa: F401
from gpusched.agents.bc import collect, collect_mix, make_teacher, token_action
from gpusched_env.config_util import CONF_DIR, ConfigError
from gpusched_env.envs.cluster import ClusterEnv
from gpusched_env.scenario import load_scenario

TOK = {"tokens": True, "max_nodes": 4, "max_queue": 20}  # 20 > queue_slots 16: "done" moves


def _small(nodes: int, n_jobs: int = 12):
    cfg = copy.deepcopy(yaml.safe_load((CONF_DIR / "scenario" / "synthetic_small.yaml").read_text()))
    cfg["cluster"]["nodes"][0]["count"] = nodes
    cfg["cluster"]["nodes_per_rack"] = nodes
    cfg["workload"]["n_jobs"] = n_jobs
    cfg["name"] = f"small_{nodes}"
    return load_scenario(cfg)


def _envs(kw):
    return [(f"n{n}", s, ClusterEnv(s, **kw)) for n, s in ((n, _small(n)) for n in (2, 3))]


def _teach(s, run_seed):
    return make_teacher("las", s, run_seed)


def test_token_actions_are_the_window_actions_with_done_last():
    env = ClusterEnv(_small(2), **TOK)
    env.reset(seed=0)
    p = len(env.option_set)
    assert env.k == 16 and p == 5
    assert token_action(env, 3 * p + 2) == 17  # slot 3, option 2: the same index
    assert token_action(env, env.k * p) == 20 * 5  # the builder's "done" (k x P = 80) -> max_queue x P
    flat = ClusterEnv(_small(2))
    flat.reset(seed=0)
    assert token_action(flat, flat.k * p) == 80  # a flat env keeps the builder's index


class _Lazy:
    """LAS, but waiting ("done") at every second decision point while jobs run: LAS itself starts
    whatever fits, so on these small clusters its points end without a "done"."""

    def __init__(self, inner):
        self.inner, self.n = inner, 0

    def decide(self, view):
        self.n += 1
        return [] if view.running and self.n % 2 == 0 else self.inner.decide(view)


def test_token_bc_replays_the_flat_teacher_action_for_action():
    teach = lambda rs: _Lazy(make_teacher("las", _small(2), rs))  # noqa: E731
    flat = collect(ClusterEnv(_small(2)), teach, 2, 5)
    tok = collect(ClusterEnv(_small(2), **TOK), teach, 2, 5)
    assert len(flat["action"]) == len(tok["action"]) > 0
    p, k = 5, 16
    done = flat["action"] == k * p
    assert done.sum() > 0 and np.array_equal(tok["action"][done], np.full(done.sum(), 20 * p))
    assert np.array_equal(tok["action"][~done], flat["action"][~done])
    assert set(tok["obs"]) == {"nodes", "node_mask", "slots", "glob"}
    assert tok["obs"]["nodes"].shape == (len(tok["action"]), 4, 8)
    assert tok["mask"][np.arange(len(tok["action"])), tok["action"]].all()  # every teacher action is valid


def test_bc_across_two_variants_goes_round_robin_and_records_both():
    data = collect_mix(_envs(TOK), _teach, 3, np.random.SeedSequence(4))
    assert data["variant_names"] == ["n2", "n3"]
    v = data["variant"]
    assert len(v) == len(data["action"]) and set(v.tolist()) == {0, 1}
    # episodes 0 and 2 on n2, episode 1 on n3, in that order
    change = np.flatnonzero(np.diff(v)) + 1
    assert v[0] == 0 and len(change) == 2 and v[change[0]] == 1 and v[change[1]] == 0
    nodes = data["obs"]["node_mask"].sum(1)
    assert np.array_equal(nodes, np.where(v == 0, 2.0, 3.0))  # each sample's cluster is its variant's
    again = collect_mix(_envs(TOK), _teach, 3, np.random.SeedSequence(4))
    assert all(np.array_equal(data["obs"][k], again["obs"][k]) for k in data["obs"])
    assert np.array_equal(data["action"], again["action"])
    other = collect_mix(_envs(TOK), _teach, 3, np.random.SeedSequence(5))
    assert not np.array_equal(other["action"], data["action"]) or len(other["action"]) != len(v)


def _cfg(*extra: str, variants=None, held=None, agent=("agent=maskable_ppo_set", "agent.params.policy_kwargs.hidden=8", "env.max_nodes=4",
                                               "env.max_queue=20")):
    from hydra import compose, initialize_config_dir
    from omegaconf import open_dict

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        c = compose("train", overrides=[
            "scenario=synthetic_small", *agent, "n_envs=1", "total_timesteps=32",
            "agent.params.n_steps=32", "agent.params.batch_size=32", "agent.params.n_epochs=1", "eval.enabled=false",
            "checkpoint_freq=100000", "scenario.workload.n_jobs=12", "bc.teacher=las",
            "bc.episodes=2", "bc.epochs=2", "bc.batch_size=64", *extra])
    with open_dict(c):
        c.mix.variants = variants if variants is not None else [
            {"name": "n", "overrides": {"cluster.nodes.0.count": [2, 3], "cluster.nodes_per_rack": 3}}]
        if held is not None:
            c.mix.held_out = held
    return c


def test_gpusched_train_bc_with_a_mix_is_deterministic_and_counts_each_variant(tmp_path):
    from sb3_contrib import MaskablePPO

    from gpusched.agents.train import train

    s1 = train(_cfg("bc.episodes=3"), tmp_path / "a")
    bc = json.loads((tmp_path / "a" / "bc.json").read_text())
    names = ["n[cluster.nodes.0.count=2]", "n[cluster.nodes.0.count=3]"]
    assert list(bc["variants"]) == names
    # episodes 0 and 2 on the first variant; LAS starts each of an episode's 12 jobs with one action
    # (on these small clusters nothing else is possible at its points, so no "done"): 12 samples an episode
    assert [bc["variants"][n]["episodes"] for n in names] == [2, 1]
    assert [bc["variants"][n]["samples"] for n in names] == [24, 12]
    assert bc["samples"] == s1["bc"]["samples"] == 36
    train(_cfg("bc.episodes=3"), tmp_path / "b")
    assert json.loads((tmp_path / "b" / "bc.json").read_text())["samples"] == 36
    wa = MaskablePPO.load(tmp_path / "a" / "bc_model.zip").policy.state_dict()
    wb = MaskablePPO.load(tmp_path / "b" / "bc_model.zip").policy.state_dict()
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert bc["loss_last"] < bc["loss_first"]  # the clone was fitted


def test_bc_with_a_mix_still_refuses_a_held_out_variant(tmp_path):
    from gpusched.agents.train import train

    held = [{"name": "h", "overrides": {"cluster.nodes.0.count": 3, "cluster.nodes_per_rack": 3}}]
    with pytest.raises(ConfigError, match=r"'n\[cluster.nodes.0.count=3\]' is the held-out variant 'h'"):
        train(_cfg(held=held), tmp_path / "refused")
    assert not (tmp_path / "refused").exists()


def test_selection_and_evaluation_with_a_mix_score_the_training_variants(tmp_path):
    from gpusched.agents.train import train

    held = [{"name": "h", "overrides": {"cluster.nodes.0.count": 4, "cluster.nodes_per_rack": 4}}]
    train(_cfg("select.enabled=true", "select.freq=32", "eval.enabled=true", "eval.freq=32", "eval.episodes=1",
               "eval.run_seeds=[100000]", held=held), tmp_path / "run")
    doc = json.loads((tmp_path / "run" / "selection.json").read_text())
    names = ["n[cluster.nodes.0.count=2]", "n[cluster.nodes.0.count=3]"]
    assert list(doc["variants"]) == names  # the held-out 'h' is not scored
    assert doc["episodes"] == [[n, 0, 100000] for n in names]
    for c_i, cand in enumerate(doc["candidates"]):
        per = [doc["variants"][n]["candidates"][c_i] for n in names]
        assert cand["jobs"] == sum(p["jobs"] for p in per) == 24  # 12 tracked jobs per episode
        assert cand["avg_jct_s"] == pytest.approx(np.mean([p["avg_jct_s"] for p in per]))
    ref = doc["references"]["tiresias"]
    per_ref = [doc["variants"][n]["references"]["tiresias"]["p99_jct_s"] for n in names]
    assert ref["p99_jct_s"] == pytest.approx(np.mean(per_ref)) and doc["bounds"]["p99_jct_s"] == ref["p99_jct_s"]
    ev = json.loads((tmp_path / "run" / "eval" / "variants.json").read_text())
    assert ev["variants"] == names and ev["episodes_per_variant"] == 1
    log = np.load(tmp_path / "run" / "eval" / "evaluations.npz")
    assert log["results"].shape[1] == 2  # one episode of each training variant per evaluation


def test_selection_with_both_bounds_on_cluster_v1_with_a_mix_scores_the_dagger_clone_first(tmp_path):
    """Cluster-v1, a mix, BC + one DAgger round and selection bounded by LAS's average and Tiresias's p99:
    the bounds are those heuristics' means over every training variant's validation episode, and the
    candidate at step 0 is the DAgger clone (``bc_model.zip``), replayed here to the same figures."""
    import gymnasium as gym
    from sb3_contrib import MaskablePPO

    from gpusched.agents.adapter import predict
    from gpusched.agents.selection import heuristic_results, play, score_runs
    from gpusched.agents.train import check, train

    cfg = _cfg("env=cluster_v1", "bc.dagger_rounds=1", "select.enabled=true", "select.avg_bound=las",
               "select.p99_bound=tiresias", "select.objective=worst_ratio", "select.freq=32")
    mix = check(cfg, tmp_path / "plan").mix  # the variants' scenarios and env arguments, as the trainer builds them
    train(cfg, tmp_path / "run")
    doc = json.loads((tmp_path / "run" / "selection.json").read_text())
    names = ["n[cluster.nodes.0.count=2]", "n[cluster.nodes.0.count=3]"]
    assert [n for n, _, _ in mix] == list(doc["variants"]) == names
    assert doc["episodes"] == [[n, 0, 100000] for n in names]
    las = [score_runs(0, heuristic_results(s, "las", [(0, 100000)])) for _, s, _ in mix]
    tir = [score_runs(0, heuristic_results(s, "tiresias", [(0, 100000)])) for _, s, _ in mix]
    assert doc["bounds"] == pytest.approx({"avg_jct_s": np.mean([r.avg_jct_s for r in las]),
                                           "p99_jct_s": np.mean([r.p99_jct_s for r in tir])})
    assert [c["steps"] for c in doc["candidates"]] == [0, 32]
    bc = json.loads((tmp_path / "run" / "bc.json").read_text())
    assert len(bc["dagger"]) == 1  # the clone scored at step 0 is the one refitted after the DAgger round
    clone = MaskablePPO.load(tmp_path / "run" / "bc_model.zip")
    act = lambda o, m: predict(clone, o, m, True)  # noqa: E731
    ep = [play(gym.make("gpusched/Cluster-v1", scenario=s, **dict(kw, max_steps=20000)), act, [(0, 100000)])[0]
          for _, s, kw in mix]
    first = doc["candidates"][0]
    assert first["avg_jct_s"] == pytest.approx(score_runs(0, ep).avg_jct_s)
    assert first["p99_jct_s"] == pytest.approx(score_runs(0, ep).p99_jct_s)
    assert first["finished"] == 24
