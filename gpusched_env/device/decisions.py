"""Decision drivers for the device-level env (``gpusched/GPUShare-v0``): the engine stops at every
decision point and an outside agent picks what launches next.

- :class:`PairDriver` (pair scenarios: tally_pairs, h100_pairs): the kernel engine under a base
  mechanism (default ``mps_priority``) whose grants are gated: a queued kernel group that has not
  started holds SMs only once the agent launched it. Actions: ``i`` launch client i's queued group
  (0 HP, 1 BE), ``2`` hold the queued BE group back until the next event (valid only while no HP group
  waits). Launching every queued group at once gives exactly the base mechanism's run.
- :class:`DarisDriver` (tasksets: daris_rt): the DARIS stage model; a decision is which of the 8
  queues of a context with a free stream serves next (``0..7``, non-empty only), or ``8`` hold (leave
  the context's streams idle until the next event; valid only when only LP stages wait there).
  Always serving the first non-empty queue is DARIS.
Reward terms: ``violations`` (HP requests over their SLO, counted when they end / jobs past their
deadline, counted when the deadline passes unfinished or when they end late) and ``be_progress`` (BE work done ÷ its standalone iterations in the
run, the running iteration counted by the share of its standalone kernel time completed, so the
signal follows each kernel group rather than whole iterations; or LP jobs done ÷ LP jobs released).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from gpusched_env.device.daris.scenario import DarisScenario, make_sim, stage_metrics
from gpusched_env.device.daris.scheduler import QUEUE_ORDER, Daris
from gpusched_env.device.engine import DeviceSim
from gpusched_env.device.gpus import DeviceGpu, device_gpu
from gpusched_env.device.mechanism import READY, RUN, ClientSpec, ClientView, Grant, Mechanism
from gpusched_env.device.mechanisms import make_mechanism
from gpusched_env.device.pairs import PairSetup, clients, pair_metrics, standalone

MAX_CTX = 8  # DEVICE.md: DARIS runs 1-8 contexts
PAIR_OBS = 17
DARIS_OBS = MAX_CTX * 18 + 1


class Gated:
    """A mechanism whose grants hold back any unstarted queued kernel the agent has not launched."""

    def __init__(self, base: Mechanism) -> None:
        self.base, self.name = base, base.name
        self.allowed: set[tuple[int, float, int]] = set()

    def reset(self, clients: Sequence[ClientSpec], gpu: DeviceGpu) -> None:
        self.base.reset(clients, gpu)

    def plan(self, t: float, clients: Sequence[ClientView]) -> tuple[list[Grant], float]:
        grants, wake = self.base.plan(t, clients)
        out = [g if (c.phase != READY or c.started or (i, c.seq_start, c.idx) in self.allowed)
               else Grant(False, g.cap, g.level, g.slow) for i, (g, c) in enumerate(zip(grants, clients, strict=True))]
        return out, wake

    def launch_delay(self, t: float, i: int, displaced: Sequence[int], clients: Sequence[ClientView]) -> float:
        return self.base.launch_delay(t, i, displaced, clients)

    def on_launch(self, t: float, i: int, clients: Sequence[ClientView]) -> None:
        self.base.on_launch(t, i, clients)


class PairDriver:
    """HP service + BE job on the kernel engine, decided kernel group by kernel group."""

    n_actions, obs_size = 3, PAIR_OBS

    def __init__(self, setup: PairSetup, mechanism: str = "mps_priority", params: dict | None = None,
                 slo_factor: float = 2.0) -> None:
        self.report_slo = setup.hp_slo_factor is not None  # the scenario's SLO metrics, as the bench reports them
        self.setup = setup if setup.hp_slo_factor is not None else replace(setup, hp_slo_factor=slo_factor)
        self.mech_name, self.params = mechanism, params
        self._result: tuple[dict[str, float], dict[str, list[float]]] | None = None

    def reset(self, seed: int) -> None:
        self.seed = seed
        hp, be = clients(self.setup, seed)
        assert self.setup.hp_slo_factor is not None  # set in __init__
        slo = self.setup.hp_slo_factor * hp.seq.standalone_s()
        self.gate = Gated(make_mechanism(self.mech_name, self.params))
        self.sim = DeviceSim(device_gpu(self.setup.gpu_type), [replace(hp, slo_s=slo), be], self.gate)
        self.solo_be = max(1, standalone(self.setup, seed)[1].client("be").iterations)
        self.be_cum = np.concatenate([[0.0], np.cumsum(be.seq.dur_s)]) / max(float(np.sum(be.seq.dur_s)), 1e-12)
        self.held, self.ended, self.counted = False, False, (0, 0.0)
        self._result = None

    def pending(self) -> list[int]:
        return [i for i, c in enumerate(self.sim.clients) if c.phase == READY and not c.started
                and (i, c.seq_start, c.idx) not in self.gate.allowed and not (self.held and i == 1)]

    def mask(self) -> np.ndarray:
        p = self.pending()
        return np.array([0 in p, 1 in p, 1 in p and 0 not in p], dtype=bool)

    def apply(self, a: int) -> None:
        if a == 2:
            self.held = True
        else:
            c = self.sim.clients[a]
            self.gate.allowed.add((a, c.seq_start, c.idx))

    def advance(self) -> bool:
        """Run to the next decision point; False once the run ends."""
        while not self.pending():
            self.sim.replan()
            self.held = False
            self.gate.allowed = {k for k in self.gate.allowed if self._current(k)}
            if not self.sim.step(self.setup.duration_s, replan=False):
                self.ended = True
                return False
        return True

    def _current(self, k: tuple[int, float, int]) -> bool:
        c = self.sim.clients[k[0]]
        return (c.seq_start, c.idx) == k[1:] and c.phase in (READY, RUN)

    def terms(self) -> tuple[float, float]:
        """(new violations, new BE progress) since the last call."""
        hp, be = self.sim.clients[0].stats, self.sim.clients[1]
        miss = len(hp.latencies_s) - hp.slo_met
        done = be.stats.iterations + float(self.be_cum[be.idx])
        d = (miss - self.counted[0], (done - self.counted[1]) / self.solo_be)
        self.counted = (miss, done)
        return float(d[0]), float(d[1])

    def obs(self) -> np.ndarray:
        out = np.zeros(PAIR_OBS, dtype=np.float32)
        pend = self.pending()
        for i, c in enumerate(self.sim.clients):
            o = 8 * i
            out[o + c.phase] = 1.0
            out[o + 4] = float(i in pend)
            out[o + 5] = c.alloc
            out[o + 6] = c.idx / max(1, c.n)
            arr = c.spec.arrivals
            out[o + 7] = 0.0 if arr is None else min(10.0, (int(np.searchsorted(arr, self.sim.t, "right")) - c.req) / 10)
        out[16] = self.sim.t / self.setup.duration_s
        return out

    def metrics(self) -> dict[str, float]:
        """The run's metrics, with the keys ``gpusched-bench`` reports for the scenario."""
        if self._result is None:
            hp_solo, be_solo = standalone(self.setup, self.seed)
            gpu = device_gpu(self.setup.gpu_type)
            self._result = pair_metrics([self.sim.finish()], hp_solo, be_solo, gpu, False, self.report_slo)
        return self._result[0]

    def series(self) -> dict[str, list[float]]:
        """The run's plot series (HP latencies), as ``gpusched-bench`` keeps them."""
        self.metrics()
        assert self._result is not None
        return self._result[1]


