"""Bad input names the field and its allowed range; runs are deterministic per seed."""

from __future__ import annotations

import numpy as np
import pytest

from gpusched_env.config_util import ConfigError
from gpusched_env.device import bench
from gpusched_env.device.kernels import KernelSeq
from gpusched_env.device.mechanisms import make_mechanism
from gpusched_env.device.pairs import PairSetup, run_pair
from gpusched_env.device.profiles import profile
from gpusched_env.device.service import ServiceSpec


def _seq(**kw: np.ndarray) -> KernelSeq:
    base = {k: np.array([1e-3, 2e-3]) for k in ("dur_s", "block_s")}
    base.update(sm=np.array([0.5, 1.0]), mem=np.array([0.1, 0.2]), issue_s=np.array([0.0, 0.0]))
    base.update(kw)
    return KernelSeq(**base)


@pytest.mark.parametrize(("field", "value", "allowed"), [
    ("dur_s", np.array([-1e-3, 2e-3]), r"kernel dur_s must be in \(0, inf\) seconds"),
    ("sm", np.array([0.0, 1.0]), r"kernel sm must be in \(0, 1\]"),
    ("sm", np.array([0.5, 1.5]), r"kernel sm must be in \(0, 1\]"),
    ("mem", np.array([0.5, -0.1]), r"kernel mem must be in \[0, 1\]"),
])
def test_bad_kernel_fields_name_field_and_range(field: str, value: np.ndarray, allowed: str) -> None:
    with pytest.raises(ValueError, match=allowed):
        _seq(**{field: value})


def test_bad_load_unknown_mechanism_and_model() -> None:
    with pytest.raises(ValueError, match=r"service.load must be in \(0, 1\)"):
        ServiceSpec(load=1.0)
    with pytest.raises(ValueError, match=r"mechanism must be one of .*tally.*got 'fifo'"):
        make_mechanism("fifo")
    with pytest.raises(ValueError, match=r"model must be one of .*got 'vgg99'"):
        profile("vgg99")
    with pytest.raises(ValueError, match=r"tally l_max_s must be in \(0, inf\)"):
        make_mechanism("tally", {"l_max_s": 0.0})
    with pytest.raises(ConfigError, match=r"hp_models must be a non-empty list of"):
        bench.load({"level": "device", "hp_models": ["vgg99"]}, "bad")
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['gpus'\]"):
        bench.load({"level": "device", "gpus": 3}, "bad")
    with pytest.raises(ValueError, match=r"gpu_type must be one of"):
        PairSetup("B200", "bert_inf", "bert_train", ServiceSpec(), 1.0)


def test_runs_are_deterministic_per_seed() -> None:
    setup = PairSetup("H100", "bert_inf", "gpt2_train", ServiceSpec(load=0.5), 2.0)
    a, sa = run_pair(setup, "mps_priority", 3)
    b, sb = run_pair(setup, "mps_priority", 3)
    c, _ = run_pair(setup, "mps_priority", 4)
    assert a == b and sa == sb
    assert a["hp_p99_ms"] != c["hp_p99_ms"]
    assert a["be_norm_throughput"] == pytest.approx(0.98, abs=0.05)
