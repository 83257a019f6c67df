"""One decision builder and one view per run, re-aimed at every candidate point, give the numbers a
new builder on a new view gives; the count-only fit codes and the window buffer of the observation
equal their plain forms."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

import gpusched_env  # noqa: F401  (registers the envs)
from gpusched_env.envs import ClusterEnv
from gpusched_env.envs.observe import DecisionBuilder, JobCache


def _fresh(u: ClusterEnv) -> DecisionBuilder:
    """A new builder on a new view of the env's simulator, with its own job cache (no ranked queue,
    no kept tables or buffers), the point's starts so far replayed on it."""
    assert u.sim is not None and u.builder is not None
    b = DecisionBuilder(u.sim.view(), u.option_set, u.k, u.fifo_slots, JobCache())
    for d in u.builder.decisions:
        assert b.act(b.action_for(d.job_id, d.gpus)) is not None
    return b


def test_reaimed_builder_equals_a_new_builder_at_every_step():
    """pal_philly over several runs (a new run seed at each reset, so a kept builder would carry a
    run's state into the next): the env's builder and a new one agree on the window, the fit
    codes, the mask and the observation at every step, and the env's view has the simulator's time."""
    env = gym.make("gpusched/Cluster-v0", scenario="pal_philly")
    u = env.unwrapped
    assert isinstance(u, ClusterEnv)
    rng = np.random.default_rng(3)
    obs, info = env.reset(seed=3, options={"workload": 1, "run_seed": 11})
    kept = u.builder
    checked = starts = resets = 0
    for n in range(500):
        b = u.builder
        assert b is not None
        if not u._over:
            fresh = _fresh(u)
            assert b.view.now == u.sim.env.now
            assert b._win_ids == fresh._win_ids and b._fit_codes() == fresh._fit_codes()
            assert info["action_mask"].tolist() == fresh.mask().tolist()
            assert obs.tobytes() == fresh.observe().tobytes()
            checked += 1
            starts += bool(b.decisions)
        valid = np.flatnonzero(info["action_mask"])
        obs, _, term, trunc, info = env.step(int(valid[int(rng.random() * valid.size)]))
        if term or trunc or n % 200 == 199:
            resets += 1
            obs, info = env.reset(options={"workload": resets % 8, "run_seed": 100 + n})
            assert u.builder is not kept  # a new builder for each run
            kept = u.builder
    assert checked > 420 and starts > 80 and resets >= 2


def test_count_only_fit_codes_equal_the_plain_test_and_take_oversized_jobs():
    """The table-mapped fit codes equal "GPUs <= free GPUs" slot by slot for every free-GPU count,
    and a job of 256 GPUs or more (no byte) takes the plain path: it fits nowhere on 64 GPUs."""
    env = gym.make("gpusched/Cluster-v0", scenario="pal_philly")
    u = env.unwrapped
    assert isinstance(u, ClusterEnv)
    _, info = env.reset(seed=1, options={"workload": 0, "run_seed": 4})
    while len(u.builder._win_ids) < 4:  # on to a point with a longer queue ("done" when valid)
        _, _, _, _, info = env.step(int(np.flatnonzero(info["action_mask"])[-1]))
    b = u.builder
    assert b is not None and b._count_fit == 3
    gpus_l = b.cache.gpus_l
    sizes = [gpus_l[i] for i in b._win_ids]
    for n_free in range(0, 65):
        b._n_free, b._codes = n_free, None
        assert b._fit_codes() == bytes([3 if g <= n_free else 0 for g in sizes])
    i = b._win_ids[1]
    old = gpus_l[i]
    try:
        gpus_l[i] = 300
        b._n_free, b._codes = 64, None
        assert b._fit_codes() == bytes([0 if s == 1 else 3 for s in range(len(sizes))])
    finally:
        gpus_l[i] = old


def test_window_buffer_pads_empty_slots():
    """A window shorter than K: the kernel's buffer holds the ids then -1, the codes then -1, and
    the empty slots' rows of the observation are zero (as a new builder's)."""
    env = gym.make("gpusched/Cluster-v0", scenario="synthetic_small", queue_slots=8, fifo_slots=3)
    u = env.unwrapped
    assert isinstance(u, ClusterEnv)
    rng = np.random.default_rng(0)
    _, info = env.reset(seed=0)
    seen = 0
    for _ in range(300):
        b = u.builder
        if not u._over and 0 < len(b._win_ids) < b.k:
            obs = b.observe()
            n = len(b._win_ids)
            assert b._win_np[: b.k].tolist() == b._win_ids + [-1] * (b.k - n)
            assert b._win_np[b.k :].tolist() == list(b._fit_codes()) + [-1] * (b.k - n)
            assert obs.tobytes() == _fresh(u).observe().tobytes()
            rows = obs[u.topo.n_nodes * 8 : u.topo.n_nodes * 8 + b.k * 11].reshape(b.k, 11)
            assert not rows[n:].any() and rows[:n, 0].all()
            seen += 1
        valid = np.flatnonzero(info["action_mask"])
        _, _, term, trunc, info = env.step(int(valid[int(rng.random() * valid.size)]))
        if term or trunc:
            _, info = env.reset()
    assert seen > 20


def test_observation_through_the_compiled_entry_points_equals_the_dispatcher():
    """After its first observation of each kind (a point without and with a working copy) the
    builder calls ``fill_observation``'s compiled function directly: the same bytes as through
    numba's dispatcher at every step of a pal_philly run."""
    from gpusched_env.envs.kernels import fill_observation

    env = gym.make("gpusched/Cluster-v0", scenario="pal_philly")
    u = env.unwrapped
    assert isinstance(u, ClusterEnv)
    rng = np.random.default_rng(5)
    _, info = env.reset(seed=5, options={"workload": 2, "run_seed": 21})
    kinds = set()
    for _ in range(300):
        b = u.builder
        assert b is not None
        if u._over:
            break
        kinds.add(b._ws is None)
        direct = b.observe().tobytes()
        kept, b._obs = b._fill, None
        assert kept[b._ws is None] is not None and all(f is not fill_observation for f in kept.values())
        b._fill = {True: None, False: None}  # a first call: through the dispatcher
        assert b.observe().tobytes() == direct
        b._fill, b._obs = kept, None
        valid = np.flatnonzero(info["action_mask"])
        _, _, term, trunc, info = env.step(int(valid[int(rng.random() * valid.size)]))
        if term or trunc:
            break
    assert kinds == {True, False} and None not in u.builder._fill.values()
