"""RayEngine.close: an embedded cluster stops its agents before it ends (their MPS daemons run apart from
them and would outlive them: seen on an H200); a joined cluster keeps them for the next service."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("ray")

from gpusched.real.service import ray_engine  # noqa: E402


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[object, ...]]:
    seen: list[tuple[object, ...]] = []
    monkeypatch.setattr(ray_engine.ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray_engine.ray, "init", lambda **kw: seen.append(("init", kw["address"])))
    monkeypatch.setattr(ray_engine.ray, "shutdown", lambda: seen.append(("shutdown",)))
    monkeypatch.setattr(ray_engine.RayEngine, "stop_agents", lambda self: seen.append(("stop_agents",)))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    return seen


def test_an_embedded_cluster_stops_its_agents_before_it_shuts_down(tmp_path: Path, calls: list) -> None:
    ray_engine.RayEngine(tmp_path).close()
    assert calls == [("init", None), ("stop_agents",), ("shutdown",)]


def test_a_joined_cluster_keeps_its_agents(tmp_path: Path, calls: list,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    ray_engine.RayEngine(tmp_path, "10.0.0.1:6379").close()
    assert calls == [("init", "10.0.0.1:6379"), ("shutdown",)]
    calls.clear()
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")  # ray.init() with no address joins this one
    ray_engine.RayEngine(tmp_path).close()
    assert calls == [("init", None), ("shutdown",)]
