"""The embedded constants equal a fresh fit from the data folder (skipped without the data)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpusched_env import calibrate
from gpusched_env.data import DataMissing


def test_fitted_constants_match_data():
    try:
        text = calibrate.render()
    except DataMissing as e:
        pytest.skip(f"data folder absent: {e}")
    committed = (Path(calibrate.__file__).with_name("fitted.py")).read_text()
    assert committed == text, "gpusched_env/fitted.py is stale: run python -m gpusched_env.calibrate"


def test_v100_fit_values():
    from gpusched_env.fitted import GPU_POWER_W, NODE_BASE_W, VARIABILITY_QUANTILES

    # CALIBRATION.md: ResNet per-run p5 0.95, p50 1.00, p95 1.13; per-GPU medians 0.947-1.123
    a = VARIABILITY_QUANTILES["A"]
    assert a["per_run"][1] == pytest.approx(0.95, abs=0.005)
    assert a["per_gpu"][0] == pytest.approx(0.947, abs=0.001) and a["per_gpu"][-1] == pytest.approx(1.123, abs=0.001)
    assert GPU_POWER_W["V100"][1] <= 300.0  # below the V100 TDP
    assert 300 < NODE_BASE_W < 600


def test_config_reference_is_current():
    from gpusched_env import config_docs

    path = Path(config_docs.__file__).resolve().parent.parent / "docs" / "CONFIG.md"
    assert path.read_text() == config_docs.render(), "docs/CONFIG.md is stale: run python -m gpusched_env.config_docs"
    assert "| `scenario.model.power.sleep_w` |" in path.read_text()
