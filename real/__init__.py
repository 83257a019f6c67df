"""The physical backend: any policy's decisions carried out by real job processes on real devices.

- :mod:`real.backend` — :class:`~real.backend.RealBackend`, the Backend protocol on real processes.
- :mod:`real.devices` — NVIDIA GPUs (CUDA_VISIBLE_DEVICES, NVML) or CPU core sets standing in.
- :mod:`real.mps` — the run's own MPS control daemon and per-client SM share / memory / priority.
- :mod:`real.commands` — the one layer GPU-only commands go through (dry run records them).
- :mod:`real.launcher` — the NodeAgent seam of the trace replay: job processes on this machine.
- :mod:`real.service` — the lab-cluster service: users' jobs from a SQLite queue, run as local
  processes or by one Ray actor per node (:class:`~real.service.ray_engine.RayNodeAgent`);
  docs/DEPLOY.md.
- :mod:`real.worker`, :mod:`real.models`, :mod:`real.nets` — the job process and its models.
- :mod:`real.profile`, :mod:`real.replay`, :mod:`real.compare`, :mod:`real.cli` — gpusched-real.
- :mod:`real.runs` — the real backend of ``gpusched-bench backend=real`` (registered by path in
  :data:`gpusched_env.backends.BACKENDS`); ``gpusched-real replay`` is one of its runs.
"""
