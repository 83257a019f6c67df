"""Workloads: trace loaders (PAL, Philly, Alibaba openb) and the synthetic Philly-like generator."""

from gpusched_env.workload.errors import LoadReport, TraceError, Workload
from gpusched_env.workload.mix import DEFAULT_MODEL_MIX, ModelMix, draw_models
from gpusched_env.workload.pal import load_pal_workload, with_background
from gpusched_env.workload.philly import load_philly

__all__ = [
    "DEFAULT_MODEL_MIX", "LoadReport", "ModelMix", "TraceError", "Workload", "draw_models",
    "load_pal_workload", "load_philly", "with_background",
]
