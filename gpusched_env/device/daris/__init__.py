"""DARIS (Babaei et al.; AmirFB/DARIS) and its baselines on a stage-level model of one GPU.

Periodic DNN inference tasks (high / low priority) run as jobs split into stages; schedulers place
stages (or batches) onto SM partitions (MPS contexts) and streams. See ``docs/DEVICE_MODEL.md``.
"""
