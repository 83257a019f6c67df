"""KernelDevice: the cluster seam from the kernel model."""

from __future__ import annotations

import pytest

from gpusched_env.device.kernel_device import KernelDevice
from gpusched_env.device.seam import Tenant
from gpusched_env.types import Sharing


def test_alone_is_no_slowdown_and_identical_tenants_share_evenly() -> None:
    kd = KernelDevice()
    assert kd.share("H100", [Tenant("resnet50", 0.96, Sharing())]).tenants[0].slowdown == 1.0
    out = kd.share("H100", [Tenant("resnet50", 0.96, Sharing()), Tenant("resnet50", 0.96, Sharing())])
    a, b = (t.slowdown for t in out.tenants)
    assert a == pytest.approx(b, rel=0.02) and 1.9 < a < 2.2  # time slicing: about half each, plus switches
    assert kd.share("H100", [Tenant("resnet50", 0.96, Sharing())] * 2) is kd.share("H100", [Tenant("resnet50", 0.96, Sharing())] * 2)


def test_mps_three_jobs_and_priority() -> None:
    kd = KernelDevice()
    three = kd.share("H100", [Tenant(m, 0.9, Sharing.mps(100.0, oversubscribe=True)) for m in ("resnet50", "bert", "gpt2")])
    assert [round(t.slowdown, 2) for t in three.tenants] == pytest.approx([3.13, 2.94, 2.46], abs=0.05)
    hi, lo = kd.share("H100", [Tenant("bert", 0.99, Sharing("mps_priority", 100.0, 1)),
                               Tenant("bert", 0.99, Sharing("mps_priority", 100.0, 0))]).tenants
    assert hi.slowdown < lo.slowdown
