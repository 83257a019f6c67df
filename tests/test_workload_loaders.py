"""Trace loaders and the synthetic generator, on small hand-made CSVs (and on the real data if present)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gpusched_env.catalog import model_spec
from gpusched_env.data import DataMissing, data_path
from gpusched_env.types import Job
from gpusched_env.workload import (
    DEFAULT_MODEL_MIX,
    TraceError,
    Workload,
    load_pal_workload,
    load_philly,
    with_background,
)
from gpusched_env.workload.openb import CPU_ONLY, NEVER_SCHEDULED, load_openb, load_openb_nodes
from gpusched_env.workload.synthetic import SyntheticPhilly, fit_philly, scaled, toy_workload

PAL_CSV = """job_id,num_gpus,submit_time,duration,model
0,1,98,1481.0,vgg19
1,12,115,4037.0,DCGAN
2,2,178,13504.0,BERT
"""

PHILLY_CSV = """timestamp,duration,num_gpus,gpu_time,cluster
2017-10-09 07:01:55,66.0,1,66.0,11cb48
2017-10-09 06:13:03,2951.0,2,5902.0,6214e9
2017-10-09 06:13:36,2759.0,1,2759.0,6214e9
2017-10-10 00:00:00,100.0,8,800.0,6214e9
"""

OPENB_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
    "creation_time,deletion_time,scheduled_time\n"
)
OPENB_CSV = (
    OPENB_HEADER
    + """p0,12000,16384,1,1000,,LS,Running,0,500,10
