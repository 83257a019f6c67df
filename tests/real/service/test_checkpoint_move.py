"""Checkpoints that move with a job when nodes share no filesystem (``shared_fs=false``): the pack and
unpack of a folder, then the service on two local stand-in nodes, each with its own checkpoint root
(``out_dir/nodes/<node>/checkpoints/``), so a job resumes elsewhere only if its checkpoint moved."""

from __future__ import annotations

import io
import tarfile
import time
from pathlib import Path

import pytest

from gpusched.real.service.checkpoints import CheckpointStore, pack_dir, unpack_dir
from gpusched.real.service.queue import JobQueue
from gpusched.real.service.serve import Service
from gpusched_env.types import Migrate, Preempt
from tests.real.service.helpers import done_lines, hold_at, service, steps_done, submit, ticks_spec


def test_pack_and_unpack_replace_the_folder_and_skip_temporary_files(tmp_path: Path) -> None:
    src = tmp_path / "a"
    (src / "sub").mkdir(parents=True)
    (src / "n").write_text("17\n")
    (src / "sub" / "w.bin").write_bytes(b"\x00" * 1000)
    (src / ".ckpt.pt.123.tmp").write_bytes(b"x" * 50)  # an interrupted atomic save: not moved
    size, data = pack_dir(src, 10_000)
    assert size == 3 + 1000 + 50 and data is not None
    assert pack_dir(src, 1052) == (1053, None)  # one byte above the limit: size only
    assert pack_dir(tmp_path / "missing", 0)[0] == 0
    dest = tmp_path / "b"
    dest.mkdir()
    (dest / "stale").write_text("old")
    unpack_dir(dest, data)
    assert sorted(str(p.relative_to(dest)) for p in dest.rglob("*")) == ["n", "sub", "sub/w.bin"]
    assert (dest / "n").read_text() == "17\n" and (dest / "sub" / "w.bin").stat().st_size == 1000
    assert not list(tmp_path.glob(".b.*"))  # nothing left beside it


def test_unpack_refuses_members_outside_the_folder(tmp_path: Path) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("../escape")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    with pytest.raises(ValueError, match=r"refusing member '\.\./escape'"):
        unpack_dir(tmp_path / "d", buf.getvalue())
    assert not (tmp_path / "escape").exists() and not (tmp_path / "d").exists()


def _svc(out: Path, **kw: object) -> Service:
    svc = service(out, nodes=2, devices_per_node=1, shared_fs=False, **kw)
    svc.refresh_nodes()
    return svc


def _ckpt(out: Path, node: str, job: int) -> Path:
    return out / "nodes" / node / "checkpoints" / str(job) / "n"


def _wait_steps(path: Path, at_least: int) -> None:
    t = time.monotonic()
    while not (path.exists() and path.read_text().strip() and int(path.read_text()) >= at_least):
        assert time.monotonic() - t < 60, f"{path} never reached step {at_least}"
        time.sleep(0.05)


def test_migrated_job_resumes_on_the_other_node_from_its_step_counter(tmp_path: Path) -> None:
    done, hold = tmp_path / "done.txt", tmp_path / "hold"
    hold_at(hold, 3)  # the job waits at step 3: it stops there, however slow this machine is
    (j,) = submit(tmp_path, [ticks_spec(done, 25, 1, hold=hold)])
    svc = _svc(tmp_path)
    q = JobQueue(tmp_path)
    assert svc.launch(q.get(j), (0,))  # type: ignore[arg-type]
    _wait_steps(_ckpt(tmp_path, "local0", j), 3)
    svc.carry_out([Migrate(j, (1,))], {j: q.get(j)}, time.time())  # type: ignore[dict-item]
    hold_at(hold, None)
    row = q.get(j)
    assert row is not None and row.state == "running" and row.placement[0]["node"] == "local1"
    svc.run()
    row = q.get(j)
    assert row is not None and (row.state, row.launches, row.migrations) == ("finished", 2, 1)
    assert int(_ckpt(tmp_path, "local0", j).read_text()) == 3  # local0's folder: where the first launch stopped
    assert int(_ckpt(tmp_path, "local1", j).read_text()) == 25
    (line,) = done_lines(done)
    assert line[:3] == [str(j), "1", "3"]  # second launch, first step = the moved counter
    assert steps_done(done)[j] == list(range(1, 26))  # every step exactly once: never from zero
    log = (tmp_path / "service.log").read_text()
    assert f"job {j}: checkpoint packed on local0 (" in log and f"job {j}: checkpoint from local0 unpacked on local1" in log
    assert not list((tmp_path / "moved").iterdir())  # dropped once the job finished


