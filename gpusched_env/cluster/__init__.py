"""Cluster level: the discrete-event model of a GPU cluster (event loop, accounting, processes)."""
