"""gpusched/Cluster-v1 with ``tokens=True``: the token observation against the flat one by hand on a toy
scenario, token actions (start, lift, "done") with their padding, and preempting heuristics replayed
through the token env exactly as through the flat one."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest

import gpusched_env  # noqa: F401  (registers the envs)
from gpusched.agents.bc import collect_v1, make_teacher, play_v1
from gpusched_env.cluster.build import simulate
from gpusched_env.envs import ClusterV1Env
from gpusched_env.envs.tokens import token_action_v1, window_action_v1
from gpusched_env.metrics import compute_metrics
from gpusched_env.scenario import load_scenario
from gpusched_env.types import Preempt
from tests.envs.test_cluster_v1 import T, toy  # the one-node toy scenario

# toy windows: K = 2 start slots, R = 2 running slots, P = 1 option (packed); padded to 3 nodes, 4 start
# slots and 3 running slots. Token actions: start slot s -> s (0..3), lift running slot i -> 4 + i
# (4..6), "done" -> 7. Flat v1 observation of the one-node toy: node 0 = [0:8], start slot 0 = [8:25],
# start slot 1 = [25:42], running slot 0 = [42:59], running slot 1 = [59:76], global = [76:86].
ARGS = {"options": ["packed"], "queue_slots": 2, "fifo_slots": 1, "running_slots": 2}
PAD = {"max_nodes": 3, "max_queue": 4, "max_running": 3}


def _pair(scn):
    flat, tok = ClusterV1Env(scn, **ARGS), ClusterV1Env(scn, tokens=True, **ARGS, **PAD)
    fo, fi = flat.reset(options={"workload": 0, "run_seed": 0})
    to, ti = tok.reset(options={"workload": 0, "run_seed": 0})
    return flat, tok, (fo, fi), (to, ti)


def _same_numbers(flat_obs, tok_obs):
    """The token rows are the flat observation's blocks at the offsets written above (then the two
    rank columns), the rest zeros."""
    assert flat_obs.shape == (86,)
    np.testing.assert_array_equal(tok_obs["nodes"][0], flat_obs[0:8])
    np.testing.assert_array_equal(tok_obs["nodes"][1:], 0.0)
    np.testing.assert_array_equal(tok_obs["node_mask"], [1.0, 0.0, 0.0])
    np.testing.assert_array_equal(tok_obs["slots"][0][:17], flat_obs[8:25])
    np.testing.assert_array_equal(tok_obs["slots"][1][:17], flat_obs[25:42])
    np.testing.assert_array_equal(tok_obs["slots"][2:], 0.0)
    np.testing.assert_array_equal(tok_obs["running"][0][:17], flat_obs[42:59])
    np.testing.assert_array_equal(tok_obs["running"][1][:17], flat_obs[59:76])
    np.testing.assert_array_equal(tok_obs["running"][2], 0.0)
    np.testing.assert_array_equal(tok_obs["glob"], flat_obs[76:86])


def test_spaces_do_not_depend_on_the_cluster():
    for scn in ("synthetic_small", "synthetic_philly"):  # 2 and 16 nodes
        env = gym.make("gpusched/Cluster-v1", scenario=scn, tokens=True)
        space = env.observation_space
        assert {k: s.shape for k, s in space.spaces.items()} == {
            "nodes": (64, 8), "node_mask": (64,), "slots": (32, 19), "running": (16, 19), "glob": (10,)}
        assert env.action_space.n == 32 * 5 + 16 + 1


def test_padding_too_small_is_refused():
    with pytest.raises(ValueError, match=r"^max_running must be >= running_slots \(8\), got 4"):
        ClusterV1Env("synthetic_small", tokens=True, max_running=4)
    with pytest.raises(ValueError, match=r"^max_nodes must be >= the cluster's 16 nodes"):
        ClusterV1Env("synthetic_philly", tokens=True, max_nodes=8)


def test_token_actions_map_to_window_actions():
    # K=2, R=2, P=1 padded to 4 and 3: starts 0,1 -> 0,1; lifts 4,5 -> 2,3; done 7 -> 4; padding past done
    assert [window_action_v1(a, 2, 2, 1, 4, 3) for a in range(8)] == [0, 1, 7, 8, 2, 3, 11, 4]
    assert [token_action_v1(a, 2, 2, 1, 4, 3) for a in range(5)] == [0, 1, 4, 5, 7]


def test_token_observation_against_the_flat_one_by_hand():
    """The one-GPU preemption toy (tests/envs/test_cluster_v1.py): J0 (1000 iterations) at 0, J1 (200)
    at 10; the flat and the token env stepped with the same actions, every observation compared
    block by block, and the features by hand at three points."""
    flat, tok, (fo, fi), (to, ti) = _pair(toy([(0.0, 1, 1000), (10.0, 1, 200)]))
    _same_numbers(fo, to)
    # t = 0, round point: J0 queued on a free one-GPU node
    np.testing.assert_array_equal(to["nodes"][0][[0, 1, 7]], [1.0, 1.0, 0.0])  # free share, up share, slots used
    s0 = to["slots"][0]
    assert (s0[0], s0[1], s0[2], s0[11], s0[13]) == (1.0, 0.0, 1.0, 1.0, 1.0)  # present, queued, log2(2)/log2(2), fits, 1 GPU / 1 free
    assert s0[3:7].sum() == 1.0 and s0[8] == 0.0  # one class; no service yet
    assert to["glob"][4] == pytest.approx(math.log1p(1) / 5.0) and to["glob"][8] == 1.0  # one queued; round
    assert np.flatnonzero(ti["action_mask"]).tolist() == [0]  # only "start J0" ("done" would idle the GPU)

    fo, *_, fi = flat.step(0)
    to, *_, ti = tok.step(0)
    _same_numbers(fo, to)
    # t = 100, round point: J0 runs (100 s = 100 GPU-s of service), J1 waits (90 s)
    assert ti["time_s"] == pytest.approx(100.0) and ti["round"]
    r0 = to["running"][0]
    assert (r0[0], r0[1]) == (1.0, 1.0)  # present, running
    assert r0[8] == pytest.approx(math.log1p(100 / 3600), rel=1e-6)  # attained GPU-h
    assert r0[11] == pytest.approx(math.log1p(100 / 3600), rel=1e-6)  # hours on its GPUs
    assert to["slots"][0][7] == pytest.approx(math.log1p(90 / 3600), rel=1e-6)  # J1's time in system
    assert to["slots"][0][11] == 0.0  # J1 does not fit
    assert np.flatnonzero(ti["action_mask"]).tolist() == [4, 7]  # lift running slot 0, or "done"
    np.testing.assert_array_equal(fi["action_mask"], [False, False, True, False, True])

    fo, *_, fi = flat.step(2)  # lift J0: window action K*P + 0
    to, *_, ti = tok.step(4)  # the same as a token action
    _same_numbers(fo, to)
    assert tok.builder.decisions == [Preempt(0)]
    assert to["slots"][0][16] == 1.0 and to["slots"][1][16] == 0.0  # J0 (slot 0, by arrival) lifted
    np.testing.assert_array_equal(to["running"], 0.0)  # nothing runs in the working state
    assert to["glob"][9] == pytest.approx(math.log1p(1) / 3.0)  # one lift in this batch
    assert np.flatnonzero(ti["action_mask"]).tolist() == [0, 1]  # restart J0 or start J1; "done" would idle

    fo, *_, fi = flat.step(1)  # start J1 (slot 1)
    to, *_, ti = tok.step(1)
    _same_numbers(fo, to)
    over = False
    while not over:  # the rest: the first valid action in both
        a = int(np.flatnonzero(ti["action_mask"])[0])
        fo, fr, fterm, ftrunc, fi = flat.step(int(window_action_v1(a, 2, 2, 1, 4, 3)))
        to, tr, term, trunc, ti = tok.step(a)
        assert (fr, fterm, ftrunc) == (tr, term, trunc)
        _same_numbers(fo, to)
        over = term or trunc
    fin = {r.job.job_id: r.finish_s for r in tok.result().records}
    assert fin[1] == pytest.approx(100 + 200 * T)
    assert fin[0] == pytest.approx(1200 * T + 30.0)  # preempted once, one restart cost
    assert tok.episode_return == flat.episode_return


def test_padded_actions_are_invalid_no_ops():
    _, tok, _, _ = _pair(toy([(0.0, 1, 1000), (10.0, 1, 200)]))
    for a in (2, 3, 6):  # start slots past K, running slot past R
        _, r, *_, info = tok.step(a)
        assert info["invalid_action"] and r == -1.0
    assert tok.invalid_actions == 3


@pytest.mark.parametrize(("name", "clairvoyant"), [("las", False), ("tiresias", False), ("srtf", True)])
def test_preempting_heuristic_replayed_through_tokens_equals_bench(name, clairvoyant):
    """A teacher's batches are expressible as token actions: LAS / Tiresias / SRTF through the token
    env give the bench's own result (synthetic_small, 2 x 4 GPUs, padded to 8 nodes)."""
    scn = load_scenario("synthetic_small")
    env = ClusterV1Env(scn, clairvoyant=clairvoyant, tokens=True, max_nodes=8)
    res = play_v1(env, make_teacher(name, scn, 0), workload=0, run_seed=0)
    _, bench_res = simulate(scn, make_teacher(name, scn, 0), 0, 0)
    m = compute_metrics(res)
    assert m == compute_metrics(bench_res)
    assert m["preemptions"] > 0 and env.invalid_actions == 0


