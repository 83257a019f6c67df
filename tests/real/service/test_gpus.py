"""MPS and NVML on the service's NVIDIA nodes, on CPU: the MPS commands are recorded (a dry-run command
layer) and NVML is faked by monkeypatched pynvml functions."""

from __future__ import annotations

import signal
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from gpusched.real.commands import Call, DryRunRunner
from gpusched.real.service import gpus as gpus_mod
from gpusched.real.service.engine import LocalEngine
from gpusched.real.service.gpus import MpsShare, NodeGpus, read_telemetry
from gpusched.real.service.node import NodeRunner
from gpusched.real.service.queue import JobQueue
from gpusched.real.service.report import report
from gpusched.real.service.serve import ServeConfig, Service
from gpusched.real.service.spec import parse_spec
from gpusched_env.config_util import ConfigError
from gpusched_env.types import Decision, Sharing, Start
from gpusched_env.view import ClusterView
from tests.real.service.helpers import submit

MPS = "nvidia-cuda-mps-control"


class FakeNvmlRunner(DryRunRunner):
    """Records every command and NVML call; MPS commands are not run, NVML calls reach (fake) pynvml."""

    def nvml(self, fn: str, *args: Any) -> Any:
        super().nvml(fn, *args)
        return getattr(pynvml, fn)(*args)


