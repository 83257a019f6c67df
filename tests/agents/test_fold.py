"""The node fold (gpusched/agents/fold.py): a flat model's node rows on a cluster of another node count,
by hand in both directions, and the observation itself at the model's own node count."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import gpusched_env  # noqa: F401  (registers the envs)
from gpusched.agents.fold import NodeFold
from gpusched_env.envs.kernels import fill_observation

# A toy of 3 nodes (4, 2 and 2 GPUs), max 2 jobs per GPU, per GPU: free, up, power (W), resident jobs,
# slowdown factor per class A..D (only read on free GPUs)
SIZES = (4, 2, 2)
FREE = [False, False, False, True, True, True, False, False]
UP = [True, True, True, True, True, True, True, False]
POWER = [300.0, 300.0, 300.0, 60.0, 60.0, 60.0, 300.0, 0.0]
N_RES = [2, 1, 1, 0, 0, 0, 2, 0]
SLOW = [[9.0] * 4] * 3 + [[1.5, 1.0, 1.2, 2.0], [1.1, 1.0, 1.3, 1.5], [1.4, 1.0, 1.3, 1.1]] + [[9.0] * 4] * 2
GLOBALS = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]


def _obs(sizes: tuple[int, ...]) -> np.ndarray:
    """The env's own observation code (no window slot) on the toy's GPUs grouped into nodes of ``sizes``."""
    inv = 1.0 / np.asarray(sizes, dtype=np.float64)
    obs = np.empty(len(sizes) * 8 + 8, dtype=np.float32)
    fill_observation(obs, np.repeat(np.arange(len(sizes)), sizes), np.stack([inv, inv / 300.0, inv / 2]),
                     np.array(FREE), np.array(UP), np.array(POWER), np.array(N_RES, dtype=np.int64),
                     np.array(SLOW), np.zeros((1, 11)), np.zeros(0, dtype=np.int64), 0.0, 3,
                     *GLOBALS[:2], *GLOBALS[3:])
    return obs


def test_the_toys_node_rows_are_as_computed_by_hand():
    rows = _obs(SIZES)[:24].reshape(3, 8)
    assert rows[0] == pytest.approx([0.25, 1.0, 0.5, 0.0, 0.2, 1.0, 0.8, 0.5])  # 960 W / 4 / 300; 4 jobs / (2 x 4)
    assert rows[1] == pytest.approx([1.0, 1.0, 0.25, 0.0, 0.3, 0.3, 0.2, 0.0])
    assert rows[2] == pytest.approx([0.0, 0.5, 0.0, 0.0, 0.0, 0.0, 0.5, 0.5])  # one GPU down, none free


def test_three_nodes_fold_into_two_slots_as_one_node_each():
    """Slot 0 shows nodes 0 and 1 (6 GPUs, 3 free), slot 1 node 2 as it is; the slots and globals unchanged."""
    fold = NodeFold(2, SIZES)
    assert [list(g) for g in fold.groups()] == [[0, 1], [2]]
    out = fold.apply(_obs(SIZES))
    assert out.dtype == np.float32 and out.size == 2 * 8 + 8
    slot0 = [3 / 6, 6 / 6, (0.5 * 1 + 0.25 * 2) / 3, 0.0, (0.2 * 1 + 0.3 * 2) / 3, (1.0 * 1 + 0.3 * 2) / 3,
             (960 + 120) / 6 / 300, 4 / (2 * 6)]
    assert out[:8] == pytest.approx(slot0, rel=1e-6)
    assert out[8:16].tobytes() == _obs(SIZES)[16:24].tobytes()  # a group of one node: its row as it is
    assert out[16:].tolist() == pytest.approx(GLOBALS[:2] + [4 / 8] + GLOBALS[3:])  # busy share: 4 of 8 GPUs hold jobs
    # as if the group were one node: the observation of the same GPUs on two nodes of 6 and 2 GPUs
    assert out == pytest.approx(_obs((6, 2)), rel=1e-6)


def test_five_nodes_fold_into_two_slots_of_three_and_two():
    assert [list(g) for g in NodeFold(2, (1, 1, 1, 1, 1)).groups()] == [[0, 1, 2], [3, 4]]
    assert [len(g) for g in NodeFold(16, (4,) * 24).groups()] == [2] * 8 + [1] * 8


def test_fewer_nodes_than_the_model_leave_absent_slots_at_zero():
    """3 nodes shown in 5 slots: the 3 rows as they are, two rows of zeros (a down node drawing nothing)."""
    obs = _obs(SIZES)
    out = NodeFold(5, SIZES).apply(obs)
    assert out.size == 5 * 8 + 8
    assert out[:24].tobytes() == obs[:24].tobytes()
    assert out[24:40].tolist() == [0.0] * 16
    assert out[40:].tobytes() == obs[24:].tobytes()


@pytest.mark.parametrize("env_id", ["gpusched/Cluster-v0", "gpusched/Cluster-v1"])
def test_the_models_own_node_count_is_the_observation_itself(env_id):
    env = gym.make(env_id, scenario="synthetic_small")
    obs, _ = env.reset(seed=0)
    for _ in range(3):
        obs, *_ = env.step(int(np.flatnonzero(env.unwrapped.action_masks())[0]))  # type: ignore[attr-defined]
    topo = env.unwrapped.topo  # type: ignore[attr-defined]
    fold = NodeFold.of(topo.n_nodes, topo)
    assert fold.apply(obs).tobytes() == obs.tobytes()
    # and a fold to one node fewer and back keeps the others' rows and every slot and global entry
    more = NodeFold(topo.n_nodes + 1, fold.node_sizes).apply(obs)
    assert more[: topo.n_nodes * 8].tobytes() == obs[: topo.n_nodes * 8].tobytes()
    assert more[(topo.n_nodes + 1) * 8:].tobytes() == obs[topo.n_nodes * 8:].tobytes()


def test_the_log_line_and_bad_sizes():
    assert NodeFold(16, (4,) * 24).describe() == ("model trained on 16 nodes; this cluster's 24 nodes are grouped "
                                                  "into 16 node slots")
    assert NodeFold(16, (4,) * 12).describe().endswith("12 nodes are shown in 16 node slots (4 absent)")
    with pytest.raises(ValueError, match="must be >= 1"):
        NodeFold(0, (4,))