def test_bc_data_of_the_token_env_are_the_flat_data_regrouped():
    scn = load_scenario("synthetic_small")
    flat = collect_v1(ClusterV1Env(scn), lambda rs: make_teacher("las", scn, rs), 1, 3)
    env = ClusterV1Env(scn, tokens=True, max_nodes=8, max_queue=16, max_running=8)
    tok = collect_v1(env, lambda rs: make_teacher("las", scn, rs), 1, 3)
    n = len(flat["action"])
    assert n > 0 and tok["obs"]["slots"].shape == (n, 16, 19) and tok["mask"].shape == (n, 16 * 5 + 8 + 1)
    np.testing.assert_array_equal(tok["obs"]["running"][:, :, :17].reshape(n, -1), flat["obs"][:, 16 + 12 * 17: 16 + 20 * 17])
    want = [token_action_v1(int(a), 12, 8, 5, 16, 8) for a in flat["action"]]
    assert tok["action"].tolist() == want
    assert tok["mask"][np.arange(n), tok["action"]].all()


class _Idler:
    """A teacher that never starts anything: at a point where the cluster is idle and a start is
    possible, Cluster-v1 masks its "done"."""

    name = "idler"
    round_s = None
    events = True

    def decide(self, view):
        return []


def test_a_masked_teacher_action_is_stepped_but_never_a_label():
    """play_v1 takes the first valid start where the teacher's "done" is masked: that start is the
    label, not the masked "done" (which would put a -1e8 log-probability term into the BC loss)."""
    scn = load_scenario("synthetic_small")
    env = ClusterV1Env(scn, tokens=True, max_nodes=8)
    rec = {"obs": [], "mask": [], "action": []}
    res = play_v1(env, _Idler(), workload=0, run_seed=0, record=rec)
    mask, act = np.asarray(rec["mask"]), np.asarray(rec["action"])
    done = env.n_actions - 1
    assert mask[np.arange(len(act)), act].all()
    starts = act != done  # each a fallback start at an idle point: one per job, every job started once
    assert int(starts.sum()) == compute_metrics(res)["jobs_finished"] == len(res.tracked)
    assert not mask[starts, done].any()  # where "done" was masked, the start is recorded in its place