@pytest.fixture
def fake_nvml(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Two GPUs at 250 W, 80 % and 40 % busy, on an R550 driver (client priority supported)."""
    gpu = {"count": 2, "power_mw": [250_000, 250_000], "util": [80, 40], "driver": "550.54.15"}
    fns = {
        "nvmlInit": lambda: None, "nvmlShutdown": lambda: None,
        "nvmlDeviceGetCount": lambda: gpu["count"],
        "nvmlDeviceGetHandleByIndex": lambda i: i,
        "nvmlDeviceGetUUID": lambda h: f"GPU-fake-{h}",
        "nvmlDeviceGetName": lambda h: "NVIDIA H100 80GB HBM3",
        "nvmlSystemGetDriverVersion": lambda: gpu["driver"],
        "nvmlDeviceGetTotalEnergyConsumption": lambda h: 0,
        "nvmlDeviceGetPowerUsage": lambda h: gpu["power_mw"][h],
        "nvmlDeviceGetUtilizationRates": lambda h: SimpleNamespace(gpu=gpu["util"][h], memory=0),
        "nvmlDeviceGetMemoryInfo": lambda h: SimpleNamespace(used=2**30, total=80 * 2**30),
        "nvmlDeviceGetClockInfo": lambda h, c: 1980,
        "nvmlDeviceGetTemperature": lambda h, s: 40,
    }
    for name, fn in fns.items():
        monkeypatch.setattr(pynvml, name, fn)
    return gpu


class MpsPacking:
    """Gandiva-style packing with MPS: every pending job goes onto GPU 0, an MPS client with 50 % of the
    SMs (two jobs co-located on one GPU)."""

    name, round_s, events = "mps_packing", None, True

    def decide(self, view: ClusterView) -> list[Decision]:
        return [Start(j, (0,), Sharing.mps(50.0)) for j in view.pending_ids]


def test_two_mps_jobs_on_one_gpu_share_one_daemon_started_once_and_stopped_at_the_end(
        tmp_path: Path, fake_nvml: dict[str, Any]) -> None:
    fake_nvml["count"] = 1
    out = tmp_path / "svc"
    envs = tmp_path / "envs"
    envs.mkdir()
    # each job writes the CUDA/MPS part of its environment, then waits for the other one to have
    # started, so the two run side by side on GPU 0
    cmd = (f'env | grep -E "^(CUDA_|GPUSCHED_SM_PCT)" | sort > {envs}/$GPUSCHED_JOB_ID; '
           f'for i in $(seq 100); do [ $(ls {envs} | wc -l) -ge 2 ] && break; sleep 0.05; done')
    a, b = submit(out, [parse_spec({"command": cmd, "shell": True, "gpus": 1}, "t") for _ in range(2)])
    rec = FakeNvmlRunner()
    engine = LocalEngine(out, 1, 1, "nvidia", telemetry_s=0.05, gpu_runner=rec)
    cfg = ServeConfig(out_dir=str(out), device_kind="nvidia", devices_per_node=1, poll_s=0.05, grace_s=2.0,
                      exit_when_idle=True, max_wall_s=30.0)
    svc = Service(cfg, engine=engine)
    svc.policy = MpsPacking()
    svc.run()

    pipe, log = out / "nodes" / "local0" / "mps" / "pipe", out / "nodes" / "local0" / "mps" / "log"
    base = {"CUDA_MPS_PIPE_DIRECTORY": str(pipe), "CUDA_MPS_LOG_DIRECTORY": str(log)}
    assert rec.commands("run") == [Call("run", (MPS, "-d"), {**base, "CUDA_VISIBLE_DEVICES": "0"}),
                                   Call("run", (MPS,), base, "quit\n")]
    want = sorted(f"{k}={v}" for k, v in {
        **base, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "50", "CUDA_MPS_CLIENT_PRIORITY": "1",
        "CUDA_VISIBLE_DEVICES": "0", "GPUSCHED_SM_PCT": "50"}.items())
    for j in (a, b):
        assert (envs / str(j)).read_text().split() == want
    q = JobQueue(out)
    ra, rb = q.get(a), q.get(b)
    q.close()
    assert ra is not None and rb is not None and ra.state == rb.state == "finished"
    assert ra.gpu_ids == rb.gpu_ids == (0,)
    assert ra.first_start_t is not None and rb.first_start_t is not None and ra.finish_t and rb.finish_t
    assert max(ra.first_start_t, rb.first_start_t) < min(ra.finish_t, rb.finish_t)  # side by side
    # the report counts GPU 0 busy once while both run on it (the simulator's busy GPU-seconds)
    span = max(ra.finish_t, rb.finish_t) - min(ra.submit_t, rb.submit_t)
    busy = max(ra.finish_t, rb.finish_t) - min(ra.first_start_t, rb.first_start_t)
    m = next(iter(report(out)["policies"].values()))["metrics"]
    assert m["utilization"] == pytest.approx(busy / span, rel=1e-3)
    rows = (out / "nodes" / "local0" / "telemetry.csv").read_text().splitlines()
    assert rows[0] == "t,node,device,power_w,util,mem_used_mb" and rows[1].split(",")[1:] == [
        "local0", "0", "250.000", "0.8", "1024"]


def test_a_whole_gpu_job_gets_no_mps_and_starts_no_daemon(
        tmp_path: Path, fake_nvml: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", "/another/daemon")  # not passed on to the jobs
    rec = FakeNvmlRunner()
    engine = LocalEngine(tmp_path, 1, 2, "nvidia", telemetry_s=60.0, gpu_runner=rec)
    r = engine.runners["local0"]
    r.launch(1, 0, ["sh", "-c", f"env > {tmp_path}/env"], {}, None, [1], str(tmp_path / "ck"))
    r.procs[(1, 0)].wait(30)
    env = (tmp_path / "env").read_text().splitlines()
    assert "CUDA_VISIBLE_DEVICES=1" in env
    assert [x for x in env if x.startswith("CUDA_MPS_")] == []
    engine.close()
    assert rec.commands("run") == []


def test_a_restarted_node_runner_adopts_a_live_daemon_else_starts_one(
        tmp_path: Path, fake_nvml: dict[str, Any]) -> None:
    rec = FakeNvmlRunner()
    g = NodeGpus(tmp_path, "n0", 2, 60.0, rec)
    (g.mps.pipe_dir).mkdir(parents=True)
    (g.mps.pipe_dir / "control").touch()  # the socket a daemon left; it answers (the dry run says "")
    env = g.mps_env(MpsShare(30.0, priority=2), 2)
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "30" and env["CUDA_MPS_CLIENT_PRIORITY"] == "0"
    assert g.mps_attached
    assert [(c.argv, c.stdin) for c in rec.commands("run")] == [((MPS,), "get_server_list\n")]
    g.close(stop_mps=True)
    assert [(c.argv, c.stdin) for c in rec.commands("run")][-1] == ((MPS,), "quit\n")

    class DeadDaemon(FakeNvmlRunner):
        def run(self, argv: list[str], env: dict[str, str], stdin: str | None = None) -> str:
            super().run(argv, env, stdin)
            if stdin == "get_server_list\n":
                raise RuntimeError("Cannot find MPS control daemon process")
            return ""

    fake_nvml["driver"] = "535.104.05"  # before R550: no client priority
    rec2 = DeadDaemon()
    g2 = NodeGpus(tmp_path, "n0", 2, 60.0, rec2)
    assert "CUDA_MPS_CLIENT_PRIORITY" not in g2.mps_env(MpsShare(30.0, priority=2), 1)
    assert not g2.mps_attached
    assert [(c.argv, c.stdin, c.env.get("CUDA_VISIBLE_DEVICES")) for c in rec2.commands("run")] == [
        ((MPS,), "get_server_list\n", None), ((MPS, "-d"), None, "0,1")]  # the daemon serves both GPUs
    g2.close(stop_mps=False)  # a launch still runs: the daemon is left for the next service
    assert len(rec2.commands("run")) == 2

    class NoDaemon(FakeNvmlRunner):
        def run(self, argv: list[str], env: dict[str, str], stdin: str | None = None) -> str:
            raise RuntimeError("command nvidia-cuda-mps-control -d failed (1)")

    g3 = NodeGpus(tmp_path / "other", "n3", 1, 60.0, NoDaemon())
    with pytest.raises(OSError, match="node n3: the MPS control daemon did not start: command nvidia-cuda-mps"):
        g3.mps_env(MpsShare(30.0), 1)  # the service logs "cannot launch" and the launch counts as lost


def test_the_daemon_stays_up_while_a_client_runs_and_a_later_runner_stops_it(
        tmp_path: Path, fake_nvml: dict[str, Any]) -> None:
    rec = FakeNvmlRunner()
    r = LocalEngine(tmp_path, 1, 2, "nvidia", telemetry_s=60.0, gpu_runner=rec).runners["local0"]
    r.launch(1, 0, ["sleep", "30"], {}, None, [0], str(tmp_path / "ck"), MpsShare(50.0))
    r.close()  # the service stops with the job running: the daemon stays for it
    assert [c.argv for c in rec.commands("run")] == [(MPS, "-d")]
    r.signal(1, 0, signal.SIGKILL)
    r.procs[(1, 0)].wait(30)
    assert r.gpus is not None
    (r.gpus.mps.pipe_dir / "control").touch()  # the socket the daemon holds (none in a dry run)
    rec2 = FakeNvmlRunner()
    again = NodeRunner(tmp_path / "nodes" / "local0", "local0", 2, "nvidia", telemetry_s=60.0, gpu_runner=rec2)
    again.close()  # a restarted service exits idle: it adopts the daemon and stops it
    assert [(c.argv, c.stdin) for c in rec2.commands("run")] == [((MPS,), "get_server_list\n"), ((MPS,), "quit\n")]


def test_nvml_samples_give_the_hand_computed_energy_and_utilisation(
        tmp_path: Path, fake_nvml: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpus_mod.time, "time", lambda: 1000.0)  # the first sample, taken at start
    out = tmp_path / "svc"
    submit(out, [])  # an empty queue
    fake_nvml["power_mw"] = [250_000, 200_000]
    g = NodeGpus(out / "nodes" / "n0", "n0", 2, 3600.0, FakeNvmlRunner())
    for k in range(1, 10):  # 9 more, 4 s apart: 36 s; GPU 1 ramps from 200 W to 300 W
        fake_nvml["power_mw"][1] = 200_000 + 100_000 * k // 9
        g.sample(1000.0 + 4 * k)
    assert [c for c in g.runner.calls if c.kind == "nvml"] == []  # readings are not kept in memory
    g.close(stop_mps=True)
    tel = read_telemetry(out)
    # GPU 0: 250 W x 36 s; GPU 1: a straight ramp 200 -> 300 W, 250 W on average: 18 000 J = 0.005 kWh in
    # all; utilisation (0.8 + 0.4) / 2
    assert tel is not None and (tel.n_gpus, tel.n_samples) == (2, 20)
    assert tel.energy_j == pytest.approx(18_000.0)
    assert tel.util == pytest.approx(0.6)
    with open(out / "nodes" / "n0" / "telemetry.csv", "a") as f:
        f.write("1040.000,n0,1,25")  # a torn last line (a crash mid-write): skipped
    m = report(out)["policies"]["unknown"]["metrics"]
    assert m["energy_kwh"] == pytest.approx(0.005)
    assert (m["nvml_utilization"], m["nvml_gpus"], m["nvml_samples"]) == pytest.approx((0.6, 2.0, 20.0))


def test_cpu_stand_ins_record_no_telemetry(tmp_path: Path) -> None:
    engine = LocalEngine(tmp_path, 1, 2, "cpu")
    assert engine.runners["local0"].gpus is None
    engine.close()
    assert read_telemetry(tmp_path) is None


def test_an_mps_pipe_folder_too_long_for_a_socket_is_refused_naming_out_dir(
        tmp_path: Path, fake_nvml: dict[str, Any]) -> None:
    class Executing(FakeNvmlRunner):
        dry_run = False  # as on a GPU machine (the commands are still only recorded)

    rec = Executing()
    g = NodeGpus(tmp_path / ("x" * 80), "n0", 1, 60.0, rec)
    with pytest.raises(OSError, match="out_dir: the MPS pipe folder .* is longer than 80 characters"):
        g.ensure_mps()
    assert rec.commands("run") == []
    g.close(stop_mps=True)


def test_without_nvml_a_node_still_runs_mps_and_records_why_it_has_no_telemetry(
        tmp_path: Path, fake_nvml: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    def no_driver() -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)

    monkeypatch.setattr(pynvml, "nvmlInit", no_driver)
    rec = FakeNvmlRunner()
    g = NodeGpus(tmp_path, "n0", 3, 0.01, rec)
    assert g.devices is None and not g.sample()
    assert "NVML unavailable, no telemetry: NVMLError_DriverNotLoaded" in (tmp_path / "nvml_error.txt").read_text()
    env = g.mps_env(MpsShare(25.0, priority=1), 1)
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25" and "CUDA_MPS_CLIENT_PRIORITY" not in env  # no driver version
    assert rec.commands("run")[0].env["CUDA_VISIBLE_DEVICES"] == "0,1,2"
    g.close(stop_mps=True)
    assert not (tmp_path / "telemetry.csv").exists()


def test_telemetry_s_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="telemetry_s: must be > 0, got 0"):
        ServeConfig(out_dir=str(tmp_path), telemetry_s=0.0)


def test_busy_gpu_seconds_count_a_shared_gpu_once_by_hand() -> None:
    from gpusched.real.service.report import busy_gpu_seconds
    history = [
        (1, 10.0, "running", "launch 0 on GPUs [0] (n0)"), (1, 20.0, "finished", "exit 0"),
        (2, 15.0, "running", "launch 0 on GPUs [0] (n0)"), (2, 16.0, "note", "stdout rotated"),
        (2, 30.0, "finished", "exit 0"),
        (3, 0.0, "running", "launch 0 on GPUs [1, 2] (n0)"), (3, 5.0, "preempted", "policy"),
        (3, 6.0, "pending", ""), (3, 8.0, "running", "launch 1 on GPUs [1, 2] (n0)"),
    ]
    # GPU 0: [10, 20] and [15, 30] -> 20 s once; GPUs 1 and 2: [0, 5] and [8, now = 12] -> 9 s each
    assert busy_gpu_seconds(history, now=12.0) == pytest.approx(20.0 + 9.0 + 9.0)
    assert busy_gpu_seconds(history[:2], now=100.0) == pytest.approx(10.0)
