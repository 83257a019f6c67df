"""The one simulator factory (gpusched_env.cluster.build): a workload built alone equals the same
workload built with all of its scenario's, and the env builds only the workload an episode uses."""

from __future__ import annotations

import gymnasium as gym

import gpusched_env  # noqa: F401
from gpusched_env.cluster import build
from gpusched_env.cluster.build import WorkloadCache, build_simulator, build_workload
from gpusched_env.scenario import build_workloads, load_scenario


def test_a_pal_workload_built_alone_equals_it_built_with_the_others():
    """The background draws of the workloads before it are repeated, so every job (arrival, id,
    tracked flag) is the same."""
    scn = load_scenario("pal_philly")
    full = build_workloads(scn, 1)
    assert len(full) == 8 and len(full[7][1]) > 2000
    assert [build_workload(scn, 1, i) for i in (0, 3, 7)] == [full[0], full[3], full[7]]


def test_a_single_workload_scenario_builds_as_before():
    scn = load_scenario("synthetic_small")
    assert build_workload(scn, 4, 0) == build_workloads(scn, 4)[0]


def test_the_cache_shares_one_trace_file_and_keeps_at_most_size_entries():
    scn = load_scenario("pal_locality")  # five workloads, one trace file (one lf each)
    cache = WorkloadCache(scn, size=2)
    wls = cache.all(0)
    assert [n for n, _ in wls] == scn.workload_names
    assert all(jobs is wls[0][1] for _, jobs in wls)
    cache.get(1, 0)
    cache.get(2, 0)
    assert len(cache._built) == 2 and cache.get(2, 4)[1] is cache.get(2, 0)[1]


def test_env_reset_builds_only_the_episode_workload(monkeypatch):
    import gpusched_env.workload.pal as pal

    calls: list[str] = []
    real = pal.load_pal_workload
    monkeypatch.setattr(pal, "load_pal_workload", lambda path, **kw: calls.append(str(path)) or real(path, **kw))
    build._pal_trace.cache_clear()
    env = gym.make("gpusched/Cluster-v0", scenario="pal_philly")
    env.reset(seed=0, options={"workload": 5, "run_seed": 3})
    assert [p.rsplit("/", 1)[1] for p in calls] == ["workload-6.csv"]
    env.reset(seed=1, options={"workload": 5, "run_seed": 3})  # cached: nothing rebuilt
    env.reset(seed=1, options={"workload": 5, "run_seed": 4})  # another run seed: the trace is read once
    assert len(calls) == 1
    name, jobs, _ = build_simulator(env.unwrapped.scn, 3, 5, cache=env.unwrapped._workloads)
    assert (name, len(calls)) == ("workload-6", 1)


def test_shared_cache_is_per_scenario_config():
    a, b = load_scenario("synthetic_small"), load_scenario("synthetic_philly")
    assert build.shared_cache(a) is build.shared_cache(a)
    assert build.shared_cache(a) is not build.shared_cache(b)
