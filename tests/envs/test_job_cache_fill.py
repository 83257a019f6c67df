"""The job cache's static numbers (filled once per reset for a run's jobs) against hand-computed
values and a plain per-job transcription; ``Job.class_index`` by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gpusched_env.catalog import base_iter_s
from gpusched_env.envs.observe import ARRIVAL_COL, JobCache
from gpusched_env.topology import NodeGroup, Topology
from gpusched_env.types import PERF_CLASSES, Job


def test_class_index_by_hand() -> None:
    assert [Job(0, 0.0, 1, 1.0, "resnet50", c).class_index for c in "ABCD"] == [0, 1, 2, 3]
    with pytest.raises(ValueError, match=r"Job 7: perf_class must be one of .*got 'Z'"):
        _ = Job(7, 0.0, 1, 1.0, "resnet50", "Z").class_index


def _jobs(min_mem: float) -> list[Job]:
    return [  # ids out of order and with a gap; two models, three classes
        Job(5, 30.0, 2, 100.0, "resnet50", "C", 1.0),
        Job(2, 0.0, 1, 4000.0, "resnet50", "A", 2.0),
        Job(9, 3600.0, 4, 50.0, "vgg19", "D", min_mem),
        Job(3, 0.0, 1, 100.0, "resnet50", "C", 0.0),
    ]


def test_fill_by_hand() -> None:
    topo = Topology.build([NodeGroup(2, 2)])
    jobs = _jobs(topo.min_gpu_mem_gb)
    c = JobCache()
    c.fill(jobs, topo, whole_run=True)
    r, v = base_iter_s("resnet50") / 3600.0, base_iter_s("vgg19") / 3600.0
    assert c.gpus_l[:10] == [0, 0, 1, 1, 0, 2, 0, 0, 0, 4]
    assert c.mem_l[:10] == [0.0, 0.0, 2.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, topo.min_gpu_mem_gb]
    assert c.cls[[5, 2, 9, 3]].tolist() == [2, 0, 3, 2]
    assert c.work_l[2] == 4000.0 * base_iter_s("resnet50") / 3600.0
    np.testing.assert_allclose(c.work[[5, 2, 9, 3]], [100 * r, 4000 * r, 50 * v, 100 * r], rtol=1e-15)
    assert math.isnan(c.work_l[0]) and math.isnan(c.work[4])  # unknown ids keep the fill
    assert c.slot[9].tolist() == [1.0, math.log2(5) / math.log2(5), 0.0, 0.0, 0.0, 1.0, 1.0,
                                  math.log1p(50 * v), 0.0, 0.0, 4.0]
    assert c.slot[5, ARRIVAL_COL] == 30.0 / 3600.0
    assert not c.constrained  # memory at most the smallest GPU's, no GPU type
    # ranks by (work, arrival, id): jobs 3 and 5 have equal work, 3 arrived first
    order = sorted([(100 * r, 30.0, 5), (4000 * r, 0.0, 2), (50 * v, 3600.0, 9), (100 * r, 0.0, 3)])
    assert c.by_rank == [i for _, _, i in order]
    assert c.qrank_l[:10] == [-1, -1, 0, 1, -1, 2, -1, -1, -1, 3]  # by (arrival, id)


@pytest.mark.parametrize("extra", ["mem", "type", "none"])
def test_fill_equals_a_plain_transcription(extra: str) -> None:
    """The same numbers as one job at a time (the definition), constrained flag included."""
    topo = Topology.build([NodeGroup(2, 2)])
    jobs = _jobs(topo.min_gpu_mem_gb)
    if extra == "mem":
        jobs.append(Job(11, 5.0, 1, 7.0, "vgg19", "B", topo.min_gpu_mem_gb + 1.0))
    elif extra == "type":
        jobs.append(Job(11, 5.0, 1, 7.0, "vgg19", "B", gpu_type=str(topo.gpu_types[0])))
    c = JobCache()
    c.fill(jobs[:2], topo)  # two calls: the second grows the arrays
    c.fill(jobs[2:], topo)
    for j in jobs:
        w = j.work_iters * base_iter_s(j.model) / 3600.0
        assert (c.gpus_l[j.job_id], c.mem_l[j.job_id], c.work_l[j.job_id]) == (j.num_gpus, j.mem_gb, w)
        assert c.cls[j.job_id] == PERF_CLASSES.index(j.perf_class)
        assert c.work[j.job_id] == w
        assert c.slot[j.job_id, 2 + PERF_CLASSES.index(j.perf_class)] == 1.0
    assert c.constrained == (extra != "none")