def test_preempted_job_resumes_on_the_other_node_after_the_service_restarted(tmp_path: Path) -> None:
    """The packed checkpoint is in the service folder: a new service (nothing in memory) moves it."""
    done, hold = tmp_path / "done.txt", tmp_path / "hold"
    hold_at(hold, 4)
    (j,) = submit(tmp_path, [ticks_spec(done, 20, 1, hold=hold)])
    svc = _svc(tmp_path)
    q = JobQueue(tmp_path)
    svc.launch(q.get(j), (0,))  # type: ignore[arg-type]
    _wait_steps(_ckpt(tmp_path, "local0", j), 4)
    svc.carry_out([Preempt(j)], {j: q.get(j)}, time.time())  # type: ignore[dict-item]
    svc.shutdown()  # the service goes away between the stop and the next launch
    hold_at(hold, None)
    held = CheckpointStore(tmp_path).held(j)
    assert held is not None and (held.node, held.size, held.packed) == ("local0", 2, True)  # "4\n"
    svc2 = _svc(tmp_path)
    assert svc2.launch(q.get(j), (1,))  # type: ignore[arg-type]
    svc2.run()
    row = q.get(j)
    assert row is not None and (row.state, row.preemptions, row.launches) == ("finished", 1, 2)
    (line,) = done_lines(done)
    assert line[:3] == [str(j), "1", "4"]
    assert steps_done(done)[j] == list(range(1, 21))


def test_checkpoint_above_the_limit_is_not_moved_and_the_error_names_job_size_and_key(tmp_path: Path) -> None:
    done, hold = tmp_path / "done.txt", tmp_path / "hold"
    hold_at(hold, 3)
    (j,) = submit(tmp_path, [ticks_spec(done, 15, 1, hold=hold)])
    svc = _svc(tmp_path, checkpoint_max_mb=1e-6)  # 1 byte: the 2-byte step counter "3\n" is above it
    q = JobQueue(tmp_path)
    svc.launch(q.get(j), (0,))  # type: ignore[arg-type]
    _wait_steps(_ckpt(tmp_path, "local0", j), 3)
    svc.carry_out([Migrate(j, (1,))], {j: q.get(j)}, time.time())  # type: ignore[dict-item]
    row = q.get(j)
    assert row is not None and row.placement[0]["node"] == "local0" and row.launches == 1  # not moved
    notes = [d for _, _, s, d in q.history(j) if s == "note"]
    assert len(notes) == 1 and notes[0].startswith(f"job {j}: checkpoint of ")
    assert notes[0] == (f"job {j}: checkpoint of 2 bytes (0.0 MB) on node local0 is above checkpoint_max_mb=1e-06: "
                        "not moved (raise checkpoint_max_mb or use a shared filesystem)")
    assert notes[0] in (tmp_path / "service.log").read_text()
    svc.carry_out([Preempt(j)], {j: q.get(j)}, time.time())  # type: ignore[dict-item]
    hold_at(hold, None)
    assert not svc.launch(q.get(j), (1,))  # type: ignore[arg-type]  # held back: its checkpoint stays on local0
    assert q.get(j).state == "pending"  # type: ignore[union-attr]
    assert any(d.startswith(f"job {j}: waits for node local0") for _, _, _, d in q.history(j))
    assert svc.launch(q.get(j), (0,))  # type: ignore[arg-type]
    svc.run()
    (line,) = done_lines(done)
    assert line[:3] == [str(j), "1", "3"] and steps_done(done)[j] == list(range(1, 16))
    assert not _ckpt(tmp_path, "local1", j).exists()
