"""Pipeline level: what happens inside one pipeline-parallel job (stages, micro-batches, links).

This package never imports :mod:`gpusched_env.cluster`, policies or agents.
"""