p1,6000,12288,1,460,,LS,Succeeded,20,120,30
p2,4000,8192,0,0,,BE,Running,25,200,25
p3,4000,8192,1,1000,,BE,Pending,40,41,
p4,8000,8192,8,1000,V100M16,LS,Failed,5,105,5
"""
)

NODES_CSV = """sn,cpu_milli,memory_mib,gpu,model
n0,64000,262144,2,P100
n1,64000,262144,8,G2
n2,64000,262144,2,P100
n3,96000,786432,8,Unknown9
"""


def _write(tmp_path: Path, text: str, name: str = "trace.csv") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def _load(kind: str, path: Path, *, strict: bool = True, max_gpus: int | None = None) -> Workload:
    if kind == "pal":
        return load_pal_workload(path, strict=strict, max_gpus=max_gpus)
    if kind == "philly":
        return load_philly(path, rng=np.random.default_rng(0), strict=strict, max_gpus=max_gpus)
    return load_openb(path, rng=np.random.default_rng(0), strict=strict, max_gpus=max_gpus)


# ---------------------------------------------------------------- exact values
def test_pal_exact_fields(tmp_path: Path) -> None:
    w = load_pal_workload(_write(tmp_path, PAL_CSV))
    assert w.jobs[0] == Job(0, 98.0, 1, 1481.0, "vgg19", "C", 12.0)
    assert w.jobs[1] == Job(1, 115.0, 12, 4037.0, "dcgan", "B", 4.0)
    assert w.jobs[2] == Job(2, 178.0, 2, 13504.0, "bert", "B", 12.0)
    assert (w.report.rows_read, w.report.rows_skipped, w.report.rows_kept) == (3, 0, 3)


def test_pal_background(tmp_path: Path) -> None:
    jobs = load_pal_workload(_write(tmp_path, PAL_CSV)).jobs
    bg = with_background(jobs, rng=np.random.default_rng(1), n_background=7)
    assert [j.job_id for j in bg] == list(range(3, 10))
    assert all(not j.tracked for j in bg)
    assert [j.model for j in bg] == ["vgg19", "dcgan", "bert"] * 2 + ["vgg19"]
    assert [j.work_iters for j in bg[:3]] == [1481.0, 4037.0, 13504.0]
    arr = np.array([j.arrival_s for j in bg])
    assert arr[0] > 178.0 and np.all(np.diff(arr) > 0) and np.all(arr == np.round(arr))
    many = with_background(
        jobs, rng=np.random.default_rng(2), n_background=5000, rate_per_hour=2.0, id_offset=160
    )
    assert many[0].job_id == 160
    gaps = np.diff([178.0] + [j.arrival_s for j in many])
    assert gaps.mean() == pytest.approx(1800.0 + 0.5, rel=0.05)
    assert with_background(jobs, rng=np.random.default_rng(1), n_background=7) == bg


def test_philly_exact_fields(tmp_path: Path) -> None:
    mix = (("resnet50", 1.0),)
    w = load_philly(_write(tmp_path, PHILLY_CSV), rng=np.random.default_rng(0), model_mix=mix)
    r50 = model_spec("resnet50")
    # sorted by timestamp; arrival from the earliest (06:13:03)
    assert [j.arrival_s for j in w.jobs] == [0.0, 33.0, 48 * 60 + 52.0, 17 * 3600 + 46 * 60 + 57.0]
    assert [j.job_id for j in w.jobs] == [0, 1, 2, 3]
    assert w.jobs[0] == Job(0, 0.0, 2, 2951.0 / r50.base_iter_s, "resnet50", "A", r50.mem_gb)
    assert [j.num_gpus for j in w.jobs] == [2, 1, 1, 8]


def test_philly_filters_are_counted(tmp_path: Path) -> None:
    path = _write(tmp_path, PHILLY_CSV)
    rng = np.random.default_rng(0)
    w = load_philly(path, rng=rng, virtual_cluster="6214e9", start="2017-10-09 06:13:10", limit=1)
    assert len(w.jobs) == 1 and w.jobs[0].arrival_s == 0.0 and w.jobs[0].num_gpus == 1
    assert sum(w.report.filtered.values()) == 3 and w.report.rows_kept == 1
    w = load_philly(path, rng=rng, end="2017-10-09 07:00:00")
    assert len(w.jobs) == 2 and w.report.rows_read == 4


def test_openb_exact_fields_and_documented_skips(tmp_path: Path) -> None:
    mix = (("bert", 1.0),)
    w = load_openb(_write(tmp_path, OPENB_CSV), rng=np.random.default_rng(0), model_mix=mix)
    bert = model_spec("bert")
    assert [j.job_id for j in w.jobs] == [0, 4, 1]  # by creation time; id = row in file
    assert w.jobs[0] == Job(0, 0.0, 1, 490.0 / bert.base_iter_s, "bert", "B", bert.mem_gb)
    assert w.jobs[1] == Job(4, 5.0, 8, 100.0 / bert.base_iter_s, "bert", "B", bert.mem_gb, gpu_type="V100M16")
    j1 = w.jobs[2]
    assert j1.gpu_fraction == pytest.approx(0.46) and j1.mem_gb == pytest.approx(0.46 * bert.mem_gb)
    assert j1.arrival_s == 20.0 and j1.work_iters == pytest.approx(90.0 / bert.base_iter_s)
    assert w.report.reasons == {CPU_ONLY: 1, NEVER_SCHEDULED: 1}
    assert (w.report.rows_read, w.report.rows_skipped) == (5, 2)


def test_openb_nodes(tmp_path: Path) -> None:
    groups = load_openb_nodes(_write(tmp_path, NODES_CSV, "nodes.csv"))
    assert [(g.count, g.gpus_per_node, g.gpu_type, g.gpu_mem_gb) for g in groups] == [
        (2, 2, "P100", 16.0),
        (1, 8, "G2", 32.0),
        (1, 8, "Unknown9", 32.0),
    ]
    pods = _write(tmp_path, OPENB_HEADER + "p0,1,1,16,1000,,LS,Running,0,10,0\n")
    with pytest.raises(TraceError, match="exceeds max_gpus=8"):
        load_openb(pods, _write(tmp_path, NODES_CSV, "nodes.csv"), rng=np.random.default_rng(0))


# ---------------------------------------------------------------- bad input
BAD_CASES: list[tuple[str, str, str, int, str, int]] = [
    # (loader, csv, field, line, problem, good rows left)
    ("pal", PAL_CSV.replace("2,2,178,13504.0", "2,2,178,-5"), "duration", 4, "must be > 0", 2),
    ("pal", PAL_CSV.replace("0,1,98,1481.0", "0,0,98,1481.0"), "num_gpus", 2, "must be > 0", 2),
    ("pal", PAL_CSV.replace("1,12,115", "1,12,soon"), "submit_time", 3, "not a finite number", 2),
    ("pal", PAL_CSV.replace("0,1,98,1481.0", "0,1,98,"), "duration", 2, "missing value", 2),
    ("pal", PAL_CSV.replace("BERT", "NotAModel"), "model", 4, "unknown model", 2),
    ("pal", PAL_CSV.replace("0,1,98", "0,1.5,98"), "num_gpus", 2, "not a whole number", 2),
    ("pal", PAL_CSV.replace("2,2,178", "1,2,178"), "job_id", 4, "duplicate job id", 2),
    ("philly", PHILLY_CSV.replace("2951.0,2", "-1.0,2"), "duration", 3, "must be > 0", 3),
    ("philly", PHILLY_CSV.replace("66.0,1,66.0", "0,1,66.0"), "duration", 2, "must be > 0", 3),
    ("philly", PHILLY_CSV.replace("2759.0,1", "2759.0,0"), "num_gpus", 4, "must be > 0", 3),
    ("philly", PHILLY_CSV.replace("100.0,8", "100.0,eight"), "num_gpus", 5, "not a finite number", 3),
    ("philly", PHILLY_CSV.replace("2017-10-09 07:01:55", "yesterday"), "timestamp", 2, "not a time", 3),
    (
        "openb",
        OPENB_CSV.replace("p0,12000,16384,1,1000", "p0,12000,16384,-1,1000"),
        "num_gpu",
        2,
        "must be >= 0",
        2,
    ),
    ("openb", OPENB_CSV.replace("6000,12288,1,460", "6000,12288,1,0"), "gpu_milli", 3, "must be > 0", 2),
    ("openb", OPENB_CSV.replace("Failed,5,105,5", "Failed,5,3,5"), "deletion_time", 6, "must be after", 2),
    (
        "openb",
        OPENB_CSV.replace("Succeeded,20,120", "Succeeded,x,120"),
        "creation_time",
        3,
        "not a finite",
        2,
    ),
]


@pytest.mark.parametrize(("kind", "text", "field", "line", "problem", "left"), BAD_CASES)
def test_bad_row(
    tmp_path: Path, kind: str, text: str, field: str, line: int, problem: str, left: int
) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(TraceError) as info:
        _load(kind, path)
    msg = str(info.value)
    assert msg.startswith(f"{path}:{line}: field '{field}': ") and problem in msg and "(got " in msg
    assert (info.value.line, info.value.field) == (line, field)
    w = _load(kind, path, strict=False)
    errors = {r: n for r, n in w.report.reasons.items() if r not in (CPU_ONLY, NEVER_SCHEDULED)}
    assert len(w.jobs) == left and w.report.rows_kept == left
    [(reason, n)] = errors.items()
    assert n == 1 and reason.startswith(f"{field}: ") and problem in reason


@pytest.mark.parametrize(
    ("kind", "text", "max_gpus", "line"),
    [("pal", PAL_CSV, 8, 3), ("philly", PHILLY_CSV, 4, 5), ("openb", OPENB_CSV, 4, 6)],
)
def test_job_larger_than_max_gpus(tmp_path: Path, kind: str, text: str, max_gpus: int, line: int) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(TraceError, match=rf"^{path}:{line}: field 'num_gpus?': exceeds max_gpus={max_gpus}"):
        _load(kind, path, max_gpus=max_gpus)
    w = _load(kind, path, strict=False, max_gpus=max_gpus)
    assert sum(n for r, n in w.report.reasons.items() if "exceeds max_gpus" in r) == 1
    assert all(j.num_gpus <= max_gpus for j in w.jobs)


@pytest.mark.parametrize(
    ("kind", "text", "column"),
    [
        ("pal", PAL_CSV.replace(",model", ",modelname"), "model"),
        ("philly", PHILLY_CSV.replace("num_gpus", "gpus"), "num_gpus"),
        ("openb", OPENB_CSV.replace("scheduled_time", "sched"), "scheduled_time"),
    ],
)
def test_missing_column(tmp_path: Path, kind: str, text: str, column: str) -> None:
    path = _write(tmp_path, text)
    for strict in (True, False):
        with pytest.raises(TraceError, match=rf"^{path}:1: field '{column}': missing column"):
            _load(kind, path, strict=strict)


def test_earliest_bad_line_is_reported(tmp_path: Path) -> None:
    text = PAL_CSV.replace("2,2,178,13504.0", "2,2,178,-5").replace(
        "0,1,98,1481.0,vgg19", "0,1,98,1481.0,nope"
    )
    with pytest.raises(TraceError, match=r":2: field 'model'"):
        load_pal_workload(_write(tmp_path, text))
    w = load_pal_workload(_write(tmp_path, text), strict=False)
    assert w.report.rows_skipped == 2 and len(w.jobs) == 1


# ---------------------------------------------------------------- determinism
def test_determinism(tmp_path: Path) -> None:
    philly = _write(tmp_path, PHILLY_CSV * 1 + "".join(PHILLY_CSV.splitlines(keepends=True)[1:]) * 20)
    a = load_philly(philly, rng=np.random.default_rng(7)).jobs
    b = load_philly(philly, rng=np.random.default_rng(7)).jobs
    c = load_philly(philly, rng=np.random.default_rng(8)).jobs
    assert a == b and a != c
    openb = _write(tmp_path, OPENB_CSV, "pods.csv")
    assert (
        load_openb(openb, rng=np.random.default_rng(3)).jobs
        == load_openb(openb, rng=np.random.default_rng(3)).jobs
    )
    gen = SyntheticPhilly()
    assert gen.generate(np.random.default_rng(5), 300) == gen.generate(np.random.default_rng(5), 300)
    assert gen.generate(np.random.default_rng(5), 300) != gen.generate(np.random.default_rng(6), 300)


# ---------------------------------------------------------------- synthetic
def test_synthetic_generate() -> None:
    gen = SyntheticPhilly()
    jobs = gen.generate(np.random.default_rng(0), 20000)
    assert [j.job_id for j in jobs] == list(range(20000))
    arr = np.array([j.arrival_s for j in jobs])
    assert np.all(np.diff(arr) >= 0)
    assert len(arr) / (arr[-1] / 3600.0) == pytest.approx(gen.rate_per_hour, rel=0.05)
    assert set(j.num_gpus for j in jobs) <= set(gen.gpu_counts)
    assert Counter(j.model for j in jobs).keys() <= {model_spec(m).name for m, _ in DEFAULT_MODEL_MIX}
    flat = SyntheticPhilly(diurnal=None).generate(np.random.default_rng(0), 5000)
    assert len(flat) == 5000
    assert gen.generate(np.random.default_rng(0), 0) == []


def test_synthetic_scaling() -> None:
    s = scaled(64, 0.8, max_gpus=8)
    assert max(s.gpu_counts) == 8
    assert s.rate_per_hour * s.mean_gpu_seconds() / 3600.0 / 64 == pytest.approx(0.8)
    jobs = s.generate(np.random.default_rng(0), 40000)
    offered = sum(j.num_gpus * j.work_iters * model_spec(j.model).base_iter_s for j in jobs)
    span = jobs[-1].arrival_s
    assert offered / span / 64 == pytest.approx(0.8, rel=0.25)  # heavy-tailed: loose
    assert SyntheticPhilly().scaled(rate_per_hour=3.0).rate_per_hour == 3.0
    with pytest.raises(ValueError):
        SyntheticPhilly().scaled(max_gpus=0)
    with pytest.raises(ValueError):
        SyntheticPhilly(rate_per_hour=0)


def test_toy_workload() -> None:
    jobs = toy_workload()
    assert len(jobs) == 8 and {j.perf_class for j in jobs} == {"A", "B", "C", "D"}
    assert toy_workload() == jobs


# ---------------------------------------------------------------- real data (skipped without it)
def _real(rel: str) -> Path:
    try:
        return data_path(rel)
    except DataMissing:
        pytest.skip(f"data file {rel} absent")


def test_real_philly_full() -> None:
    path = _real("traces/philly/philly.csv")
    w = load_philly(path, rng=np.random.default_rng(0))
    assert len(w.jobs) == 82247 and w.report.rows_read == 82247 and w.report.rows_skipped == 0
    assert w.jobs[0].arrival_s == 0.0


def test_real_pal_workloads() -> None:
    totals: Counter[str] = Counter()
    for n in range(1, 9):
        w = _real_pal(n)
        assert len(w.jobs) == 160 and [j.job_id for j in w.jobs] == list(range(160))
        totals.update(j.model for j in w.jobs)
    assert dict(totals) == {model_spec(m).name: int(c) for m, c in DEFAULT_MODEL_MIX}


def _real_pal(n: int) -> Workload:
    return load_pal_workload(_real(f"traces/philly/pal-workloads/workload-{n}.csv"))


def test_real_openb() -> None:
    pods = _real("traces/alibaba-openb/openb_pod_list_default.csv")
    nodes = _real("traces/alibaba-openb/openb_node_list_gpu_node.csv")
    w = load_openb(pods, nodes, rng=np.random.default_rng(0))
    assert w.report.rows_read == 8152 and w.report.reasons[CPU_ONLY] == 1088
    assert len(w.jobs) == w.report.rows_kept > 6000
    assert sum(g.count * g.gpus_per_node for g in load_openb_nodes(nodes)) == 6212


def test_embedded_synthetic_constants_match_refit() -> None:
    fitted = fit_philly(_real("traces/philly/philly.csv"))
    default = SyntheticPhilly()
    for name in (
        "rate_per_hour",
        "diurnal",
        "gpu_counts",
        "gpu_probs",
        "single_gpu_quantiles_s",
        "multi_gpu_quantiles_s",
    ):
        got: Any = getattr(fitted, name)
        assert getattr(default, name) == pytest.approx(got, rel=1e-4, abs=1e-6), name
