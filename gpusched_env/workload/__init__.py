"""Workloads: trace loaders (PAL, Philly, Alibaba openb) and the synthetic Philly-like generator."""

from gpusched_env.workload.errors import LoadReport, TraceError, Workload
from gpusched_env.workload.mix import DEFAULT_MODEL_MIX, ModelMix, draw_models
from gpusched_env.workload.openb import load_openb, load_openb_nodes
from gpusched_env.workload.pal import load_pal_workload, with_background
from gpusched_env.workload.philly import load_philly
from gpusched_env.workload.synthetic import SyntheticPhilly, fit_philly, scaled, toy_workload

__all__ = [
    "DEFAULT_MODEL_MIX",
    "LoadReport",
    "ModelMix",
    "SyntheticPhilly",
    "TraceError",
    "Workload",
    "draw_models",
    "fit_philly",
    "load_openb",
    "load_openb_nodes",
    "load_pal_workload",
    "load_philly",
    "scaled",
    "toy_workload",
    "with_background",
]
