"""Learned agents at the device and pipeline levels: gpusched-train on GPUShare-v0 / Pipeline-v0,
level mismatches refused, and a model through gpusched-bench equal to the heuristic it reproduces."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from rich.console import Console

import gpusched_env  # noqa: F401  (registers the envs)
from gpusched.agents.adapter import write_meta
from gpusched.agents.level_agents import LevelAgent, load_level_agent, masked_mode, run_level_agent
from gpusched.bench.level_runner import load_level_scenario, run_level_bench
from gpusched_env.config_util import ConfigError
from gpusched_env.envs.gpushare import GPUShareEnv
from gpusched_env.envs.pipeline import PipelineEnv
from gpusched_env.pipeline import bench as pipeline_bench
from gpusched_env.pipeline.warmup import adaptra_warmup
from gpusched_env.scenario import CONF_DIR

ROOT = Path(__file__).resolve().parents[2]


def _raw(name: str, **over: Any) -> dict[str, Any]:
    return {**yaml.safe_load((CONF_DIR / "scenario" / f"{name}.yaml").read_text()), **over}


def _compose(*overrides: str):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        return compose("train", overrides=list(overrides))


def _first_valid_model(env: Any, path: Path, scenario: str, env_kwargs: dict[str, Any]) -> Path:
    """A MaskablePPO whose logits ignore the observation and fall with the action index: its
    deterministic masked action is the first valid one (the device heuristics through the env)."""
    import torch
    from sb3_contrib import MaskablePPO

    model = MaskablePPO("MlpPolicy", env, n_steps=16, batch_size=16, seed=0, device="cpu",
                        policy_kwargs={"net_arch": [8]})
    net = model.policy.action_net
    with torch.no_grad():
        net.weight.zero_()
        net.bias.copy_(-torch.arange(net.bias.numel(), dtype=torch.float32))
    model.save(str(path))
    write_meta(path, {"algo": "maskable_ppo", "env_id": "gpusched/GPUShare-v0", "scenario": scenario,
                      "env": env_kwargs, "seed": 0, "num_timesteps": 0})
    return path


@pytest.mark.parametrize(("scenario", "env_group", "level", "use"), [
    ("tally_pairs", "cluster", "device", "gpushare"),
    ("adaptra_14b", "gpushare", "pipeline", "pipeline"),
    ("synthetic_small", "pipeline", "cluster", "cluster"),
])
def test_level_mismatch_is_a_named_error_before_anything_is_written(tmp_path, scenario, env_group, level, use):
    from gpusched.agents.train import train

    cfg = _compose(f"scenario={scenario}", f"env={env_group}")
    with pytest.raises(ConfigError, match=f"scenario '{scenario}' is a {level}-level scenario but env.id .* use env={use}"):
        train(cfg, tmp_path / "run")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(("scenario", "env_group", "overrides"), [
    ("daris_rt", "gpushare", ["env.duration_s=0.05"]),
    ("adaptra_14b", "pipeline", ["scenario.env.iterations=4"]),
])
def test_tiny_training_writes_a_level_model_the_bench_runs(tmp_path, scenario, env_group, overrides):
    """gpusched-train (in process) on the level env, then the model as gpusched-bench's ``agent``."""
    from gpusched.agents.train import train

    out = tmp_path / "run"
    cfg = _compose(f"scenario={scenario}", f"env={env_group}", "total_timesteps=32", "n_envs=1",
                   "agent.params.n_steps=16", "agent.params.batch_size=16", "agent.params.n_epochs=1",
                   "agent.params.policy_kwargs.net_arch=[8]", "eval.freq=16", "eval.episodes=1",
                   "checkpoint_freq=1000", *overrides)
    summary = train(cfg, out)
    assert summary["num_timesteps"] >= 32 and (out / "model.zip").is_file()
    assert (out / "eval" / "evaluations.npz").is_file()  # evaluated on held-out run seeds
    raw = _raw(scenario, duration_s=0.05) if scenario == "daris_rt" else _raw(scenario)
    doc = run_level_bench(raw, ["agent"], [0], [0], 1, tmp_path / "bench", False, None,
                          Console(file=io.StringIO()), str(out / "model.zip"))
    key = "throughput_jobs_s" if scenario == "daris_rt" else "iteration_time_ms"
    assert doc["policies"]["agent"]["metrics"][key] > 0


@pytest.mark.parametrize(("scenario", "heuristic", "workload", "over"), [
    ("tally_pairs", "mps_priority", 1, {"duration_s": 0.4}),
    ("daris_rt", "daris", 3, {"duration_s": 0.3}),
])
def test_first_valid_action_model_through_bench_equals_the_heuristic(tmp_path, scenario, heuristic, workload, over):
    """gpusched-bench with policies=[heuristic, agent]: the same metrics, every one of them."""
    raw = _raw(scenario, **over)
    _, scn = load_level_scenario(raw)
    path = _first_valid_model(GPUShareEnv(scn), tmp_path / "model.zip", scenario, {"mechanism": "mps_priority"})
    doc = run_level_bench(raw, [heuristic, "agent"], [3], [workload], 2, tmp_path / "out", True, None,
                          Console(file=io.StringIO()), str(path))
    want, got = doc["policies"][heuristic]["metrics"], doc["policies"]["agent"]["metrics"]
    assert set(got) == set(want) and len(want) >= 8
    assert {k: got[k] for k in want} == want


