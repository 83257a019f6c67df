"""A job process checkpoints on request and resumes with its iteration count intact."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import pytest
import torch
from realtest_helpers import TINY

from gpusched.real.launcher import REPO_ROOT
from gpusched.real.worker import EXIT_DONE, EXIT_STOPPED, WorkerSpec, run


def _records(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []


def _spawn(spec_path: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "GPUSCHED_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-m", "gpusched.real.worker", str(spec_path)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _wait_for(pred, timeout_s: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not pred():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def _placement_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker's ``run`` in this process: no core pinning, priority, thread count or device from the environment."""
    for key in ("GPUSCHED_CPU_CORES", "GPUSCHED_NICE", "GPUSCHED_NUM_THREADS", "GPUSCHED_TORCH_DEVICE"):
        monkeypatch.delenv(key, raising=False)


def test_checkpoint_then_sigterm_then_resume(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    total = 100_000  # far more than runs before the stop
    spec = WorkerSpec(job_id=7, model="resnet50", size=asdict(TINY["resnet50"]), total_iters=total, seed=3,
                      checkpoint=str(tmp_path / "ckpt.pt"), progress=str(tmp_path / "progress.jsonl"),
                      report_every_s=0.05)
    spec.write(tmp_path / "spec.json")
    prog = Path(spec.progress)
    p = _spawn(tmp_path / "spec.json")
    _wait_for(lambda: any(r["ev"] == "iter" and r["iter"] >= 20 for r in _records(prog)))
    p.send_signal(signal.SIGUSR1)
    _wait_for(lambda: any(r["ev"] == "ckpt" for r in _records(prog)))
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=30) == EXIT_STOPPED, p.stderr.read() if p.stderr else ""
    recs = _records(prog)
    stopped = recs[-1]
    assert stopped["ev"] == "stopped" and stopped["iter"] >= 20
    saved = torch.load(spec.checkpoint, weights_only=True)
    assert saved["iteration"] == stopped["iter"]  # the last checkpoint holds the last iteration
    assert {"model", "optimizer"} <= set(saved)

    # resume with a small remainder: starts at the saved iteration and runs exactly the rest (the worker's
    # ``run`` in this process: a second process would only start torch again)
    resume = WorkerSpec(**{**asdict(spec), "total_iters": stopped["iter"] + 15})
    _placement_unset(monkeypatch)
    assert run(resume) == EXIT_DONE
    new = _records(prog)[len(recs):]
    assert new[0]["ev"] == "ready" and new[0]["iter"] == stopped["iter"]
    assert new[-1]["ev"] == "done" and new[-1]["iter"] == stopped["iter"] + 15
    assert torch.load(spec.checkpoint, weights_only=True)["iteration"] == stopped["iter"] + 15


def test_a_cuda_job_without_a_gpu_trains_on_the_cpu_only_in_a_dry_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """GPUSCHED_TORCH_DEVICE=cuda where torch sees no GPU: an error, unless GPUSCHED_CPU_FALLBACK=1 (a recorded
    dry run, test_commands.py) lets the job train on the CPU (the worker's ``run`` in this process)."""
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is here")
    spec = WorkerSpec(job_id=2, model="pointnet", size=asdict(TINY["pointnet"]), total_iters=3, seed=0,
                      checkpoint=str(tmp_path / "ckpt.pt"), progress=str(tmp_path / "progress.jsonl"))
    _placement_unset(monkeypatch)
    monkeypatch.delenv("GPUSCHED_CPU_FALLBACK", raising=False)
    monkeypatch.setenv("GPUSCHED_TORCH_DEVICE", "cuda")
    with pytest.raises(RuntimeError, match="torch sees no CUDA device"):
        run(spec)
    monkeypatch.setenv("GPUSCHED_CPU_FALLBACK", "1")
    assert run(spec) == EXIT_DONE
    recs = _records(Path(spec.progress))
    assert [r["ev"] for r in recs][0] == "ready" and recs[-1]["ev"] == "done" and recs[-1]["iter"] == 3
    assert torch.load(spec.checkpoint, weights_only=True)["iteration"] == 3


def test_the_steady_step_time_is_measured_after_the_warm_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What ``gpusched-real profile`` reads from a job (test_profile.py): ``done`` carries the mean time of the
    steps after ``warmup_iters``, or null when no step follows the warm-up (in this process)."""
    _placement_unset(monkeypatch)
    steady = []
    for name, warmup in (("a", 2), ("b", 4)):
        spec = WorkerSpec(job_id=3, model="pointnet", size=asdict(TINY["pointnet"]), total_iters=4, seed=0,
                          checkpoint=str(tmp_path / f"{name}.pt"), progress=str(tmp_path / f"{name}.jsonl"),
                          warmup_iters=warmup)
        assert run(spec) == EXIT_DONE
        done = _records(Path(spec.progress))[-1]
        assert done["ev"] == "done" and done["iter"] == 4
        steady.append(done["steady_iter_s"])
    assert steady[0] > 0 and steady[1] is None