def _two_running_one_waiting():
    """Two GPUs: J0 (arrives 0) and J1 (10) run, J2 (20) waits; t = 100 is the first round point with a
    queue (each job 5000 iterations)."""
    tok = ClusterV1Env(toy([(0.0, 1, 5000), (10.0, 1, 5000), (20.0, 1, 5000)], gpus=2), tokens=True, **ARGS, **PAD)
    tok.reset(options={"workload": 0, "run_seed": 0})
    tok.step(0)  # t = 0: start J0
    obs, *_, info = tok.step(0)  # t = 10: start J1
    assert info["time_s"] == pytest.approx(100.0) and info["round"]
    return tok, obs, info


def test_window_ranks_by_hand():
    """Rank columns 17 (share of the set's other jobs in the system longer) and 18 (share with less
    attained service). At t = 100 J0 has run 100 s, J1 90 s; J2 waits alone."""
    tok, obs, info = _two_running_one_waiting()
    assert tok.builder.running_window == [0, 1]  # largest attained service first
    np.testing.assert_array_equal(obs["running"][:2, 17:], [[0.0, 1.0], [1.0, 0.0]])  # J0 older, J1 less served
    np.testing.assert_array_equal(obs["slots"][:, 17:], 0.0)  # a lone job: zeros
    obs, *_ = tok.step(4)  # lift J0: the start slots hold J0 (lifted, by arrival) and J2
    assert [j.job_id for j in tok.builder.window] == [0, 2]
    np.testing.assert_array_equal(obs["slots"][:2, 17:], [[0.0, 1.0], [1.0, 0.0]])
    np.testing.assert_array_equal(obs["running"][:, 17:], 0.0)  # J1 alone


def test_a_policy_that_tries_to_cycle_cannot():
    """A policy that lifts a running job whenever it may and restarts a lifted one at once (on the same
    GPUs: no change) gets 4 actions per round point here, not more: a job restarted in the batch is
    not offered for lifting again, so each of the two running jobs is lifted once; then only "done" is
    valid, the point ends and time moves on a round (100 s)."""
    tok, obs, info = _two_running_one_waiting()

    def cycler(obs, mask):
        lifted = [s for s in range(4) if obs["slots"][s][16] == 1.0 and mask[s]]
        if lifted:
            return lifted[0]  # restart the lifted job
        lifts = [a for a in range(4, 7) if mask[a]]
        return lifts[0] if lifts else int(np.flatnonzero(mask)[-1])  # else "done" (or the only start)

    per_point, acts, point, over = [], [], tok.decision_points, False
    while not over:
        a = cycler(obs, info["action_mask"])
        acts.append(a)
        obs, _, term, trunc, info = tok.step(a)
        over = term or trunc
        if tok.decision_points != point or over:
            per_point.append((acts, info["time_s"]))
            acts, point = [], tok.decision_points
    assert per_point[0] == ([4, 0, 4, 0], pytest.approx(200.0))  # lift J0, restart J0, lift J1, restart J1
    assert max(len(a) for a, _ in per_point) == 4
    # nothing was preempted or moved: J0 and J1 run through (J1 from 10 s), J2 starts when J1 ends
    # (at 877 s, with one GPU free, the cycler chose "done": allowed, as a job still runs)
    assert compute_metrics(tok.result())["preemptions"] == 0
    fin = {r.job.job_id: r.finish_s for r in tok.result().records}
    assert fin == pytest.approx({0: 5000 * T, 1: 10.0 + 5000 * T, 2: 10.0 + 10000 * T})
