"""DAgger across a training mix (gpusched/agents/bc.py dagger_mix): the learner's episodes go round-robin over
the variants as the teacher's do in collect_mix, every state of a learner that plays the teacher is labelled
with the teacher's action, the same seed gives the same data, and gpusched-train runs the rounds with a mix."""

from __future__ import annotations

import json

import numpy as np
import torch

import gpusched_env  # noqa: F401
from gpusched.agents.bc import collect_mix, dagger_mix, make_teacher
from gpusched_env.envs import ClusterV1Env
from gpusched_env.metrics import compute_metrics
from tests.agents.test_bc_mix import _cfg, _small
from tests.agents.test_dagger import _logged

TOK = {"tokens": True, "max_nodes": 4, "max_queue": 20, "options": ["packed"]}


def _envs(n_jobs: int = 12):
    return [(f"n{n}", s, ClusterV1Env(s, **TOK)) for n, s in ((n, _small(n, n_jobs)) for n in (2, 3))]


def _teach(s, run_seed):
    return make_teacher("las", s, run_seed)


def test_a_learner_that_plays_the_teacher_is_labelled_at_every_state_on_every_variant():
    envs = _envs(60)  # 60 jobs: LAS lifts two on 2 nodes, so lifts are labelled too
    logs = [_logged(env) for _, _, env in envs]
    taught = collect_mix(envs, _teach, 2, np.random.SeedSequence(4))  # one episode per variant
    played = logs[0] + logs[1]  # episode 0 on n2, episode 1 on n3
    # one action per start (60 each), on n2 also 2 lifts and the 2 lifted jobs' restarts, one each
    assert (len(logs[0]), len(logs[1])) == (66, 60)
    replay = iter(played)
    d = dagger_mix(_envs(60), _teach, lambda obs, mask: next(replay), 2, np.random.SeedSequence(4))
    assert d["steps"] == len(played) and next(replay, None) is None
    # play_v1 steps the same actions but records none where "done" was masked (it takes the first start)
    assert d["labelled"] == d["agreed"] == d["steps"] == len(taught["action"])
    assert np.array_equal(d["action"], taught["action"]) and np.array_equal(d["variant"], taught["variant"])
    assert all(np.array_equal(d["obs"][k], taught["obs"][k]) for k in d["obs"])
    per = d["per_variant"]
    assert [per[n]["episodes"] for n in ("n2", "n3")] == [1, 1]
    assert [per[n]["labelled"] for n in ("n2", "n3")] == [len(logs[0]), len(logs[1])]
    assert np.array_equal(d["obs"]["node_mask"].sum(1), np.where(d["variant"] == 0, 2.0, 3.0))
    assert [compute_metrics(r)["preemptions"] for r in d["results"]] == [2, 0]
    assert [compute_metrics(r)["jobs_finished"] for r in d["results"]] == [60, 60]


def test_dagger_mix_is_deterministic_and_a_learner_that_stops_early_is_labelled_until_it_leaves():
    def act(obs, mask):  # "done" whenever allowed
        return int(mask.size - 1) if mask[-1] else int(np.flatnonzero(mask)[0])

    a = dagger_mix(_envs(), _teach, act, 3, np.random.SeedSequence(7))
    b = dagger_mix(_envs(), _teach, act, 3, np.random.SeedSequence(7))
    assert np.array_equal(a["action"], b["action"]) and all(np.array_equal(a["obs"][k], b["obs"][k]) for k in a["obs"])
    assert [a["per_variant"][n]["episodes"] for n in ("n2", "n3")] == [2, 1]
    chose = np.array([act(None, m) for m in a["mask"]])
    assert a["agreed"] == int(np.sum(chose == a["action"])) < a["labelled"] <= a["steps"]


ARGS = ("env=cluster_v1", "env.options=[packed]", "env.max_nodes=4", "env.max_queue=20", "bc.dagger_rounds=1",
        "bc.episodes=2")
AGENT = ("agent=maskable_ppo_set", "agent.params.policy_kwargs.hidden=8")
NAMES = ["n[cluster.nodes.0.count=2]", "n[cluster.nodes.0.count=3]"]


def test_gpusched_train_runs_a_dagger_round_across_a_mix(tmp_path):
    from gpusched.agents.train import train

    train(_cfg(*ARGS, agent=AGENT), tmp_path / "a")
    bc = json.loads((tmp_path / "a" / "bc.json").read_text())
    (r,) = bc["dagger"]
    assert list(r["variants"]) == NAMES and [r["variants"][n]["episodes"] for n in NAMES] == [1, 1]
    assert r["labelled"] == sum(r["variants"][n]["labelled"] for n in NAMES) > 0
    assert r["samples"] == bc["samples"] + r["labelled"]
    assert r["jobs_finished"] == 24  # 12 jobs on each variant, both learner episodes ran to the end


def test_gpusched_train_with_dagger_across_a_mix_is_deterministic(tmp_path):
    from sb3_contrib import MaskablePPO

    from gpusched.agents.train import train

    for run in ("a", "b"):
        train(_cfg(*ARGS, agent=AGENT), tmp_path / run)
    ra, rb = (json.loads((tmp_path / run / "bc.json").read_text())["dagger"][0] for run in ("a", "b"))
    assert {k: v for k, v in ra.items() if k != "s"} == {k: v for k, v in rb.items() if k != "s"}
    wa = MaskablePPO.load(tmp_path / "a" / "bc_model.zip").policy.state_dict()
    wb = MaskablePPO.load(tmp_path / "b" / "bc_model.zip").policy.state_dict()
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
