"""The bare heap loop that perf mode compares the simulator against."""

from __future__ import annotations

from gpusched.bench.bare_loop import replay, time_replay
from gpusched_env.catalog import base_iter_s
from gpusched_env.types import Job


def test_replay_completes_every_job_at_arrival_plus_run_time():
    it = base_iter_s("resnet50")
    jobs = [Job(0, 0.0, 1, 100.0, "resnet50"), Job(1, 10.0, 2, 10.0, "resnet50")]
    done, last = replay(jobs)
    assert done == 2
    assert last == max(0.0 + 100.0 * it, 10.0 + 10.0 * it)
    wall, cpu = time_replay(jobs, 3)
    assert wall >= 0.0 and cpu >= 0.0
