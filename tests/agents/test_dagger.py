"""DAgger through Cluster-v1 (gpusched/agents/bc.py dagger_v1): a learner that plays the teacher's own actions
is labelled at every state with exactly those actions; one that deviates is labelled only up to the
deviation at each point; gpusched-train runs the rounds and records them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from gpusched.agents.bc import dagger_v1, make_teacher, play_v1
from gpusched_env.config_util import ConfigError
from gpusched_env.envs import ClusterV1Env
from gpusched_env.metrics import compute_metrics
from tests.agents.test_agents_v1 import _scn

ROOT = Path(__file__).resolve().parents[2]


def _logged(env: ClusterV1Env) -> list[int]:
    """Every action stepped through ``env`` from now on (the env's step, logged)."""
    log: list[int] = []
    step = env.step

    def logged_step(a):
        log.append(int(a))
        return step(a)

    env.step = logged_step  # type: ignore[method-assign]
    return log


def test_a_learner_that_plays_the_teacher_is_labelled_with_the_teacher_everywhere():
    scn = _scn()
    env = ClusterV1Env(scn, options=["packed"], run_seeds=[3])
    log = _logged(env)
    res = play_v1(env, make_teacher("las", scn, 3), seed=11)
    assert res.tracked and compute_metrics(res)["preemptions"] > 0  # LAS preempts here: lifts are labelled too
    played = list(log)
    replay = iter(played)
    env2 = ClusterV1Env(scn, options=["packed"], run_seeds=[3])
    d = dagger_v1(env2, lambda s: make_teacher("las", scn, s), lambda obs, mask: next(replay), 1, 11)
    assert d["steps"] == len(played)
    # every state is labelled (with the action played: agreed == labelled) except where "done" was
    # masked and play_v1 took the first valid start
    assert d["labelled"] == d["agreed"] and d["labelled"] >= 0.99 * d["steps"]
    assert compute_metrics(d["results"][0]) == compute_metrics(res)
    assert d["obs"].shape == (d["labelled"], env2.observation_space.shape[0])
    assert d["mask"].shape == (d["labelled"], env2.n_actions) and d["mask"][np.arange(d["labelled"]), d["action"]].all()


def test_a_learner_that_ends_points_early_is_labelled_up_to_its_first_disagreement():
    scn = _scn()
    env = ClusterV1Env(scn, options=["packed"], run_seeds=[3], max_steps=600)
    done = env.n_actions - 1

    def act(obs, mask):  # "done" when allowed, else the first valid action
        return done if mask[done] else int(np.flatnonzero(mask)[0])

    d = dagger_v1(env, lambda s: make_teacher("las", scn, s), act, 1, 5)
    chose = np.array([act(None, m) for m in d["mask"]])
    assert d["agreed"] == int(np.sum(chose == d["action"])) < d["labelled"] <= d["steps"] == 600
    # a point's states are labelled until the first disagreement: at most one disagreement per point
    assert d["labelled"] - d["agreed"] <= env.decision_points


def _cfg(*overrides: str):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        return compose("train", overrides=[
            "scenario=synthetic_small", "env=cluster_v1", "env.options=[packed]", "seed=0", "n_envs=1",
            "total_timesteps=64", "agent.params.n_steps=64", "agent.params.batch_size=32", "agent.params.n_epochs=1",
            "agent.params.policy_kwargs.net_arch=[32]", "eval.enabled=false", "checkpoint_freq=100000",
            "bc.teacher=las", "bc.episodes=1", "bc.epochs=2", *overrides])


def test_training_runs_dagger_rounds_and_records_them(tmp_path):
    from gpusched.agents.train import train

    summary = train(_cfg("bc.dagger_rounds=2"), tmp_path)
    bc = json.loads((tmp_path / "bc.json").read_text())
    assert [r["round"] for r in bc["dagger"]] == [1, 2] and summary["bc"] == bc
    assert bc["dagger"][0]["samples"] == bc["samples"] + bc["dagger"][0]["labelled"]
    assert bc["dagger"][1]["samples"] == bc["dagger"][0]["samples"] + bc["dagger"][1]["labelled"]
    for r in bc["dagger"]:
        assert 0 < r["labelled"] <= r["steps"] and 0.0 <= r["agreed"] <= 1.0 and r["jobs_finished"] > 0


@pytest.mark.parametrize(("override", "message"), [
    ("bc.dagger_rounds=-1", "bc.dagger_rounds must be an integer >= 0, got -1"),
    ("env=cluster", "DAgger is built for gpusched/Cluster-v1 with a bc.teacher, not env.id='gpusched/Cluster-v0'"),
    ("bc.teacher=null", "DAgger is built for .* with bc.teacher=None"),
])
def test_bad_dagger_keys_are_named_errors(tmp_path, override, message):
    from gpusched.agents.train import train

    overrides = ["bc.dagger_rounds=1", override] if "rounds=-1" not in override else [override]
    with pytest.raises(ConfigError, match=message):
        train(_cfg(*overrides), tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_a_start_is_labelled_with_the_first_option_in_the_env_order_that_gives_its_gpus():
    from collections import Counter

    from gpusched.agents.bc import collect_v1

    scn = _scn()

    def label_counts(options: list[str]) -> Counter:
        env = ClusterV1Env(scn, options=options, run_seeds=[3])
        d = collect_v1(env, lambda s: make_teacher("las", scn, s), 1, 11)
        p = len(options)
        return Counter(options[int(a) % p] for a in d["action"] if a < env.k * p)

    # LAS places with `packed`; where PAL's option gives the same GPUs it comes first and takes the label,
    # so a clone learns `pal` for part of LAS's starts. With `packed` first every start is `packed`.
    pal_first = label_counts(["pal", "pm_first", "packed", "spread", "least_interference"])
    packed_first = label_counts(["packed", "pal", "pm_first", "spread", "least_interference"])
    assert pal_first["pal"] > 0 and pal_first["packed"] > 0
    assert packed_first == Counter({"packed": sum(pal_first.values())})
