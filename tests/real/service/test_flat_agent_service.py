"""A shipped flat checkpoint (``agent=maskable_ppo``: pal_philly on Cluster-v1, 16 nodes; eaco_cluster on
Cluster-v0, 28 nodes) drives the service on a lab cluster of another node count (local engine, stand-in
devices), seen through the node fold (gpusched/agents/fold.py): every job finishes, each exactly once, and
no round falls back to FIFO."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from gpusched.agents.pretrained import manifest
from gpusched.real.service.queue import JobQueue
from tests.real.service.helpers import done_lines, service, submit, ticks_spec

SIZES = [1, 2, 1, 3, 1, 2, 1, 1]  # 8 jobs; the 3-device job spans nodes on both shapes
FLAT = sorted(n for n, e in manifest().items() if e["agent"] == "maskable_ppo" and e["env_id"].startswith(
    "gpusched/Cluster-"))
CASES = [(n, (3, 2)) for n in FLAT] + [("pal_philly", (20, 1))]  # fewer nodes than trained on, then more


@pytest.mark.parametrize(("name", "shape"), CASES, ids=[f"{n}-{a}x{b}" for n, (a, b) in CASES])
def test_a_flat_checkpoint_drives_the_service_on_another_node_count(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                                    name: str, shape: tuple[int, int]) -> None:
    assert FLAT == ["eaco_cluster", "pal_philly"]
    done = tmp_path / "done.txt"
    ids = submit(tmp_path, [ticks_spec(done, 1 + i % 3, g) for i, g in enumerate(SIZES)])
    with caplog.at_level(logging.INFO, logger="gpusched.agents"):
        svc = service(tmp_path, policy="agent", agent_path=f"pretrained:{name}", scenario=manifest()[name]["scenario"],
                      nodes=shape[0], devices_per_node=shape[1])
        svc.run()
    assert [r.state for r in JobQueue(tmp_path).jobs()] == ["finished"] * len(SIZES)
    assert sorted(int(x[0]) for x in done_lines(done) if x[3] in ("-", "0")) == ids  # single-node jobs and rank 0
    assert "FIFO decides" not in (tmp_path / "service.log").read_text()  # the agent decided every round
    trained = {"pal_philly": 16, "eaco_cluster": 28}[name]
    how = "grouped into" if shape[0] > trained else "shown in"
    assert f"model trained on {trained} nodes; this cluster's {shape[0]} nodes are {how} {trained} node slots" \
        in caplog.text
