"""Simulator vs real on the same workload: the fidelity check behind ``gpusched-real compare``.

The simulator is calibrated from a profile run of this machine: per-device, per-class slowdown
factors (``slowdown_profile``), each model's base iteration time (``models``), and the measured
process start-up time, given to the simulator as ``start_cost_s`` (first start) and
``restart_cost_s`` (resume).

The profile measured iteration times on this machine's own devices, so the simulator must use them
as they are: the catalogue's base times are V100 times that the simulator divides by each GPU
type's ``speed``, so the calibrated base time is the measured one times the speed of the reference
device type, and each device's slowdown row carries the ratio of its type's speed to that
reference (1 on a one-type cluster). Errors are computed only when both runs finished the same
tracked jobs.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable

import numpy as np

from gpusched.real.config import RealWorkload, perf_class
from gpusched.real.profile import ProfileResult
from gpusched_env.catalog import GPUS, ModelSpec
from gpusched_env.cluster.model import SimModel
from gpusched_env.cluster.simulator import Simulator
from gpusched_env.metrics import RunResult, compute_metrics
from gpusched_env.policy import Policy, run_policy
from gpusched_env.run_rules import unfinished_tracked
from gpusched_env.topology import Topology

METRICS = ("avg_jct_s", "makespan_s", "energy_kwh")


class CompareError(ValueError):
    """The real and simulated runs cannot be compared; the message says why."""


def gpu_speeds(topology: Topology) -> np.ndarray:
    """Catalogue speed (relative to a V100) of each GPU's type, shape (n_gpus,)."""
    return np.array([GPUS[topology.gpu_type_of(g)].speed for g in range(topology.n_gpus)])


def reference_speed(topology: Topology) -> float:
    """Speed of the device type the profile's base iteration times stand for (median device)."""
    return float(np.median(gpu_speeds(topology)))


def sim_factors(wl: RealWorkload, prof: ProfileResult) -> np.ndarray:
    """Per-device slowdown rows for the simulator: the profile's, times speed / reference speed, so
    that the simulator's division by each GPU's speed leaves the measured time."""
    factors = np.asarray(prof.factors, dtype=float)
    if factors.shape[0] != wl.topology.n_gpus:
        raise CompareError(f"profile {prof.run_dir}: {factors.shape[0]} devices profiled, the scenario has "
                           f"{wl.topology.n_gpus} GPUs; re-run profile on this scenario")
    return factors * (gpu_speeds(wl.topology) / reference_speed(wl.topology))[:, None]


def sim_models(wl: RealWorkload, prof: ProfileResult) -> dict[str, ModelSpec]:
    """Catalogue entries for the workload's models: the profile's measured base iteration times,
    expressed as the catalogue's V100-relative times (x the reference device type's speed)."""
    from gpusched.real.nets import build

    speed = reference_speed(wl.topology)
    out = {}
    for m in sorted({j.model for j in wl.jobs}):
        if m not in prof.base_iter_s:
            raise ValueError(f"profile {prof.run_dir} has no timing for model {m!r}; re-run profile")
        size = wl.sizes[m]
        params_m = sum(p.numel() for p in build(size).parameters()) / 1e6
        mem = max(j.mem_gb for j in wl.jobs if j.model == m)
        out[m] = ModelSpec(m, perf_class(m, size), prof.base_iter_s[m] * speed, 1.0, mem, params_m, None,
                           "gpusched-real profile")
    return out


def simulate(wl: RealWorkload, prof: ProfileResult, policy: Policy, seed: int, startup: bool = True,
             base: SimModel | None = None) -> RunResult:
    """Run ``wl`` in the simulator calibrated by ``prof`` (``startup``: model process start-up);
    ``base``: the scenario's other simulator options (variability is replaced by the profile)."""
    models = sim_models(wl, prof)
    cost = prof.startup_s if startup else 0.0
    model = dataclasses.replace(base or SimModel(), start_cost_s=cost, restart_cost_s=cost)
    sim = Simulator(wl.topology, wl.jobs, model, seed, slowdown_profile=sim_factors(wl, prof), models=models,
                    max_jobs_per_gpu=wl.max_jobs_per_gpu)
    run_policy(sim, policy)
    return sim.result()


def errors(sim: dict[str, float], real: dict[str, float], names: tuple[str, ...] = METRICS) -> dict[str, float]:
    """Relative error (sim - real) / real per metric; NaN where real is 0 or missing."""
    out = {}
    for k in names:
        r, s = real.get(k, math.nan), sim.get(k, math.nan)
        out[k] = (s - r) / r if r and not math.isnan(r) else math.nan
    return out


def compare(wl: RealWorkload, prof: ProfileResult, make_policy: Callable[[], Policy], real: RunResult, seed: int,
            energy: bool, base: SimModel | None = None) -> dict[str, object]:
    """Metrics of both runs and their errors (energy only where it is measured, not estimated);
    raises :class:`CompareError` when the two runs did not finish the same tracked jobs."""
    real_m = compute_metrics(real)
    sim_res = simulate(wl, prof, make_policy(), seed, True, base)
    check_same_jobs(real, sim_res)
    sim_m = compute_metrics(sim_res)
    raw_m = compute_metrics(simulate(wl, prof, make_policy(), seed, False, base))
    names = METRICS if energy else tuple(k for k in METRICS if k != "energy_kwh")
    per_job_real = {r.job.job_id: r.jct_s for r in real.records if r.finish_s is not None}
    return {
        "real": real_m, "sim": sim_m, "sim_no_startup": raw_m,
        "error": errors(sim_m, real_m, names), "error_no_startup": errors(raw_m, real_m, names),
        "real_jct_s": per_job_real, "startup_s": prof.startup_s,
        "profile_factors": np.asarray(prof.factors).tolist(), "base_iter_s": prof.base_iter_s,
    }


def energy_mismatch(device_names: list[str], topology: Topology) -> str | None:
    """Why the simulator's energy cannot be compared with these devices' (None: it can). Its power model is the
    scenario's GPU types', so each device must be of its GPU's type: the type (less a memory suffix such as
    ``M16``) must appear in the device's name, spaces and dashes ignored ("V100" in "Tesla V100-SXM2-16GB")."""
    if len(device_names) != topology.n_gpus:
        return f"{len(device_names)} devices, the scenario has {topology.n_gpus} GPUs"
    for g, name in enumerate(device_names):
        gpu_type = topology.gpu_type_of(g)
        if re.sub(r"M\d+$", "", gpu_type).upper() not in re.sub(r"[\s-]", "", name).upper():
            return f"GPU {g} is a {name}, the scenario's power model a {gpu_type}"
    return None


def check_same_jobs(real: RunResult, sim: RunResult) -> None:
    """Raise :class:`CompareError` unless both runs left the same tracked jobs unfinished."""
    r, s = unfinished_tracked(real.records), unfinished_tracked(sim.records)
    if r != s:
        raise CompareError(f"compare: the real run left tracked jobs {list(r)} unfinished, the simulated run "
                           f"{list(s)}; errors are computed only when both finish the same jobs")
