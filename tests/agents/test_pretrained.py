"""Shipped checkpoints (gpusched/agents/pretrained): usable by name, each as its manifest says, small files."""

from __future__ import annotations

import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from gpusched.agents.adapter import read_meta
from gpusched.agents.pretrained import HERE, manifest, resolve, same_weights
from gpusched_env.config_util import ConfigError


def test_an_unknown_name_lists_the_known_ones():
    with pytest.raises(ConfigError, match=r"no shipped checkpoint 'nope'; known: pretrained:set_philly_dr, "
                                          r"pretrained:tally_pairs"):
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


def _copy_with(src: str, dst: Path, member: str, change: Callable[[bytes], bytes]) -> None:
    """Copy the zip ``src`` to ``dst`` with ``member``'s bytes passed through ``change``."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for item in zin.infolist():
            data = zin.read(item.filename)
            zout.writestr(item, change(data) if item.filename == member else data)


def test_weight_comparison_sees_a_change(tmp_path):
    import io

    import torch

    def shift(data: bytes) -> bytes:
        params = torch.load(io.BytesIO(data), weights_only=True)
        key = sorted(params)[0]
        params[key] = params[key] + 0.25
        buf = io.BytesIO()
        torch.save(params, buf)
        return buf.getvalue()

    src = resolve("pretrained:set_philly_dr")
    _copy_with(src, tmp_path / "m.zip", "policy.pth", shift)
    assert same_weights(src, tmp_path / "m.zip") == pytest.approx(0.25)


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
