"""A set-network checkpoint (agent=maskable_ppo_set, on Cluster-v0 or the preemptive Cluster-v1) drives the
service on a cluster of another shape than it was trained on (local engine): every job finishes, each exactly once."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import pytest

import gpusched_env  # noqa: F401
from gpusched.agents.adapter import write_meta
from gpusched.agents.pretrained import manifest
from gpusched.real.service.queue import JobQueue
from tests.real.service.helpers import done_lines, service, submit, ticks_spec

OPTIONS = ["pal", "pm_first", "packed", "spread", "least_interference"]
SIZES = [1, 2, 1, 3, 1, 2, 1, 1, 2, 1]  # 10 jobs; on 3 nodes x 2 devices the 3-device job spans two nodes
SHAPES = [(3, 2), (1, 4)]  # (nodes, devices per node): more and fewer nodes than the models' training shapes


@pytest.fixture(scope="module")
def tiny_set_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A set model for synthetic_small (2 nodes x 4 GPUs), as initialised (its play is what is tested, not its skill)."""
    import torch
    from sb3_contrib import MaskablePPO

    from gpusched.agents.set_extractor import SetPolicy

    torch.set_num_threads(1)
    env = gym.make("gpusched/Cluster-v0", scenario="synthetic_small", tokens=True, max_nodes=8, max_queue=16)
    model = MaskablePPO(SetPolicy, env, n_steps=64, batch_size=32, n_epochs=1, seed=0, device="cpu",
                        policy_kwargs={"hidden": 16})
    path = tmp_path_factory.mktemp("set") / "model.zip"
    model.save(str(path))
    write_meta(path, {"algo": "maskable_ppo", "env_id": "gpusched/Cluster-v0", "scenario": "synthetic_small", "env": {
        "queue_slots": 16, "fifo_slots": 8, "options": OPTIONS, "max_actions_per_decision": 64,
        "tokens": True, "max_nodes": 8, "max_queue": 16}})
    return path


@pytest.fixture(scope="module")
def tiny_v1_set_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A preemptive set model (gpusched/Cluster-v1 tokens) for synthetic_small, as initialised."""
    import torch
    from sb3_contrib import MaskablePPO

    from gpusched.agents.set_extractor import SetPolicy

    torch.set_num_threads(1)
    pad = {"max_nodes": 8, "max_queue": 16, "max_running": 8}
    env = gym.make("gpusched/Cluster-v1", scenario="synthetic_small", tokens=True, **pad)
    model = MaskablePPO(SetPolicy, env, n_steps=64, batch_size=32, n_epochs=1, seed=0, device="cpu",
                        policy_kwargs={"hidden": 16})
    path = tmp_path_factory.mktemp("set_v1") / "model.zip"
    model.save(str(path))
    write_meta(path, {"algo": "maskable_ppo", "env_id": "gpusched/Cluster-v1", "scenario": "synthetic_small",
                      "env": {"tokens": True, **pad}})
    return path


SHIPPED = sorted(n for n, e in manifest().items() if e["agent"] == "maskable_ppo_set")


@pytest.mark.slow  # ~1 min on a loaded 2-core machine (torch and the model's env built once)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("which", ["tiny", "tiny_v1", *(f"pretrained:{n}" for n in SHIPPED)])
def test_a_set_checkpoint_drives_the_service_on_another_shape(tmp_path: Path, tiny_set_model: Path,
                                                              tiny_v1_set_model: Path, which: str,
                                                              shape: tuple[int, int]) -> None:
    done = tmp_path / "done.txt"
    ids = submit(tmp_path, [ticks_spec(done, 1 + i % 3, g) for i, g in enumerate(SIZES)])
    tiny = {"tiny": tiny_set_model, "tiny_v1": tiny_v1_set_model}
    agent_path = str(tiny[which]) if which in tiny else which
    scenario = "synthetic_small" if which in tiny else manifest()[which.split(":", 1)[1]]["scenario"]
    svc = service(tmp_path, policy="agent", agent_path=agent_path, scenario=scenario, nodes=shape[0], devices_per_node=shape[1])
    svc.run()
    rows = JobQueue(tmp_path).jobs()
    assert [r.state for r in rows] == ["finished"] * len(SIZES)
    finished = [int(x[0]) for x in done_lines(done) if x[3] in ("-", "0")]  # single-node jobs and rank 0
    assert sorted(finished) == ids
    log = (tmp_path / "service.log").read_text()
    assert "FIFO decides" not in log  # the agent decided every round (no fallback to FIFO)
