"""RayEngine's calls into Ray, with Ray's functions replaced (no cluster): ``close`` on an embedded cluster
stops its agents before it ends (their MPS daemons run apart from them and would outlive them: seen on an
H200), a joined cluster keeps them for the next service; ``nodes`` offers a node once its agent answers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

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


class _Agent:
    """A node agent whose ``info`` call answers, or times out (``up=False``)."""

    def __init__(self, up: bool) -> None:
        self.up, self.asked = up, 0

    @property
    def info(self) -> Any:
        agent = self

        class _Method:
            @staticmethod
            def remote() -> _Agent:
                agent.asked += 1
                return agent

        return _Method


def test_a_node_is_offered_once_its_agent_answers(tmp_path: Path, calls: list,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The agent starts at discovery, not at the node's first launch (whose recorded start would come
    before its process by the agent's start-up); one that does not answer leaves the node out."""
    ups = [False, True]
    made: list[_Agent] = []

    class _Actor:
        @staticmethod
        def options(**kw: Any) -> Any:
            class _Remote:
                @staticmethod
                def remote(*args: Any) -> _Agent:
                    made.append(_Agent(ups.pop(0)))
                    return made[-1]
            return _Remote

    def get(agent: _Agent, timeout: float) -> dict[str, object]:
        if not agent.up:
            raise ray_engine.GetTimeoutError()
        return {}

    node = {"NodeID": "ab" * 28, "Alive": True, "Resources": {"gpusched_devices": 2.0}, "NodeManagerAddress": "10.0.0.2"}
    monkeypatch.setattr(ray_engine, "RayNodeAgent", _Actor)
    monkeypatch.setattr(ray_engine.ray, "nodes", lambda: [node])
    monkeypatch.setattr(ray_engine.ray, "get", get)
    engine = ray_engine.RayEngine(tmp_path, "10.0.0.1:6379")
    assert engine.nodes() == [] and engine.agents == {}  # the first agent never answered
    engine._nodes_t = -1.0
    (info,) = engine.nodes()
    assert (info.name, info.n_devices, info.kind, info.address) == ("ab" * 6, 2, "cpu", "10.0.0.2")
    engine._nodes_t = -1.0
    assert engine.nodes() == [info]
    assert [a.asked for a in made] == [1, 1]  # asked once, at discovery
