"""Training across scenarios (mix=NAME, gpusched/agents/scenario_mix.py): grids expand, held-out variants are
refused, the draws come from one SeedSequence, and a flat model's shape mismatch is named."""

from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
import yaml

import gpusched_env  # noqa: F401
from gpusched.agents.scenario_mix import MixEnv, expand, parse_mix
from gpusched_env.config_util import CONF_DIR, ConfigError
from gpusched_env.scenario import load_scenario

BASE = {"name": "s", "cluster": {"nodes": [{"count": 16, "gpus_per_node": 4}]}, "workload": {"load": 0.8}}


def test_a_grid_expands_to_every_combination_in_order():
    vs = expand(BASE, {"name": "dr", "overrides": {"workload.load": [0.7, 0.9], "cluster.nodes.0.count": [8, 16, 24]}},
                "mix.variants[0]")
    assert [v.name for v in vs][:2] == ["dr[workload.load=0.7,cluster.nodes.0.count=8]",
                                       "dr[workload.load=0.7,cluster.nodes.0.count=16]"]
    assert len(vs) == 6
    assert [(v.raw["workload"]["load"], v.raw["cluster"]["nodes"][0]["count"]) for v in vs] == [
        (0.7, 8), (0.7, 16), (0.7, 24), (0.9, 8), (0.9, 16), (0.9, 24)]
    assert BASE["workload"]["load"] == 0.8  # the base is not changed
    one = expand(BASE, {"name": "x", "overrides": {"+workload.max_gpus": 64}, "workloads": [1, 2]}, "w")
    assert one[0].name == "x" and one[0].raw["workload"]["max_gpus"] == 64 and one[0].workloads == (1, 2)


@pytest.mark.parametrize("spec, msg", [
    ({"name": "a", "overrides": {"workload.lod": 1.0}}, "no key 'lod'"),
    ({"name": "a", "overrides": {"cluster.nodes.3.count": 1}}, "not an index of a list of 1"),
    ({"name": "a", "overrides": {}, "workloads": []}, "workloads: expected a non-empty list"),
    ({"name": "a", "overides": {}}, "overides: unknown key"),
])
def test_bad_variants_are_named(spec, msg):
    with pytest.raises(ConfigError, match=msg):
        parse_mix(BASE, {"variants": [spec]})


def test_a_held_out_variant_cannot_be_trained_on():
    mix = {"variants": [{"name": "dr", "overrides": {"workload.load": [0.6, 0.8]}}],
           "held_out": [{"name": "load_0.6", "overrides": {"workload.load": 0.6}}]}
    with pytest.raises(ConfigError, match=r"'dr\[workload.load=0.6\]' is the held-out variant 'load_0.6'"):
        parse_mix(BASE, mix)
    mix["variants"][0]["overrides"]["workload.load"] = [0.7, 0.8]
    train, held = parse_mix(BASE, mix)
    assert len(train) == 2 and [h.name for h in held] == ["load_0.6"]
    # other workloads of the same scenario are not the held-out variant
    mix = {"variants": [{"name": "a", "overrides": {}, "workloads": [0, 1]}],
           "held_out": [{"name": "b", "overrides": {}, "workloads": [2]}]}
    assert len(parse_mix(BASE, mix)[0]) == 1
    mix["held_out"][0]["workloads"] = [1]
    with pytest.raises(ConfigError, match="held-out"):
        parse_mix(BASE, mix)


def test_the_shipped_mix_keeps_robustness_variants_out():
    base = yaml.safe_load((CONF_DIR / "scenario" / "synthetic_philly.yaml").read_text())
    base.pop("defaults")
    mix = yaml.safe_load((CONF_DIR / "mix" / "synthetic_philly_dr.yaml").read_text())
    train, held = parse_mix(base, mix)
    assert len(train) == 12 and sorted(h.name for h in held) == ["16x2", "16x8", "load_0.6", "load_1.2"]
    assert {(v.raw["workload"]["load"], v.raw["cluster"]["nodes"][0]["count"]) for v in train} == {
        (ld, n) for ld in (0.7, 0.8, 0.9, 1.0) for n in (8, 16, 24)}


