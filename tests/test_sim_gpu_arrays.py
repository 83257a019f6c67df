"""The per-GPU state as arrays updated by compiled calls (docs/PERFORMANCE.md, "per-GPU state as
arrays, the seventh env pass") against the plain Python steps: the power ledger's loads
(:func:`gpusched_env.cluster.energy.set_loads_k`), the state's placements
(:func:`gpusched_env.allocation.place_k`, also ``tests/test_allocation.py``) and the re-timing after a
plain batch of starts (:meth:`Simulator._refresh_fresh`)."""

from __future__ import annotations

import dataclasses

import numpy as np

from gpusched.baselines import get_policy
from gpusched_env.cluster.energy import NO_JOB, PowerLedger
from gpusched_env.cluster.model import FailureConfig, SimModel, StragglerConfig
from gpusched_env.cluster.simulator import Simulator
from gpusched_env.policy import run_policy
from gpusched_env.power import PowerConfig
from gpusched_env.topology import NodeGroup, Topology
from gpusched_env.types import Job

MODELS = ["resnet50", "vgg19", "bert", "dcgan", "alexnet", "resnet18"]


def _topo() -> Topology:
    return Topology.build([NodeGroup(3, 4, "V100", 16.0), NodeGroup(1, 4, "P100", 16.0)])


def _ledger_state(p: PowerLedger) -> tuple[object, ...]:
    return (p.gpu_power.tolist(), p.gpu_util.tolist(), p.busy_mask.tolist(), p.node_busy.tolist(),
            p.cluster_power, p.busy_gpus)


def test_compiled_loads_give_the_plain_floats():
    """Random loads (none, negative, above 1, fractions) on random GPU sets of a cluster with two
    GPU types, with and without sleeping idle nodes: the compiled call and the plain steps leave
    the same arrays, cluster power and busy count after every call (also with one load given for
    all the GPUs of a call); the busy flags, counts per node and busy count agree with each other,
    and a GPU's power is its idle or clipped busy power."""
    topo = _topo()
    for sleepy in (False, True):
        cfg = PowerConfig(low_power_idle=sleepy)
        fast, plain = PowerLedger(topo, cfg, timeline=False), PowerLedger(topo, cfg, timeline=False)
        plain.compiled = False
        rng = np.random.default_rng(3)
        for step in range(300):
            gpus = rng.choice(topo.n_gpus, int(rng.integers(1, 9)), replace=False).tolist()
            choices = [None, None, 0.0, -0.5, 1.0, 1.7, float(rng.random())]
            loads = [(g, choices[int(rng.integers(0, len(choices)))]) for g in gpus]
            if step % 7 in (0, 3):  # one load for every GPU (a completion's: no job), loads not written
                fill = choices[int(rng.integers(0, len(choices)))] if step % 7 else None
                gpu_of, load_of = fast.scratch()
                for k, g in enumerate(gpus):
                    gpu_of[k], load_of[k] = g, 0.25  # (not read)
                fast.apply_loads(len(gpus), NO_JOB if fill is None else fill)
                loads = [(g, fill) for g in gpus]
                plain.set_loads(loads)
            else:
                fast.set_loads(loads)
                plain.set_loads(loads)
            assert _ledger_state(fast) == _ledger_state(plain)
            for g, load in loads:
                idle, busy = float(fast.idle_w[g]), float(fast.busy_w[g])
                c = 0.0 if load is None else min(1.0, max(0.0, load))
                assert fast.gpu_power[g] == idle + (busy - idle) * c if load is not None else fast.gpu_power[g] == idle
                assert fast.busy_mask[g] == (load is not None)
            assert fast.busy_gpus == int(fast.busy_mask.sum())
            assert fast.node_busy.tolist() == np.bincount(topo.gpu_node, weights=fast.busy_mask, minlength=4).tolist()
        assert fast.busy_gpus > 0 and np.isnan(NO_JOB)


def _jobs(n: int, seed: int) -> list[Job]:
    rng = np.random.default_rng(seed)
    return [
        Job(i, float(rng.uniform(0, 20000)), int(rng.choice([1, 1, 2, 4, 8])), float(rng.integers(200, 20000)),
            MODELS[int(rng.integers(0, len(MODELS)))], perf_class="ABCD"[int(rng.integers(0, 4))],
            mem_gb=float(rng.choice([0.0, 4.0, 6.5])), deadline_s=None)
        for i in range(n)
    ]


def _run(policy: str, model: SimModel, arrays: bool) -> Simulator:
    sim = Simulator(_topo(), _jobs(60, 8), model, seed=5)
    if not arrays:
        sim.state.compiled = sim.power.compiled = sim.fresh_batches = False
    run_policy(sim, get_policy(policy))
    return sim


