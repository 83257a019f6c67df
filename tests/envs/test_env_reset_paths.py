"""A reset's cheaper paths: records made on first read, the checks once per model, the artifact
draw made once per process; each against the plain construction it replaces."""

from __future__ import annotations

import numpy as np
import pytest

from gpusched_env.cluster.build import build_simulator
from gpusched_env.cluster.simulator import JobRecords, Simulator
from gpusched_env.cluster.variability import sample_factors
from gpusched_env.pipeline.spec import PipelineSpec
from gpusched_env.policy import run_policy
from gpusched_env.scenario import load_scenario
from gpusched_env.testing import StrictFifo
from gpusched_env.topology import NodeGroup, Topology
from gpusched_env.types import Job, JobRecord


def _fifo_run(sim: Simulator) -> None:
    run_policy(sim, StrictFifo())


def _fields(rec: JobRecord) -> tuple[object, ...]:
    return (rec.job, rec.first_start_s, rec.finish_s, rec.gpu_seconds, rec.energy_j, rec.preemptions,
            rec.restarts, rec.migrations, rec.deadline_met)


def test_records_made_on_first_read() -> None:
    a, b = Job(4, 0.0, 1, 10.0, "resnet50"), Job(9, 5.0, 2, 10.0, "vgg16")
    recs = JobRecords({4: a, 9: b})
    assert len(recs) == 0
    r = recs[9]
    assert r.job is b and r.first_start_s is None and r.gpu_seconds == 0.0
    assert recs[9] is r and list(recs) == [9]  # kept: the next read is the same record
    with pytest.raises(KeyError):
        recs[5]


def test_lazy_records_give_the_plain_result() -> None:
    """A PAL run that ends before most background jobs arrive: the same records as a simulator
    holding every record from the start, and none made for a job that never arrived until the
    result is read."""
    scn = load_scenario("pal_philly")
    results = []
    for plain in (False, True):
        _, jobs, sim = build_simulator(scn, 11, 0)
        if plain:
            sim.records = {j.job_id: JobRecord(j) for j in sim.jobs}
        _fifo_run(sim)
        if not plain:
            arrived = {j.job_id for j in sim.jobs if j.arrival_s <= sim.env.now}
            assert set(sim.records) <= arrived < {j.job_id for j in jobs}  # the run ended before them all
        results.append(sim.result())
    lazy, plain_res = results
    assert [_fields(r) for r in lazy.records] == [_fields(r) for r in plain_res.records]
    assert len(lazy.records) == 2160 and lazy.makespan_s == plain_res.makespan_s


def test_runs_do_not_share_records() -> None:
    scn = load_scenario("pal_philly")
    _, _, s1 = build_simulator(scn, 3, 1)
    _, _, s2 = build_simulator(scn, 4, 1)
    assert s1.records[0] is not s2.records[0]
    s1.records[0].restarts = 7
    assert s2.records[0].restarts == 0


def test_check_jobs_errors_as_the_plain_loop() -> None:
    topo = Topology.build([NodeGroup(1, 2)])
    n = topo.n_gpus
    ok = Job(0, 0.0, 1, 10.0, "resnet50")
    # the first bad job in arrival order decides, whatever its kind
    with pytest.raises(KeyError, match="unknown model .no-such-model."):
        Simulator(topo, [ok, Job(1, 1.0, 1, 10.0, "no-such-model"), Job(2, 2.0, n + 1, 10.0, "resnet50")])
    with pytest.raises(ValueError, match=f"job 2 needs {n + 1} GPUs; the cluster has {n}"):
        Simulator(topo, [ok, Job(2, 1.0, n + 1, 10.0, "resnet50"), Job(1, 2.0, 1, 10.0, "no-such-model")])
    pipe = Job(3, 1.0, 1, 10.0, "resnet50", pipeline=PipelineSpec(stages=2, microbatches=4, f_ms=(1.0, 1.0), b_ms=(2.0, 2.0), w_ms=(0.0, 0.0)))
    with pytest.raises(ValueError, match=r"job 3: a pipeline job runs one stage per GPU"):
        Simulator(topo, [ok, pipe])
    sim = Simulator(topo, [ok, Job(1, 1.0, 2, 10.0, "vgg16"), Job(2, 2.0, 1, 10.0, "resnet50")])
    assert sorted(sim._spec_cache) == ["resnet50", "vgg16"]  # each model checked (and kept) once


def test_artifact_draw_made_once_is_the_runs_draw() -> None:
    scn = load_scenario("pal_philly")
    _, _, s1 = build_simulator(scn, 3, 0)
    _, _, s2 = build_simulator(scn, 4, 2)
    topo = scn.cluster.topology()
    want = sample_factors(topo.n_gpus, scn.model_for(0).variability, np.random.default_rng(0))
    for sim in (s1, s2):
        assert np.array_equal(sim.visible_slowdown, want)
        assert np.array_equal(sim.speed.factors, want)
        assert sim.speed.factors.flags.writeable  # each run's own copy (drift may replace it)
    assert s1.speed.factors is not s2.speed.factors
