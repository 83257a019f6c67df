"""Alibaba's GPU-sharing cluster trace "openb" (FGD, ATC'23; alibaba/clusterdata cluster-trace-gpu-v2023).

Pods (``openb_pod_list_*.csv``): ``name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,
pod_phase,creation_time,deletion_time,scheduled_time`` (times in seconds). How rows become jobs:

- arrival = ``creation_time``; run time = ``deletion_time - scheduled_time``. Pods still Running at
  the end of the trace carry the trace end as deletion time, so their run time is truncated there
  (kept as is: the trace does not say how much longer they ran).
- ``num_gpu = 0`` pods are CPU-only: skipped, counted under :data:`CPU_ONLY` (also in strict mode).
- Pods with no ``scheduled_time`` (phase Pending: never placed in the trace) have no run time:
  skipped, counted under :data:`NEVER_SCHEDULED` (also in strict mode).
- ``num_gpu = 1`` and ``gpu_milli < 1000``: a GPU share, ``gpu_fraction = gpu_milli / 1000``;
  ``mem_gb`` is that share of the model's memory (choice). Multi-GPU pods must have ``gpu_milli = 1000``.
- ``gpu_spec`` non-empty -> ``gpu_type`` as written (e.g. ``V100M16``); empty -> any type.
- The model is drawn from a model mix (the trace names none); ``work_iters`` is the run time over the
  model's V100 iteration time. Job id = the pod's 0-based row in the file.

The resampled variant ``openb_pod_list_multigpu50.csv`` has no time columns and is rejected as such.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gpusched_env.catalog import GPUS, model_spec
from gpusched_env.topology import NodeGroup
from gpusched_env.types import Job
from gpusched_env.workload._table import Checker, read_csv
from gpusched_env.workload.errors import LoadReport, TraceError, Workload
from gpusched_env.workload.mix import DEFAULT_MODEL_MIX, ModelMix, draw_models

POD_COLUMNS = ("name", "num_gpu", "gpu_milli", "creation_time", "deletion_time", "scheduled_time")
NODE_COLUMNS = ("sn", "gpu", "model")
CPU_ONLY = "CPU-only pod (num_gpu = 0)"
NEVER_SCHEDULED = "never scheduled (no scheduled_time, e.g. pod_phase Pending)"


def load_openb(
    pods_path: str | Path,
    nodes_path: str | Path | None = None,
    *,
    rng: np.random.Generator,
    strict: bool = True,
    max_gpus: int | None = None,
    model_mix: ModelMix = DEFAULT_MODEL_MIX,
) -> Workload:
    """Load openb pods as jobs sorted by arrival. With ``nodes_path``, ``max_gpus`` defaults to the
    largest node's GPU count (FGD places each pod on one node), and a pod needing more is an error."""
    if nodes_path is not None and max_gpus is None:
        max_gpus = max(g.gpus_per_node for g in load_openb_nodes(nodes_path))
    src = str(pods_path)
    df = read_csv(pods_path, POD_COLUMNS)
    report = LoadReport(src)
    chk = Checker(df, src, strict=strict, report=report)
    gpus = chk.numeric("num_gpu", non_negative=True, integer=True)
    chk.skip(gpus == 0, CPU_ONLY)
    chk.reject(
        gpus > (max_gpus if max_gpus is not None else np.inf), "num_gpu", f"exceeds max_gpus={max_gpus}"
    )
    milli = chk.numeric("gpu_milli", positive=True, integer=True, max_value=1000, max_name="1000 (one GPU)")
    chk.reject((gpus > 1) & (milli < 1000), "gpu_milli", "a multi-GPU pod must use whole GPUs (1000)")
    created = chk.numeric("creation_time", non_negative=True)
    sched_raw = df["scheduled_time"].astype(str).str.strip()
    chk.skip((sched_raw == "").to_numpy(), NEVER_SCHEDULED)
    sched = chk.numeric("scheduled_time", non_negative=True)
    deleted = chk.numeric("deletion_time", non_negative=True)
    run_s = deleted - sched
    chk.reject(run_s <= 0, "deletion_time", "must be after scheduled_time")
    chk.reject(sched < created, "scheduled_time", "must not be before creation_time")
    spec_col = (
        df["gpu_spec"].astype(str).str.strip().to_numpy(dtype=object)
        if "gpu_spec" in df.columns
        else np.full(len(df), "", dtype=object)
    )
    keep = chk.done()
    keep = keep[np.argsort(created[keep], kind="stable")]
    models = draw_models(rng, len(keep), model_mix)
    specs = {m: model_spec(m) for m in set(models)}
    rows = df.index.to_numpy()
    jobs = []
    for i, m in zip(keep, models, strict=True):
        frac = float(milli[i]) / 1000.0
        spec = specs[m]
        jobs.append(
            Job(
                job_id=int(rows[i]),
                arrival_s=float(created[i]),
                num_gpus=int(gpus[i]),
                work_iters=float(run_s[i]) / spec.base_iter_s,
                model=m,
                perf_class=spec.perf_class,
                mem_gb=spec.mem_gb * frac,
                gpu_fraction=frac,
                gpu_type=str(spec_col[i]) or None,
            )
        )
    return Workload(jobs, report)


def load_openb_nodes(path: str | Path) -> list[NodeGroup]:
    """openb nodes (``sn,cpu_milli,memory_mib,gpu,model``) grouped by (GPU count, GPU model), in order
    of first appearance; GPU memory from the catalogue (:data:`~gpusched_env.catalog.GPUS`) where the
    model is known, else the :class:`NodeGroup` default. Any bad row raises :class:`TraceError`."""
    src = str(path)
    df = read_csv(path, NODE_COLUMNS)
    chk = Checker(df, src, strict=True, report=LoadReport(src))
    gpus = chk.numeric("gpu", positive=True, integer=True)
    model = df["model"].astype(str).str.strip()
    chk.reject((model == "").to_numpy(), "model", "missing value")
    chk.done()
    counts: dict[tuple[int, str], int] = {}
    for n, name in zip(gpus.astype(np.int64).tolist(), model.tolist(), strict=True):
        counts[(n, name)] = counts.get((n, name), 0) + 1
    groups = []
    for (n, name), count in counts.items():
        if name in GPUS:
            groups.append(NodeGroup(count, n, name, GPUS[name].mem_gb))
        else:
            groups.append(NodeGroup(count, n, name))
    if not groups:
        raise TraceError(src, 2, "sn", "no nodes in file", "")
    return groups
