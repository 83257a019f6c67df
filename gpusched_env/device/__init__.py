"""Device level: what happens inside one GPU shared by several tenants.

Contract: :class:`gpusched_env.device.seam.DeviceModel` returns an outcome for every tenant of a
GPU at once. This package never imports :mod:`gpusched_env.cluster`, policies or agents.
"""
