"""The service on a three-node Ray cluster on this machine (``ray.cluster_utils.Cluster``), each node
with two CPU stand-in devices (the ``gpusched_devices`` resource)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpusched.real.service.queue import JobQueue
from gpusched.real.service.serve import ServeConfig, Service
from gpusched_env.types import Migrate, Preempt
from tests.real.service.helpers import done_lines, hold_at, steps_done, submit, ticks_spec

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.slow  # a Ray cluster takes ~20 s to start here


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "resources": {"gpusched_devices": 2}})
    workers = [c.add_node(num_cpus=1, resources={"gpusched_devices": 2}) for _ in range(2)]
    c.wait_for_nodes()
    c.workers = workers
    from gpusched.real.service.ray_engine import NAMESPACE

    ray.init(address=c.address, namespace=NAMESPACE, log_to_driver=False)
    yield c
    ray.shutdown()
    c.shutdown()


def _service(out: Path, cluster: Any, **kw: Any) -> Service:
    from gpusched.real.service.ray_engine import RayEngine

    cfg = ServeConfig(out_dir=str(out), engine="ray", poll_s=0.1, grace_s=2.0, backoff_s=0.1, exit_when_idle=True,
                      max_wall_s=120.0, **kw)
    return Service(cfg, engine=RayEngine(out, cluster.address))


def _steps_at_least(path: Path, n: int) -> None:
    t = time.monotonic()
    while not (path.exists() and path.read_text().strip() and int(path.read_text()) >= n):
        assert time.monotonic() - t < 120, f"{path} never reached step {n}"
        time.sleep(0.05)


def test_without_a_shared_filesystem_the_checkpoint_moves_through_ray(tmp_path: Path, cluster: Any) -> None:
    """shared_fs=false: each node's checkpoint root is its own (out_dir/nodes/<node>/checkpoints). The
    job starts on node 0, migrates to node 1, is preempted and restarted on node 2; each move carries
    its step counter (packed by the old node's agent, unpacked by the new one's), so no step is done
    twice. Runs first: the next test removes a node."""
    done, hold = tmp_path / "done.txt", tmp_path / "hold"
    hold_at(hold, 3)  # the job waits at step 3, then at 6: it stops exactly there
    (j,) = submit(tmp_path, [ticks_spec(done, 30, 1, hold=hold)])
    svc = _service(tmp_path, cluster, shared_fs=False)
    svc.refresh_nodes()
    names = [n.name for n in svc.nodes]
    assert len(names) == 3 and [n.n_devices for n in svc.nodes] == [2, 2, 2]
    q = JobQueue(tmp_path)

    def ckpt(k: int) -> Path:
        return tmp_path / "nodes" / names[k] / "checkpoints" / str(j) / "n"

    try:
        assert svc.launch(q.get(j), (0,))  # type: ignore[arg-type]
        _steps_at_least(ckpt(0), 3)
        svc.carry_out([Migrate(j, (2,))], {j: q.get(j)}, time.time())  # type: ignore[dict-item]
        hold_at(hold, 6)
        _steps_at_least(ckpt(1), 6)
        svc.carry_out([Preempt(j)], {j: q.get(j)}, time.time())  # type: ignore[dict-item]
        hold_at(hold, None)
        assert svc.launch(q.get(j), (4,))  # type: ignore[arg-type]
        svc.run()
        row = q.get(j)
        assert row is not None and row.state == "finished"
        assert (row.launches, row.migrations, row.preemptions) == (3, 1, 1)
        assert [int(ckpt(k).read_text()) for k in range(3)] == [3, 6, 30]  # each node's own folder
        (line,) = done_lines(done)
        assert line[:3] == [str(j), "2", "6"]  # third launch began at the second stop
        assert steps_done(done)[j] == list(range(1, 31))  # every step once: both moves kept the counter
        log = (tmp_path / "service.log").read_text()
        assert f"checkpoint from {names[0]} unpacked on {names[1]}" in log
        assert f"checkpoint from {names[1]} unpacked on {names[2]}" in log
    finally:
        svc.engine.stop_agents()  # type: ignore[attr-defined]


def test_without_a_shared_filesystem_a_checkpoint_above_the_limit_is_not_moved(tmp_path: Path, cluster: Any) -> None:
    done, hold = tmp_path / "done.txt", tmp_path / "hold"
    hold_at(hold, 3)
    (j,) = submit(tmp_path, [ticks_spec(done, 10, 1, hold=hold)])
    svc = _service(tmp_path, cluster, shared_fs=False, checkpoint_max_mb=1e-6)  # 1 byte: "3\n" is above it
    svc.refresh_nodes()
    names = [n.name for n in svc.nodes]
    q = JobQueue(tmp_path)
    try:
        assert svc.launch(q.get(j), (0,))  # type: ignore[arg-type]
        _steps_at_least(tmp_path / "nodes" / names[0] / "checkpoints" / str(j) / "n", 3)
        svc.carry_out([Migrate(j, (2,))], {j: q.get(j)}, time.time())  # type: ignore[dict-item]
        hold_at(hold, None)
        notes = [d for _, _, s, d in q.history(j) if s == "note"]
        assert notes == [f"job {j}: checkpoint of 2 bytes (0.0 MB) on node {names[0]} is above checkpoint_max_mb=1e-06: "
                         "not moved (raise checkpoint_max_mb or use a shared filesystem)"]
        svc.run()
        row = q.get(j)
        assert row is not None and (row.state, row.launches, row.migrations) == ("finished", 1, 0)  # stayed
        assert done_lines(done)[0][:3] == [str(j), "0", "0"]
    finally:
        svc.engine.stop_agents()  # type: ignore[attr-defined]


def test_jobs_of_mixed_sizes_finish_on_three_nodes_and_a_lost_node_is_requeued(tmp_path: Path, cluster: Any) -> None:
    done = tmp_path / "done.txt"
    sizes = [1, 2, 4, 1, 1, 2, 1, 3]  # 4 and 3 GPUs span nodes (2 devices each)
    ids = submit(tmp_path, [ticks_spec(done, 15, g) for g in sizes])
    svc = _service(tmp_path, cluster)
    engine = svc.engine
    q = JobQueue(tmp_path)
    nodes_by_id = {n.node_id[:12]: n for n in cluster.workers}
    svc.cfg = ServeConfig(**{**svc.cfg.__dict__, "max_wall_s": 3.0, "exit_when_idle": False})  # run a while
    svc.run()
    running = q.jobs(("running",))
    victim_node = next(p["node"] for r in running for p in r.placement if p["node"] in nodes_by_id)
    victims = sorted(r.id for r in running if any(p["node"] == victim_node for p in r.placement))
    cluster.remove_node(nodes_by_id[victim_node])
    time.sleep(1.0)
    svc2 = _service(tmp_path, cluster)
    try:
        svc2.run()
        rows = {r.id: r for r in q.jobs()}
        assert [rows[i].state for i in ids] == ["finished"] * len(ids)
        lines = done_lines(done)
        assert sorted(int(x[0]) for x in lines if x[3] in ("-", "0")) == ids  # each exactly once
        for j in victims:  # requeued when their node left, resumed elsewhere from their step counter
            assert rows[j].restarts >= 1
            assert all(p["node"] != victim_node for p in rows[j].placement) or rows[j].state == "finished"
            assert any("left the cluster" in d for _, _, _, d in q.history(j))
        assert victims
        multi = [x for x in lines if int(x[0]) == ids[2]]  # the 4-GPU job: one process on each of two nodes
        assert sorted(x[3] for x in multi) == ["0", "1"] and {x[4] for x in multi} == {"2"}
    finally:
        engine.stop_agents()  # type: ignore[attr-defined]
        svc2.engine.stop_agents()  # type: ignore[attr-defined]
