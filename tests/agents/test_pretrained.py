"""Shipped checkpoints (gpusched/agents/pretrained): usable by name, each as its manifest says, small files."""

from __future__ import annotations

import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from gpusched.agents.adapter import read_meta
from gpusched.agents.pretrained import CRITIC, HERE, manifest, resolve, same_weights
from gpusched_env.config_util import ConfigError


def test_an_unknown_name_lists_the_known_ones():
    with pytest.raises(ConfigError, match=r"no shipped checkpoint 'nope'; known: pretrained:adaptra_14b, "
                                          r"pretrained:eaco_cluster, pretrained:pal_philly, "
                                          r"pretrained:set_philly_dr, pretrained:tally_pairs \("):
        resolve("pretrained:nope")
    with pytest.raises(ConfigError, match="no shipped checkpoint"):
        read_meta("pretrained:nope")  # the bench's and the service's way in
    assert resolve("runs/x/model.zip") == "runs/x/model.zip"  # a path stays a path


@pytest.mark.parametrize("name", sorted(manifest()))
def test_each_checkpoint_is_what_its_manifest_says(name):
    entry = manifest()[name]
    path = resolve(f"pretrained:{name}")
    assert path == str(HERE / entry["file"])
    assert (HERE / entry["file"]).stat().st_size < 1_000_000
    meta = read_meta(f"pretrained:{name}")
    assert (meta["scenario"], meta["env_id"], meta["seed"]) == (entry["scenario"], entry["env_id"], entry["seed"])
    assert entry["command"].startswith("gpusched-train ") and f"seed={entry['seed']}" in entry["command"]
    assert f"total_timesteps={entry['steps']}" in entry["command"] and "max_train_minutes" not in entry["command"]
    assert entry["evaluation"]["command"] and entry["evaluation"]["table"]
    assert same_weights(path, path) == 0.0
    if entry.get("actor_only"):  # shipped with its critic zeroed, the actor as trained
        params = _params(path)
        critic = [k for k in params if k.startswith(CRITIC)]
        assert critic and all(float(params[k].abs().max()) == 0.0 for k in critic)
        assert any(float(params[k].abs().max()) > 0 for k in params if k not in critic)


def _params(path: str | Path) -> dict:
    import io

    import torch

    with zipfile.ZipFile(path) as z:
        return dict(torch.load(io.BytesIO(z.read("policy.pth")), weights_only=True))


# A short window of each cluster scenario for the play test (the same cluster, fewer jobs): tracked jobs
SHORT = {"synthetic_philly": ({"n_jobs": 40}, 40), "eaco_cluster": ({"limit": 60}, 60),
         "pal_philly": ({}, 160)}  # pal_philly: one PAL workload as it is (160 tracked jobs)


@pytest.mark.parametrize("name", sorted(manifest()))
def test_each_checkpoint_plays_an_episode_on_its_scenario(name):
    """Loaded by name as the bench loads it, each plays a (short) run of its own scenario to the end."""
    from dataclasses import replace

    import yaml

    from gpusched.agents.level_agents import load_level_agent, run_level_agent
    from gpusched_env.config_util import CONF_DIR
    from gpusched_env.levels import level_of, load_level_scenario

    entry = manifest()[name]
    raw = yaml.safe_load((CONF_DIR / "scenario" / f"{entry['scenario']}.yaml").read_text())
    if level_of(raw) == "cluster":
        from gpusched_env.scenario import load_scenario

        change, n_jobs = SHORT[entry["scenario"]]
        scn = load_scenario(entry["scenario"])
        scn = replace(scn, workload=replace(scn.workload, **change))
        _plays_to_the_end(name, scn, n_jobs)
        return
    level = level_of(raw)
    scn = load_level_scenario(raw)[1]
    agent = load_level_agent(f"pretrained:{name}", level, scn)
    if level == "device":  # one pair for 0.2 simulated s instead of the scenario's duration
        agent = replace(agent, env_kwargs={**agent.env_kwargs, "duration_s": 0.2})
    metrics = run_level_agent(agent, scn, 0, 0).metrics
    key = {"device": "hp_p99_ratio", "pipeline": "iteration_time_ms"}[level]
    assert metrics[key] > 0