class DarisDriver:
    """A DARIS taskset on the stage model, decided stage by stage."""

    n_actions, obs_size = len(QUEUE_ORDER) + 1, DARIS_OBS

    def __init__(self, scn: DarisScenario, workload: int) -> None:
        if scn.daris.contexts > MAX_CTX:
            raise ValueError(f"daris contexts must be in [1, {MAX_CTX}], got {scn.daris.contexts}")
        self.scn, self.workload = scn, workload

    def reset(self, seed: int) -> None:
        self.sched = Daris(self.scn.daris)
        self.sim = make_sim(self.scn, "daris", seed, self.workload, self.sched)
        self.held: set[int] = set()
        self.lp_total = max(1, sum(1 for _, i in self.sim.rel if not self.sim.tasks[i].high))
        self.counted, self.ended = (0, 0), False

    def ctx(self) -> int:
        for c in range(self.scn.daris.contexts):
            if c not in self.held and self.sim.free(c) > 0 and any(self.sched.queues[c]):
                return c
        return -1

    def mask(self) -> np.ndarray:
        m = np.zeros(self.n_actions, dtype=bool)
        c = self.ctx()
        if c >= 0:
            ch = self.sched.choices(c)
            m[ch] = True
            m[-1] = min(ch) >= 4
        return m

    def apply(self, a: int) -> None:
        c = self.ctx()
        if a == len(QUEUE_ORDER):
            self.held.add(c)
        else:
            self.sched.serve(c, a)

    def advance(self) -> bool:
        while self.ctx() < 0:
            self.held.clear()
            if not self.sim.advance():
                self.ended = True
                return False
        return True

    def terms(self) -> tuple[float, float]:
        """(new violations, new LP progress) since the last call; a job counts as a violation as soon
        as its deadline passes unfinished (not only when it ends late), so starving it is felt at once."""
        st = self.sim.stats
        late, lp_done = st[True].late + st[False].late + self.sim.overdue(), st[False].completed
        d = (late - self.counted[0], (lp_done - self.counted[1]) / self.lp_total)
        self.counted = (late, lp_done)
        return float(d[0]), float(d[1])

    def obs(self) -> np.ndarray:
        out = np.zeros(DARIS_OBS, dtype=np.float32)
        t, c0 = self.sim.t, self.ctx()
        for c in range(self.scn.daris.contexts):
            o = 18 * c
            out[o] = self.sim.free(c) / self.sim.parts[c].slots
            out[o + 1] = float(c == c0)
            for q, qu in enumerate(self.sched.queues[c]):
                out[o + 2 + q] = min(10.0, len(qu) / 10)
                out[o + 10 + q] = float(np.clip((qu[0][0] - t) / 0.05, -10, 10)) if qu else 0.0
        out[-1] = t / self.sim.horizon
        return out

    def metrics(self) -> dict[str, float]:
        return stage_metrics(self.sim)

    def series(self) -> dict[str, list[float]]:
        """No plot series (the taskset plots use metrics only)."""
        return {}


def first_choice(mask: np.ndarray) -> int:
    """The device-level heuristic through the env: launch whatever waits, in order (HP first; DARIS's
    queue order); never hold."""
    return int(np.flatnonzero(mask[:-1])[0])
