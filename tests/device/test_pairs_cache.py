"""The caches of the pair runs (standalone runs, grouped sequences) and the engine's unrolled water fill:
each gives exactly what a fresh computation or the plain formula gives."""

from __future__ import annotations

from dataclasses import asdict, replace

import numpy as np
import pytest

from gpusched_env.device import pairs
from gpusched_env.device.engine import DeviceSim, simulate
from gpusched_env.device.gpus import device_gpu
from gpusched_env.device.kernels import KernelSeq
from gpusched_env.device.mechanism import READY, ClientSpec, Grant
from gpusched_env.device.mechanisms import make_mechanism
from gpusched_env.device.pairs import Grouping, PairSetup
from gpusched_env.device.service import ServiceSpec

SETUP = PairSetup("A100", "bert_inf", "resnet50_train", ServiceSpec(load=0.5), 0.3)


def fresh(setup: PairSetup, seed: int) -> tuple[dict, dict]:
    """HP alone and BE alone, simulated now (no cache)."""
    hp, be = pairs.clients(setup, seed)
    gpu = device_gpu(setup.gpu_type)
    return (asdict(simulate(gpu, [hp], make_mechanism("exclusive"), setup.duration_s)),
            asdict(simulate(gpu, [be], make_mechanism("exclusive"), setup.duration_s)))


def cached(setup: PairSetup, seed: int) -> tuple[dict, dict]:
    hp, be = pairs.standalone(setup, seed)
    return asdict(hp), asdict(be)


def test_cached_standalone_runs_equal_fresh_ones() -> None:
    pairs.hp_alone.cache_clear()
    pairs.be_alone.cache_clear()
    for seed in (0, 1):
        first = cached(SETUP, seed)  # computed
        assert first == fresh(SETUP, seed)
        assert cached(SETUP, seed) == first  # from the cache
    hp, be = pairs.standalone(SETUP, 0)
    assert len(hp.client("hp").latencies_s) > 10 and be.client("be").iterations > 0  # not an empty run
    assert pairs.hp_alone.cache_info().hits == 3 and pairs.be_alone.cache_info().hits == 3  # 2 above, 1 here


@pytest.mark.parametrize(("change", "hp_shared", "be_shared"), [
    ({"be_model": "bert_train"}, True, False),
    ({"hp_model": "resnet50_inf"}, False, True),
    ({"hp_slo_factor": 1.5}, False, True),
    ({"service": ServiceSpec(load=0.3)}, False, True),
    ({"grouping": Grouping(hp_groups=4.0)}, False, True),
    ({"grouping": Grouping(be_groups=5.0)}, True, False),
    ({"grouping": Grouping(bound_ms=0.5)}, False, False),
    ({"duration_s": 0.25}, False, False),
    ({"gpu_type": "H100"}, False, False),
])
def test_standalone_cache_key_shares_only_what_a_client_does_not_depend_on(change: dict, hp_shared: bool,
                                                                          be_shared: bool) -> None:
    hp, be = pairs.standalone(SETUP, 0)
    other = replace(SETUP, **change)
    hp2, be2 = pairs.standalone(other, 0)
    assert (hp2 is hp) == hp_shared and (be2 is be) == be_shared
    assert cached(other, 0) == fresh(other, 0)


def test_standalone_runs_differ_by_seed() -> None:
    (hp0, be0), (hp1, be1) = pairs.standalone(SETUP, 0), pairs.standalone(SETUP, 1)
    assert hp0.client("hp").latencies_s != hp1.client("hp").latencies_s
    assert be0.sm_s != be1.sm_s  # other kernel shapes (busy all along in both)


def test_cached_sequences_are_read_only() -> None:
    seq = pairs.sequence("bert_train", "A100", 0, 10.0, 1.0)
    assert seq is pairs.sequence("bert_train", "A100", 0, 10.0, 1.0)
    with pytest.raises(ValueError, match="read-only"):
        seq.dur_s[0] = 1.0


def plain_water_fill(sm: list[float], grants: list[Grant]) -> list[float]:
    """The water fill as docs/DEVICE_MODEL.md states it: level by level, max-min fair within a level."""
    want = [i for i in range(len(sm)) if grants[i].run]
    new, cap = [0.0] * len(sm), 1.0
    for level in sorted({grants[i].level for i in want}):
        group = sorted((i for i in want if grants[i].level == level), key=lambda i: min(sm[i], grants[i].cap))
        for k, i in enumerate(group):
            a = min(min(sm[i], grants[i].cap), cap / (len(group) - k))
            new[i], cap = a, cap - a
    return new


@pytest.mark.parametrize("n", [1, 2, 3])
def test_unrolled_water_fill_equals_the_plain_formula(n: int) -> None:
    rng = np.random.default_rng(7)
    one = KernelSeq(np.ones(1), np.ones(1), np.zeros(1), np.ones(1), np.zeros(1))
    sim = DeviceSim(device_gpu("A100"), [ClientSpec(f"c{i}", "be", one) for i in range(n)], make_mechanism("mps"))
    for _ in range(500):
        sm = [float(x) for x in rng.choice([0.2, 0.5, 0.7, 1.0], n)]  # ties and non-ties
        grants = [Grant(bool(rng.random() < 0.75), float(rng.choice([0.3, 0.5, 1.0])), int(rng.integers(2)))
                  for _ in range(n)]  # some held: one client alone, or none
        for c, s in zip(sim.clients, sm, strict=True):
            c.phase, c.sm = READY, [s]
        assert sim._water_fill(grants) == plain_water_fill(sm, grants)