def _copy_with(src: str, dst: Path, member: str, change: Callable[[bytes], bytes]) -> None:
    """Copy the zip ``src`` to ``dst`` with ``member``'s bytes passed through ``change``."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for item in zin.infolist():
            data = zin.read(item.filename)
            zout.writestr(item, change(data) if item.filename == member else data)


def _shift(key: str) -> Callable[[bytes], bytes]:
    """A policy.pth changer: parameter ``key`` + 0.25."""
    import io

    import torch

    def shift(data: bytes) -> bytes:
        params = torch.load(io.BytesIO(data), weights_only=True)
        params[key] = params[key] + 0.25
        buf = io.BytesIO()
        torch.save(params, buf)
        return buf.getvalue()

    return shift


def test_weight_comparison_sees_a_change(tmp_path):
    src = resolve("pretrained:set_philly_dr")
    _copy_with(src, tmp_path / "m.zip", "policy.pth", _shift("features_extractor.done.bias"))
    assert same_weights(src, tmp_path / "m.zip") == pytest.approx(0.25)


def test_the_actor_comparison_leaves_out_the_critic_only(tmp_path):
    src = resolve("pretrained:pal_philly")
    _copy_with(src, tmp_path / "critic.zip", "policy.pth", _shift("mlp_extractor.value_net.0.bias"))
    _copy_with(src, tmp_path / "actor.zip", "policy.pth", _shift("mlp_extractor.policy_net.0.bias"))
    assert same_weights(src, tmp_path / "critic.zip") == pytest.approx(0.25)
    assert same_weights(src, tmp_path / "critic.zip", actor_only=True) == 0.0
    assert same_weights(src, tmp_path / "actor.zip", actor_only=True) == pytest.approx(0.25)


def test_the_bench_loads_a_device_checkpoint_by_name():
    import yaml

    from gpusched.agents.level_agents import load_level_agent
    from gpusched_env.config_util import CONF_DIR
    from gpusched_env.levels import load_level_scenario

    scn = load_level_scenario(yaml.safe_load((CONF_DIR / "scenario" / "tally_pairs.yaml").read_text()))[1]
    agent = load_level_agent("pretrained:tally_pairs", "device", scn)
    assert agent.level == "device" and agent.masked


def test_a_checkpoint_saved_before_the_move_loads(tmp_path):
    """A model.zip whose pickled policy class is the old ``agents.set_extractor.SetPolicy`` (saved before
    the packages moved under gpusched) loads as the class at its new path, with the same weights."""
    import base64
    import json

    from gpusched.agents.adapter import load_model
    from gpusched.agents.set_extractor import SetPolicy

    def old_class_path(data: bytes) -> bytes:
        d = json.loads(data)
        # a pickle of a global by reference: PROTO, SHORT_BINUNICODE module, name, STACK_GLOBAL, STOP
        ref = b"\x80\x04" + b"\x8c\x14agents.set_extractor" + b"\x8c\x09SetPolicy" + b"\x93."
        d["policy_class"][":serialized:"] = base64.b64encode(ref).decode()
        d["policy_class"]["__module__"] = "agents.set_extractor"
        return json.dumps(d).encode()

    src = resolve("pretrained:set_philly_dr")
    old = tmp_path / "old.zip"
    _copy_with(src, old, "data", old_class_path)
    model = load_model(str(old))
    assert type(model.policy) is SetPolicy  # the class at its new path (no top-level `agents` in a clean install)
    assert same_weights(str(old), src) == 0.0



# Other shapes for each shipped cluster checkpoint (issue 32 item 6): (nodes, GPUs per node), none its scenario's;
# the short windows of SHORT. synthetic_philly: 16 x 4 -> 16 x 8 (set_philly_dr's held-out shape); pal_philly
# (16 x 4) and eaco_cluster (28 x 8): half and twice the nodes with the same GPUs (a flat network's observation
# has a row per node: fewer nodes leave absent node slots, more are grouped, gpusched/agents/fold.py)
OTHER_SHAPES = {"synthetic_philly": [(16, 8)], "pal_philly": [(8, 8), (32, 2)], "eaco_cluster": [(14, 16), (56, 4)]}
CLUSTER = [(n, shape) for n, e in sorted(manifest().items()) for shape in OTHER_SHAPES.get(e["scenario"], [])]


@pytest.mark.parametrize(("name", "shape"), CLUSTER, ids=[f"{n}-{a}x{b}" for n, (a, b) in CLUSTER])
def test_each_cluster_checkpoint_plays_on_another_shape(name, shape, caplog):
    """Every shipped cluster checkpoint plays a cluster of another shape than its scenario's to the end: a set
    network (``agent=maskable_ppo_set``) pads to it, a flat one sees it through the node fold and says so."""
    import logging
    from dataclasses import replace

    from gpusched_env.scenario import load_scenario
    from gpusched_env.scenario_file import read_scenario_file

    entry = manifest()[name]
    cfg = read_scenario_file(entry["scenario"])
    own = cfg["cluster"]["nodes"][0]
    nodes, gpus = shape
    assert (nodes, gpus) != (own["count"], own["gpus_per_node"])
    cfg["cluster"]["nodes"][0] = {**own, "count": nodes, "gpus_per_node": gpus}
    change, n_jobs = SHORT[entry["scenario"]]
    scn = load_scenario(cfg)
    scn = replace(scn, workload=replace(scn.workload, **change))
    assert scn.cluster.topology().n_gpus == nodes * gpus
    with caplog.at_level(logging.INFO, logger="gpusched.agents"):
        _plays_to_the_end(name, scn, n_jobs)
    if entry["agent"] != "maskable_ppo_set":
        trained = own["count"]
        how = "grouped into" if nodes > trained else "shown in"
        assert f"model trained on {trained} nodes; this cluster's {nodes} nodes are {how} {trained} node slots" \
            in caplog.text


def _plays_to_the_end(name: str, scn, n_jobs: int) -> None:  # type: ignore[no-untyped-def]
    """The shipped checkpoint ``name`` plays ``scn`` (workload 0, seed 0) and every one of its jobs finishes."""
    from gpusched.agents.adapter import load_agent_policy
    from gpusched_env.cluster.build import simulate
    from gpusched_env.data import DataMissing
    from gpusched_env.metrics import compute_metrics

    try:
        _, res = simulate(scn, load_agent_policy(f"pretrained:{name}", scn, workload=0), 0, 0)
    except DataMissing:
        pytest.skip("trace absent")
    m = compute_metrics(res)
    assert m["jobs_finished"] == n_jobs and m["avg_jct_s"] > 0
