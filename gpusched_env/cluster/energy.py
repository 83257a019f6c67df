"""Power and energy accounting of a cluster (see :mod:`gpusched_env.power` for the formulas).

The ledger keeps per-GPU power and utilisation, node power (baseline, or the low-power state of
an idle node), the busy-GPU count, and integrates energy and busy GPU-seconds only when power or
load changes, so the sums do not depend on how many decision points a backend stops at.

The per-GPU state lives in two arrays (one float, one integer: a compiled call's cost grows with
its arguments) that one compiled call (:func:`set_loads_k`) updates per change of loads; the
caller writes the changed GPUs and their loads into the arrays' scratch parts
(:meth:`PowerLedger.scratch`) and calls :meth:`PowerLedger.apply_loads`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numba import njit

from gpusched_env.catalog import GPUS
from gpusched_env.compiled import entry_point
from gpusched_env.metrics import Timeline
from gpusched_env.power import PowerConfig
from gpusched_env.topology import Topology

NO_JOB = math.nan
"""The load written for a GPU that holds no job (a load is never NaN: utilisations are numbers)."""


@njit(cache=True, nogil=True)
def set_loads_k(f, i, k, n, nn, sleepy, same, fill):  # pragma: no cover (compiled)
    """:meth:`PowerLedger.set_loads_plain` for the ``k`` GPUs and loads in the scratch parts, in
    their order (the same floats, added in the same order); ``same``: every one of them gets the
    load ``fill`` (the scratch loads are not read). ``f`` = [power | util | idle_w | busy_w | loads | node term
    when busy | node term when idle], ``i`` = [busy flag | node of GPU | GPUs | busy GPUs per
    node], of ``n`` GPUs and ``nn`` nodes. Returns (change of cluster power, change of the
    busy-GPU count)."""
    delta = 0.0
    dbusy = 0
    for j in range(k):
        g = i[2 * n + j]
        load = fill if same else f[4 * n + j]
        is_busy = load == load  # NaN: no job
        if not is_busy:
            u = 0.0
            p = f[2 * n + g]
        else:  # gpu_power_w: min(1, max(0, load)) as comparisons
            c = load if load > 0.0 else 0.0
            if not c < 1.0:
                c = 1.0
            idle = f[2 * n + g]
            u = load
            p = idle + (f[3 * n + g] - idle) * c
        delta += p - f[g]
        f[g] = p
        f[n + g] = u
        if (i[g] != 0) != is_busy:
            node = i[n + g]
            nb = i[3 * n + node]
            if sleepy:  # only sleeping nodes change node power with their GPUs' load
                old = f[5 * n + nn + node] if nb == 0 else f[5 * n + node]
                nb += 1 if is_busy else -1
                delta += (f[5 * n + nn + node] if nb == 0 else f[5 * n + node]) - old
            else:
                nb += 1 if is_busy else -1
            i[3 * n + node] = nb
            if is_busy:
                dbusy += 1
                i[g] = 1
            else:
                dbusy -= 1
                i[g] = 0
    return delta, dbusy


def _first_loads(f: Any, i: Any, k: int, n: int, nn: int, sleepy: bool, same: bool, fill: float) -> tuple[float, int]:
    """The first call of :func:`set_loads_k` (through the dispatcher, which compiles or loads it);
    it puts the compiled function for these argument types in :data:`_loads_fn` for the calls after
    it (:func:`entry_point`: no type look-up)."""
    global _loads_fn
    args = (f, i, k, n, nn, bool(sleepy), bool(same), float(fill))
    out = set_loads_k(*args)
    _loads_fn = entry_point(set_loads_k, args)
    return out  # type: ignore[no-any-return]


_loads_fn: Any = _first_loads


class PowerLedger:
    """Cluster power now and energy so far."""

    compiled = True
    """Loads applied by one compiled call (:func:`set_loads_k`); False takes the plain Python
    steps (:meth:`set_loads_plain`, the same floats; tests compare the two)."""

    def __init__(self, topology: Topology, cfg: PowerConfig, timeline: bool) -> None:
        self.topology = topology
        self.cfg = cfg
        self._sleepy = bool(cfg.low_power_idle)
        n = self._n = topology.n_gpus
        nn = self._nn = topology.n_nodes
        types = [GPUS[t] for t in topology.gpu_types]
        f = self._f = np.zeros(5 * n + 2 * nn, dtype=np.float64)
        i = self._i = np.zeros(3 * n + nn, dtype=np.int64)
        self._views()
        self.idle_w[:] = [types[t].idle_w for t in topology.gpu_type_idx]
        self.busy_w[:] = [types[t].busy_w for t in topology.gpu_type_idx]
        self.gpu_power[:] = self.idle_w
        i[n:2 * n] = topology.gpu_node
        self._node_idle_gpu_w = np.bincount(topology.gpu_node, weights=self.idle_w, minlength=nn)
        nodes = range(nn)
        f[5 * n:5 * n + nn] = [self._node_power(m, 1) for m in nodes]  # the node term when busy
        f[5 * n + nn:] = [self._node_power(m, 0) for m in nodes]  # ... when idle
        self.cluster_power = float(self.gpu_power.sum()) + sum(self._node_power(m, 0) for m in nodes)
        self.min_power = float(self.idle_w.sum()) + sum(min(self._node_power(m, 0), self._node_power(m, 1)) for m in nodes)
        self.energy_j = 0.0
        self.busy_gpu_s = 0.0
        self.busy_gpus = 0
        self._last_t = 0.0
        self.timeline = Timeline() if timeline else None

    def _views(self) -> None:
        """The named views of the two arrays (module docstring), and memoryviews of the scratch
        parts (GPUs, loads) and of ``gpu_power`` for scalar access from Python (the same memory; a
        memoryview item access costs half a numpy one)."""
        f, i, n = self._f, self._i, self._n
        self.gpu_power, self.gpu_util = f[:n], f[n:2 * n]
        self.idle_w, self.busy_w = f[2 * n:3 * n], f[3 * n:4 * n]
        self.busy_mask = i[:n]  # 1 where the GPU holds a job
        self.node_busy = i[3 * n:]  # GPUs holding jobs per node
        self._gpus_mv: Any = self._i.data[2 * n:3 * n]
        self._loads_mv: Any = self._f.data[4 * n:5 * n]
        self.power_mv: Any = self._f.data[:n]

    def __getstate__(self) -> dict[str, object]:
        state = self.__dict__.copy()
        for name in ("gpu_power", "gpu_util", "idle_w", "busy_w", "busy_mask", "node_busy", "_gpus_mv", "_loads_mv",
                     "power_mv"):
            del state[name]  # (views: remade from the pickled arrays; memoryviews do not pickle)
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self._views()  # the views of a pickled ledger must be views of its own arrays (pickle copies each)

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

    def scratch(self) -> tuple[Any, Any]:
        """Memoryviews to write the changed GPUs and their loads into (:data:`NO_JOB`: it holds no
        job), entries ``0 .. k-1``, before :meth:`apply_loads` ``(k)``."""
        return self._gpus_mv, self._loads_mv

    def apply_loads(self, k: int, fill: float | None = None) -> None:
        """New utilisation of the ``k`` GPUs written by :meth:`scratch`, in that order; with ``fill``
        every one of them gets that load (:data:`NO_JOB`: each holds no job), and their loads need
        not be written. Call :meth:`account` first."""
        if not self.compiled:
            g, ld = self._gpus_mv, self._loads_mv
            loads = [ld[j] if fill is None else fill for j in range(k)]
            self.set_loads_plain([(g[j], None if x != x else x) for j, x in enumerate(loads)])
            return
        same = fill is not None
        delta, dbusy = _loads_fn(self._f, self._i, k, self._n, self._nn, self._sleepy, same, fill if same else 0.0)
        self.cluster_power += delta
        self.busy_gpus += dbusy

    def change(self, now: float, k: int, fill: float | None = None) -> None:
        """:meth:`account` to ``now``, :meth:`apply_loads` ``(k, fill)`` and :meth:`mark` ``(now)``, the
        same steps in one call (a change of loads at ``now`` with nothing read between them)."""
        self.account(now)
        self.apply_loads(k, fill)
        if self.timeline is not None:
            self.mark(now)

    def set_loads(self, loads: list[tuple[int, float | None]]) -> None:
        """New utilisation of each listed GPU (None: it holds no job). Call :meth:`account` first."""
        g, ld = self._gpus_mv, self._loads_mv
        for j, (gpu, load) in enumerate(loads):
            g[j] = gpu
            ld[j] = NO_JOB if load is None else load
        self.apply_loads(len(loads))

    def set_loads_plain(self, loads: list[tuple[int, float | None]]) -> None:
        """:meth:`set_loads` in Python, one GPU at a time (the definition the compiled call transcribes)."""
        n, nn, f, i = self._n, self._nn, self._f, self._i
        sleepy = self.cfg.low_power_idle
        delta = 0.0
        for g, load in loads:
            is_busy = load is not None
            idle = float(f[2 * n + g])
            if load is None:
                u, p = 0.0, idle
            else:
                u, p = load, idle + (float(f[3 * n + g]) - idle) * min(1.0, max(0.0, load))
            delta += p - float(f[g])
            f[g], f[n + g] = p, u
            if bool(i[g]) != is_busy:
                node = int(i[n + g])
                nb = int(i[3 * n + node])
                step = 1 if is_busy else -1
                if sleepy:
                    delta += float(f[5 * n + nn * (nb + step == 0) + node]) - float(f[5 * n + nn * (nb == 0) + node])
                i[3 * n + node] = nb + step
                i[g] = 1 if is_busy else 0
                self.busy_gpus += step
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
