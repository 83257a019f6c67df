"""Power and energy accounting of a cluster (see :mod:`gpusched_env.power` for the formulas).

The ledger keeps per-GPU power and utilisation, node power (baseline, or the low-power state of
an idle node), the busy-GPU count, and integrates energy and busy GPU-seconds only when power or
load changes, so the sums do not depend on how many decision points a backend stops at.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gpusched_env.catalog import GPUS
from gpusched_env.metrics import Timeline
from gpusched_env.power import PowerConfig
from gpusched_env.topology import Topology


class PowerLedger:
    """Cluster power now and energy so far."""

    def __init__(self, topology: Topology, cfg: PowerConfig, timeline: bool) -> None:
        self.topology = topology
        self.cfg = cfg
        types = [GPUS[t] for t in topology.gpu_types]
        self.idle_w = np.array([types[i].idle_w for i in topology.gpu_type_idx], dtype=np.float64)
        self.busy_w = np.array([types[i].busy_w for i in topology.gpu_type_idx], dtype=np.float64)
        self.gpu_power = self.idle_w.copy()
        self.gpu_util = np.zeros(topology.n_gpus)
        self._idle_l: list[float] = self.idle_w.tolist()  # Python mirrors: cheap scalar access
        self._busy_l: list[float] = self.busy_w.tolist()
        self.power_l: list[float] = self.gpu_power.tolist()
        self.node_busy = [0] * topology.n_nodes  # GPUs holding jobs per node
        self._node_idle_gpu_w = np.bincount(topology.gpu_node, weights=self.idle_w, minlength=topology.n_nodes)
        nodes = range(topology.n_nodes)
        self._node_l = [[self._node_power(n, 1), self._node_power(n, 0)] for n in nodes]  # [busy, idle] term per node
        self.cluster_power = float(self.gpu_power.sum()) + sum(self._node_power(n, 0) for n in nodes)
        self.min_power = float(self.idle_w.sum()) + sum(min(self._node_power(n, 0), self._node_power(n, 1)) for n in nodes)
        self.energy_j = 0.0
        self.busy_gpu_s = 0.0
        self.busy_gpus = 0
        self._busy_set: set[int] = set()
        self._last_t = 0.0
        self.timeline = Timeline() if timeline else None
        self._views()

    def _views(self) -> None:
        """Memoryviews of ``gpu_power`` and ``gpu_util`` for :meth:`set_loads`' scalar writes (the
        same memory; a memoryview item write costs half a numpy one)."""
        self._power_mv: Any = self.gpu_power.data
        self._util_mv: Any = self.gpu_util.data

    def __getstate__(self) -> dict[str, object]:
        state = self.__dict__.copy()
        del state["_power_mv"], state["_util_mv"]  # (memoryviews do not pickle)
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self._views()

    def _node_power(self, node: int, busy: int) -> float:
        """Node power beside its GPUs' own. A sleeping node draws ``sleep_w`` in all, GPUs included,
        so its term is ``sleep_w`` minus the idle power its GPUs are booked at."""
        if busy == 0 and self.cfg.low_power_idle:
            return self.cfg.sleep_w - float(self._node_idle_gpu_w[node])
        return self.cfg.node_base_w

    def account(self, now: float) -> None:
        """Integrate energy and busy GPU-seconds up to ``now``. Called before every change of power
        or load (and at the end), never merely because time passed."""
        dt = now - self._last_t
        if dt > 0:
            self.energy_j += self.cluster_power * dt
            self.busy_gpu_s += self.busy_gpus * dt
            self._last_t = now

    def energy_now(self, now: float) -> float:
        """Cluster energy (J) up to ``now``."""
        return self.energy_j + self.cluster_power * (now - self._last_t)

    def set_loads(self, loads: list[tuple[int, float | None]]) -> None:
        """New utilisation of each listed GPU (None: it holds no job). Call :meth:`account` first."""
        idle_w, busy_w, power_l = self._idle_l, self._busy_l, self.power_l
        gpu_power, gpu_util = self._power_mv, self._util_mv
        busy_set, sleepy = self._busy_set, self.cfg.low_power_idle
        gpu_node, node_busy = self.topology.node_of_gpu, self.node_busy
        delta = 0.0
        for g, load in loads:
            is_busy = load is not None
            if load is None:
                u, p = 0.0, idle_w[g]
            else:  # gpu_power_w written out: min(1, max(0, load)) as comparisons (the same floats)
                c = load if load > 0.0 else 0.0
                if not c < 1.0:
                    c = 1.0
                i = idle_w[g]
                u, p = load, i + (busy_w[g] - i) * c
            delta += p - power_l[g]
            power_l[g] = p
            gpu_power[g] = p
            gpu_util[g] = u
            if (g in busy_set) != is_busy:
                node = gpu_node[g]
                if sleepy:  # only sleeping nodes change node power with their GPUs' load
                    terms, nb = self._node_l[node], node_busy[node]  # _node_power, looked up
                    old = terms[nb == 0]
                    nb += 1 if is_busy else -1
                    node_busy[node] = nb
                    delta += terms[nb == 0] - old
                else:
                    node_busy[node] += 1 if is_busy else -1
                if is_busy:
                    self.busy_gpus += 1
                    busy_set.add(g)
                else:
                    self.busy_gpus -= 1
                    busy_set.discard(g)
        self.cluster_power += delta

    def mark(self, now: float) -> None:
        """Add the current point to the timeline (when kept)."""
        tl = self.timeline
        if tl is not None:  # Timeline.add, written out
            t = tl.t
            if t and t[-1] == now:
                tl.busy_gpus[-1], tl.power_w[-1] = self.busy_gpus, self.cluster_power
            else:
                t.append(now)
                tl.busy_gpus.append(self.busy_gpus)
                tl.power_w.append(self.cluster_power)