class _AdaptraFromObservation:
    """A scripted 'model': Adaptra's warm-up rule computed from Pipeline-v0's observation."""

    def __init__(self, env: PipelineEnv) -> None:
        self.env, self.observation_space, self.action_space = env, env.observation_space, env.action_space

    def predict(self, obs, action_masks=None, deterministic=True):
        S = self.env.S
        delay = tuple(float(x) * 100.0 for x in obs[:S - 1])
        slow = tuple(float(x) + 1.0 for x in obs[S - 1:2 * S - 1])
        f_ms = self.env.model.with_conditions(delay, slow).durations()[0]
        return np.minimum(np.array(adaptra_warmup(f_ms, delay)) - 1, self.env.max_warm - 1), None


@pytest.mark.parametrize("workload", [1, 3])  # delay-30ms, dynamic
def test_adaptra_rule_through_the_agent_path_equals_bench_adaptra(workload):
    scn = pipeline_bench.load(_raw("adaptra_14b"), "adaptra_14b")
    agent = LevelAgent(_AdaptraFromObservation(PipelineEnv(scn)), "pipeline", {})
    got = run_level_agent(agent, scn, 2, workload)
    want = pipeline_bench.run(scn, "adaptra", 2, workload)
    assert got.metrics == want.metrics and got.series == want.series


def test_model_of_another_level_or_scenario_is_a_named_error(tmp_path):
    _, tally = load_level_scenario(_raw("tally_pairs"))
    _, daris = load_level_scenario(_raw("daris_rt"))
    path = _first_valid_model(GPUShareEnv(tally), tmp_path / "m.zip", "tally_pairs", {})
    with pytest.raises(ConfigError, match=r"trained on env 'gpusched/GPUShare-v0' \(device level\), scenario "
                                          r"'tally_pairs'; scenario 'daris_rt' needs .* env=gpushare"):
        load_level_agent(str(path), "device", daris)
    cluster = tmp_path / "cluster.zip"
    with zipfile.ZipFile(cluster, "w") as z:
        z.writestr("gpusched_env.json", '{"algo": "maskable_ppo", "env_id": "gpusched/Cluster-v0", "scenario": "pal_philly"}')
    with pytest.raises(ConfigError, match=r"\(cluster level\), scenario 'pal_philly'; scenario 'adaptra_14b' needs a "
                                          r"gpusched/Pipeline-v0 model .* env=pipeline"):
        load_level_agent(str(cluster), "pipeline", pipeline_bench.load(_raw("adaptra_14b"), "adaptra_14b"))
    with pytest.raises(ConfigError, match="policy 'agent' needs agent_path"):
        run_level_bench(_raw("tally_pairs"), ["agent"], [0], [0], 1, tmp_path / "o", False, None,
                        Console(file=io.StringIO()), None)


@pytest.mark.parametrize("make", [lambda: GPUShareEnv("daris_rt", duration_s=0.05), lambda: PipelineEnv()])
def test_masked_mode_is_maskable_ppo_predict(make):
    import torch
    from sb3_contrib import MaskablePPO

    torch.manual_seed(0)
    env = make()
    env.observation_space.seed(0)  # the same observations every run (unseeded, a rare near-tie of two logits flaked)
    model = MaskablePPO("MlpPolicy", env, n_steps=16, batch_size=16, seed=1, device="cpu", policy_kwargs={"net_arch": [16]})
    rng = np.random.default_rng(0)
    for _ in range(50):
        obs = env.observation_space.sample().astype(np.float32)
        size = env.n_actions if isinstance(env, GPUShareEnv) else int(np.sum(env.action_space.nvec))
        mask = rng.random(size) < 0.6
        if isinstance(env, GPUShareEnv):
            mask[rng.integers(mask.size)] = True
        else:  # every stage needs one valid count
            for lo in range(0, mask.size, env.max_warm):
                mask[lo + rng.integers(env.max_warm)] = True
        want, _ = model.predict(obs, action_masks=mask, deterministic=True)
        assert np.array_equal(np.asarray(masked_mode(model, obs, mask)), np.asarray(want))


def test_level_report_goals_median_and_spread(tmp_path):
    """Tally's goal: overhead <= Tally's + 5 points and BE >= Tally's, per model, then the median."""
    from gpusched.studies.level_report import report

    def doc(policies: dict[str, tuple[float, float]]) -> str:
        import json

        return json.dumps({"scenario": "tally_pairs", "seeds": [0, 1, 2], "policies": {
            p: {"metrics": {"hp_p99_ratio": r, "be_norm_throughput": b}} for p, (r, b) in policies.items()}})

    for name, pols in (("s0", {"tally": (1.0, 0.5), "mps_priority": (1.05, 0.7), "agent": (1.04, 0.6)}),
                       ("s1", {"agent": (1.07, 0.45)}), ("s2", {"agent": (1.02, 0.52)})):
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(doc(pols))
    text = report([tmp_path / n for n in ("s0", "s1", "s2")])
    assert "| agent s0 | 4.000 | 0.600 | met (-1) | met (+0.1) |" in text
    assert "| agent s1 | 7.000 | 0.450 | missed (+2) | missed (-0.05) |" in text
    assert "| agent median | 4.000 (spread 5.000) | 0.520 (spread 0.150) | met (-1) | met (+0.02) |" in text
