"""The command layer: exactly which MPS commands, client environments and NVML calls a 2-job shared
placement on one GPU produces (dry run: recorded, not executed)."""

from __future__ import annotations

from pathlib import Path

import pytest
from realtest_helpers import FakeWorkers, Fifo, descendants, tiny_workload

from gpusched.real.backend import RealBackend, RealConfig
from gpusched.real.commands import DryRunRunner, make_runner
from gpusched.real.devices import NvidiaDevices
from gpusched.real.launcher import LocalNodeAgent
from gpusched.real.mps import MpsDaemon, client_priority_supported
from gpusched_env.policy import run_policy


def test_mps_client_env_and_priority_gate(tmp_path: Path) -> None:
    mps = MpsDaemon(DryRunRunner(), tmp_path, driver_version="550.54.15", context_mb=0.0)
    env = mps.client_env(2, 0.25, 1.5, priority=1)
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=1536M,1=1536M"
    # the default adds the client's own need (1,024 MB, measured on an H200) to the job's 1.5 GB
    assert MpsDaemon(DryRunRunner(), tmp_path).client_env(1, 1.0, 1.5, 0)["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=2560M"
    assert "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT" not in MpsDaemon(DryRunRunner(), tmp_path).client_env(1, 1.0, 0.0, 0)
    assert env["CUDA_MPS_CLIENT_PRIORITY"] == "0"
    assert env["CUDA_MPS_PIPE_DIRECTORY"] == str(tmp_path / "mps" / "pipe")
    old = MpsDaemon(DryRunRunner(), tmp_path, driver_version="535.104.05")
    assert "CUDA_MPS_CLIENT_PRIORITY" not in old.client_env(1, 1.0, 0.0, 0)
    assert not client_priority_supported(None)
    with pytest.raises(ValueError, match="real.commands"):
        make_runner("sometimes")


def test_two_jobs_shared_on_one_gpu_records_mps_and_nvml(run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the job processes are torch-free stand-ins, recorded as issued (the worker's CPU fallback for a dry run
    # without a GPU: test_worker.py)
    runner = FakeWorkers(run_dir / "commands.jsonl")
    devices = NvidiaDevices(runner, count=2)
    wl = tiny_workload([(0.0, "pointnet", 40), (0.0, "pointnet", 40)])
    mps = MpsDaemon(runner, run_dir, driver_version="550.54.15")
    backend = RealBackend(wl.topology, wl.jobs, wl.sizes, devices, LocalNodeAgent(runner, run_dir), run_dir, 0,
                          RealConfig(telemetry_s=0.2), mps=mps, max_jobs_per_gpu=2)
    with backend:
        run_policy(backend, Fifo(sm_share=0.5, pack=2))
    assert not descendants()
    pipe, log = str(run_dir / "mps" / "pipe"), str(run_dir / "mps" / "log")
    runs = runner.commands("run")
    assert [(c.argv, c.env, c.stdin) for c in runs] == [
        (("nvidia-cuda-mps-control", "-d"), {"CUDA_MPS_PIPE_DIRECTORY": pipe, "CUDA_MPS_LOG_DIRECTORY": log}, None),
        (("nvidia-cuda-mps-control",), {"CUDA_MPS_PIPE_DIRECTORY": pipe, "CUDA_MPS_LOG_DIRECTORY": log}, "quit\n"),
    ]
    spawns = runner.commands("spawn")
    assert len(spawns) == 2
    for c in spawns:
        assert c.argv[1:3] == ("-m", "gpusched.real.worker")
        e = c.env
        assert e["CUDA_VISIBLE_DEVICES"] == "0" and e["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
        assert e["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"
        assert e["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=1536M"  # 0.5 GB + the client's 1,024 MB
        assert e["CUDA_MPS_CLIENT_PRIORITY"] == "1"
        assert e["CUDA_MPS_PIPE_DIRECTORY"] == pipe and e["GPUSCHED_TORCH_DEVICE"] == "cuda"
    nvml = {c.argv[0] for c in runner.commands("nvml")}
    assert {"nvmlInit", "nvmlDeviceGetCount", "nvmlDeviceGetHandleByIndex", "nvmlDeviceGetPowerUsage",
            "nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetUtilizationRates", "nvmlDeviceGetMemoryInfo",
            "nvmlDeviceGetClockInfo", "nvmlDeviceGetTemperature", "nvmlShutdown"} <= nvml
    logged = (run_dir / "commands.jsonl").read_text()
    assert "nvidia-cuda-mps-control" in logged and "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" in logged
    res = backend.result()
    assert all(r.finish_s is not None for r in res.records)
    assert {r.job.job_id: r.first_start_s is not None for r in res.records} == {0: True, 1: True}


def test_replay_pins_each_client_to_its_job_memory_plus_real_mps_context_mb(run_dir: Path) -> None:
    """An H200 ran no PyTorch client under a 512 MB limit (the job's 0.5 GB alone): the replay adds
    ``real.mps_context_mb`` to it."""
    from gpusched.real.replay import replay

    runner = FakeWorkers(run_dir / "commands.jsonl")
    wl = tiny_workload([(0.0, "pointnet", 20)], devices=1)
    replay(wl, Fifo(), NvidiaDevices(runner, count=1), runner, run_dir, 0, RealConfig(mps_context_mb=256.0))
    (spawn,) = runner.commands("spawn")
    assert spawn.env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=768M"
