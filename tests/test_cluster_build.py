"""The one simulator factory (gpusched_env.cluster.build): a workload built alone equals the same
workload built with all of its scenario's, and the env builds only the workload an episode uses."""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import pytest

import gpusched_env  # noqa: F401
from gpusched_env.cluster import build
from gpusched_env.cluster.build import WorkloadCache, build_simulator, build_workload
from gpusched_env.scenario import ConfigError, build_workloads, check_job_copies, check_jobs, load_scenario
from gpusched_env.types import Job


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


def test_a_pal_trace_is_checked_once_and_its_background_every_time(monkeypatch):
    scn = load_scenario("pal_philly")
    topo = scn.cluster.topology()
    checked: list[int] = []
    copies: list[int] = []
    real_check, real_copies = build.check_jobs, build.check_job_copies
    monkeypatch.setattr(build, "check_jobs", lambda jobs, *a: checked.append(len(jobs)) or real_check(jobs, *a))
    monkeypatch.setattr(build, "check_job_copies",
                        lambda jobs, bg, where: copies.append(len(bg)) or real_copies(jobs, bg, where))
    monkeypatch.setattr(build, "_CHECKED_TRACES", set())
    trace = len(build._pal_trace(str(build.data_path(scn.workload.paths[2])), scn.workload.strict, topo.n_gpus))
    for seed in (5, 6, 7):
        build_workload(scn, seed, 2, topo)
    assert checked == [trace]  # the trace's 160 jobs, at the first build only
    assert copies == [scn.workload.background_jobs] * 3  # the 2,000 background copies, every build


def test_job_copies_fail_as_check_jobs_does():
    """A copy with a taken id or a bad arrival gives check_jobs' own message; good copies pass."""
    topo = load_scenario("synthetic_small").cluster.topology()
    base = [Job(0, 0.0, 1, 10.0, "resnet50", "A", 4.0), Job(1, 5.0, 2, 10.0, "vgg16", "B", 4.0)]
    good = [dataclasses.replace(base[k % 2], job_id=2 + k, arrival_s=10.0 + k, tracked=False) for k in range(4)]
    check_job_copies(base, good, "w.csv")
    for bad in ([dataclasses.replace(good[0], job_id=1)], [good[0], dataclasses.replace(good[1], job_id=2)],
                [good[0], dataclasses.replace(good[1], arrival_s=-1.0)],
                [dataclasses.replace(good[0], arrival_s=float("nan"))],
                [dataclasses.replace(good[0], arrival_s=float("inf"))]):
        with pytest.raises(ConfigError) as full:
            check_jobs(base + bad, topo, 1, "w.csv")
        with pytest.raises(ConfigError) as fast:
            check_job_copies(base, bad, "w.csv")
        assert str(fast.value) == str(full.value)