def _small(nodes: int):
    cfg = yaml.safe_load((CONF_DIR / "scenario" / "synthetic_small.yaml").read_text())
    cfg = copy.deepcopy(cfg)
    cfg["cluster"]["nodes"][0]["count"] = nodes
    cfg["cluster"]["nodes_per_rack"] = nodes
    cfg["name"] = f"small_{nodes}"
    return load_scenario(cfg)


def _mix(seed: int, tokens: bool, counts=(2, 3)) -> MixEnv:
    kw = {"tokens": True, "max_nodes": 4, "max_queue": 16} if tokens else {}
    envs = [(f"n{n}", gym.make("gpusched/Cluster-v0", scenario=_small(n), **kw)) for n in counts]
    return MixEnv(envs, np.random.SeedSequence(seed))


def test_draws_follow_the_seed_sequence_and_cover_the_variants():
    a, b, c = _mix(7, True), _mix(7, True), _mix(8, True)
    seq = [a.reset()[1]["variant"] for _ in range(12)]
    assert seq == [b.reset(seed=123)[1]["variant"] for _ in range(12)]  # reset's seed does not change the draws
    assert set(seq) == {"n2", "n3"}
    assert seq != [c.reset()[1]["variant"] for _ in range(12)]
    rng = np.random.default_rng(np.random.SeedSequence(7).spawn(3)[0])  # the first child draws the variants
    assert seq == [["n2", "n3"][int(rng.integers(2))] for _ in range(12)]
    obs, info = a.reset()
    assert obs["node_mask"].sum() == {"n2": 2, "n3": 3}[info["variant"]]
    assert a.action_masks().shape == (16 * 5 + 1,)


def test_a_flat_model_needs_one_node_count():
    with pytest.raises(ConfigError, match="'n3' gives observation"):
        _mix(0, False)


def test_robustness_evaluates_on_twelve_windows_by_default():
    from pathlib import Path

    from gpusched.studies.robustness import Study

    assert Study([], [], Path("out")).seeds == list(range(12))


def test_gpusched_train_with_a_mix_records_it_and_a_held_out_variant_is_refused(tmp_path):
    from hydra import compose, initialize_config_dir
    from omegaconf import open_dict

    from gpusched.agents.adapter import read_meta
    from gpusched.agents.train import train

    def cfg(held_count: int | None):
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            c = compose("train", overrides=[
                "scenario=synthetic_small", "agent=maskable_ppo_set", "n_envs=1", "total_timesteps=64",
                "agent.params.n_steps=32", "agent.params.batch_size=32", "agent.params.n_epochs=1",
                "agent.params.policy_kwargs.hidden=8", "eval.enabled=false", "checkpoint_freq=100000",
                "env.max_nodes=4", "env.max_queue=16"])
        with open_dict(c):
            c.mix.variants = [{"name": "n", "overrides": {"cluster.nodes.0.count": [2, 3], "cluster.nodes_per_rack": 3}}]
            if held_count is not None:
                c.mix.held_out = [{"name": "h", "overrides": {"cluster.nodes.0.count": held_count,
                                                              "cluster.nodes_per_rack": 3}}]
        return c

    with pytest.raises(ConfigError, match=r"'n\[cluster.nodes.0.count=3\]' is the held-out variant 'h'"):
        train(cfg(3), tmp_path / "refused")
    assert not (tmp_path / "refused").exists()  # refused before anything is written
    summary = train(cfg(4), tmp_path / "run")
    assert summary["num_timesteps"] == 64
    meta = read_meta(tmp_path / "run" / "model.zip")
    assert meta["mix"]["variants"][0]["overrides"]["cluster.nodes.0.count"] == [2, 3]