def test_simulator_with_gpu_arrays_gives_the_plain_floats():
    """fifo, pal (completions at round boundaries), las (preemptions) and gandiva (shared GPUs)
    with node failures, stragglers and sleeping idle nodes: every job's record, the energy, the busy
    GPU-seconds, the timeline and the final arrays float for float as with the plain steps."""
    base = SimModel(restart_cost_s=5.0, failures=FailureConfig(mtbf_h=30.0, repair_s=600.0),
                    power=PowerConfig(low_power_idle=True), stragglers=StragglerConfig(enabled=True))
    for policy, model in [("fifo", base), ("pal", dataclasses.replace(base, completion_at_round=True)),
                          ("las", base), ("gandiva", base)]:
        fast, plain = _run(policy, model, True), _run(policy, model, False)
        finished = [r for r in plain.records.values() if r.finish_s is not None]
        assert len(finished) > 40, policy
        assert fast.records == plain.records, policy
        assert fast.result().energy_j == plain.result().energy_j
        assert fast.power.busy_gpu_s == plain.power.busy_gpu_s > 0
        assert fast.power.timeline == plain.power.timeline and fast.power.timeline is not None
        assert _ledger_state(fast.power) == _ledger_state(plain.power)
        for name in ("n_resident", "free_mask", "mem_used", "share_used"):
            assert getattr(fast.state, name).tolist() == getattr(plain.state, name).tolist()
        assert fast.env.now == plain.env.now


def test_locality_from_a_set_s_ends_is_topology_locality():
    """On a cluster numbered node by node and rack by rack (two nodes a rack), the placement cost's
    level from a GPU set's lowest and highest GPU is :meth:`Topology.locality` for random sets
    (within a node, a rack, across racks); on a topology whose node ids do not rise with the GPU id
    it is not used (``_ends`` None) and the levels are still ``Topology.locality``'s."""
    rng = np.random.default_rng(11)
    topo = Topology.build([NodeGroup(3, 4, "V100", 16.0), NodeGroup(3, 2, "P100", 16.0)], nodes_per_rack=2)
    shuffled = dataclasses.replace(topo, gpu_node=topo.gpu_node[::-1].copy(), gpu_rack=topo.gpu_rack[::-1].copy())
    seen = set()
    for t in (topo, shuffled):
        speed = Simulator(t, _jobs(2, 1), SimModel(), seed=0).speed
        assert (speed._ends is None) == (t is shuffled)
        for _ in range(200):
            gpus = tuple(sorted(rng.choice(t.n_gpus, int(rng.integers(2, 6)), replace=False).tolist()))
            speed.placement_cost(_jobs(1, 1)[0], gpus)
            assert speed._levels[gpus] == t.locality(gpus)
            seen.add(t.locality(gpus))
    assert seen == {"node", "rack", "cross_rack"}


def test_change_is_account_loads_and_mark():
    """``PowerLedger.change`` against ``account``, ``apply_loads`` and ``mark`` called one by one, with
    the compiled call and the plain steps, random loads and one load for all, at times that repeat
    (the timeline's last point rewritten) and move on: the same arrays, energy, busy GPU-seconds and
    timeline; by hand, the first change's energy is 0 and the second's the first's power x 10 s."""
    topo = _topo()
    for compiled in (True, False):
        one, three = (PowerLedger(topo, PowerConfig(low_power_idle=True), timeline=True) for _ in range(2))
        one.compiled = three.compiled = compiled
        rng = np.random.default_rng(4)
        now, powers = 0.0, []
        for step in range(60):
            gpus = rng.choice(topo.n_gpus, int(rng.integers(1, 7)), replace=False).tolist()
            loads = [float(rng.random()) if rng.random() < 0.7 else NO_JOB for _ in gpus]
            fill = None if step % 3 else (NO_JOB if step % 2 else 0.5)
            for p in (one, three):
                gpu_of, load_of = p.scratch()
                for k, (g, x) in enumerate(zip(gpus, loads, strict=True)):
                    gpu_of[k], load_of[k] = g, x
            one.change(now, len(gpus), fill)
            three.account(now)
            three.apply_loads(len(gpus), fill)
            three.mark(now)
            assert _ledger_state(one) == _ledger_state(three)
            assert (one.energy_j, one.busy_gpu_s) == (three.energy_j, three.busy_gpu_s)
            assert (one.timeline.t, one.timeline.power_w, one.timeline.busy_gpus) == (
                three.timeline.t, three.timeline.power_w, three.timeline.busy_gpus)
            powers.append(one.cluster_power)
            if step == 1:
                assert one.energy_j == powers[0] * 10.0
            now += 10.0 if step % 4 != 3 else 0.0
        assert one.energy_j > 0 and len(one.timeline.t) < 60
