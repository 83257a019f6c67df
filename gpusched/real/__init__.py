"""The physical backend: any policy's decisions carried out by real job processes on real devices.

- :mod:`gpusched.real.backend` — :class:`~gpusched.real.backend.RealBackend`, the Backend protocol on real processes.
- :mod:`gpusched.real.devices` — NVIDIA GPUs (CUDA_VISIBLE_DEVICES, NVML) or CPU core sets standing in.
- :mod:`gpusched.real.mps` — the run's own MPS control daemon and per-client SM share / memory / priority.
- :mod:`gpusched.real.commands` — the one layer GPU-only commands go through (dry run records them).
- :mod:`gpusched.real.launcher` — the NodeAgent seam of the trace replay: job processes on this machine.
- :mod:`gpusched.real.service` — the lab-cluster service: users' jobs from a SQLite queue, run as local
  processes or by one Ray actor per node (:class:`~gpusched.real.service.ray_engine.RayNodeAgent`);
  docs/DEPLOY.md.
- :mod:`gpusched.real.worker`, :mod:`gpusched.real.models`, :mod:`gpusched.real.nets` — the job process and its models.
- :mod:`gpusched.real.profile`, :mod:`gpusched.real.replay`, :mod:`gpusched.real.compare`, :mod:`gpusched.real.cli` — gpusched-real.
- :mod:`gpusched.real.runs` — the real backend of ``gpusched-bench backend=real`` (registered by path in
  :data:`gpusched_env.backends.BACKENDS`); ``gpusched-real replay`` is one of its runs.
"""
