"""The test job of the service tests (helpers.TICKS_JOB) keeps its own exactly-once promise when the
stop signal, which reaches the job's whole process group, kills one of its children, and when it is
launched again after it completed."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.real.service.helpers import TICKS_JOB, done_lines, steps_done

# A `mv` that, on its first call, sends SIGTERM to its process group before renaming anything (the
# service's stop signal arriving while the job's `mv` starts) and so dies of it; later calls rename.
FAKE_MV = """#!/bin/sh
if [ ! -e "{flag}" ]; then : > "{flag}"; kill -TERM 0; sleep 5; exit 99; fi
exec /bin/mv "$@"
"""


def _launch(tmp_path: Path, done: Path, restart: int, path: str) -> int:
    env = {**os.environ, "PATH": path, "GPUSCHED_CHECKPOINT_DIR": str(tmp_path / "ckpt"), "GPUSCHED_JOB_ID": "7",
           "GPUSCHED_RESTART_COUNT": str(restart)}
    env.pop("RANK", None)
    env.pop("WORLD_SIZE", None)
    # its own session, like the service's runner: the fake mv's SIGTERM reaches this launch only
    proc = subprocess.run(["/bin/sh", "-c", TICKS_JOB.format(ticks=3, done=done)], env=env,
                          start_new_session=True, timeout=30)
    return proc.returncode


def test_a_stop_that_kills_the_checkpoint_move_neither_repeats_nor_skips_a_step(tmp_path: Path) -> None:
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "mv").write_text(FAKE_MV.format(flag=tmp_path / "stopped-once"))
    (fake / "mv").chmod(0o755)
    (tmp_path / "ckpt").mkdir()
    done = tmp_path / "done.txt"
    # launch 0: step 1's first mv stops the launch; the job saves step 1 all the same, then exits 143
    assert _launch(tmp_path, done, 0, f"{fake}:{os.environ['PATH']}") == 143
    assert steps_done(done) == {7: [1]}
    assert (tmp_path / "ckpt" / "n").read_text() == "1\n"  # saved, not only logged
    # launch 1 resumes after step 1 (it repeated step 1 when the step was logged but not saved)
    assert _launch(tmp_path, done, 1, os.environ["PATH"]) == 0
    assert steps_done(done) == {7: [1, 2, 3]}
    assert done_lines(done) == [["7", "1", "1", "-", "-"]]  # restart 1, first step 1
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["done.0", "n"]  # no temporary file left
    # launch 2 (a stop reached launch 1 as it finished, say): nothing to do, and no second completion
    assert _launch(tmp_path, done, 2, os.environ["PATH"]) == 0
    assert steps_done(done) == {7: [1, 2, 3]}
    assert done_lines(done) == [["7", "1", "1", "-", "-"]]
