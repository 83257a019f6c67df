"""gpusched: the applications on top of the simulator ``gpusched_env``.

Subpackages, imports pointing downward only (tests/test_architecture.py):
``gpusched.baselines`` (published heuristics), ``gpusched.agents`` (SB3 agents and shipped checkpoints),
``gpusched.bench`` (benchmark app), ``gpusched.studies`` (studies) and ``gpusched.real``
(real-GPU backend and lab-cluster service, beside bench).
"""
