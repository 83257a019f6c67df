"""gpusched-train as a user meets it: its help page, one-line errors before anything is written, progress
in train.log, a wall-clock stop that says so, the same model from the same seed, and Ctrl-C that saves
the model and the command to resume it."""

from __future__ import annotations

import json
import logging
import os
import shlex
import signal
import sys
import threading
import time
import zipfile
from pathlib import Path

import pytest

from gpusched_env.config_util import ConfigError
from gpusched_env.scenario import CONF_DIR

SCN = "synthetic_small"
TINY = [f"scenario={SCN}", "n_envs=1", "total_timesteps=64", "agent.params.n_steps=32", "agent.params.batch_size=32",
        "agent.params.n_epochs=1", "agent.params.policy_kwargs.net_arch=[16]", "eval.enabled=false",
        "checkpoint_freq=100000"]


def _cfg(*overrides: str):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose("train", overrides=[*TINY, *overrides])


def _run_main(argv: list[str], capsys, monkeypatch) -> tuple[int, str, str]:
    """``gpusched-train argv`` in this process (gpusched.agents.train.main); (exit code, stdout, stderr)."""
    from gpusched.agents import train

    monkeypatch.setattr(sys, "argv", ["gpusched-train", *argv])
    monkeypatch.setenv("HYDRA_FULL_ERROR", "1")
    code, handlers = 0, logging.root.handlers[:]
    try:
        train.main()
    except SystemExit as e:
        code = int(e.code or 0)
    finally:  # Hydra's console handler writes to this test's captured stdout: not to later tests'
        logging.root.handlers[:] = handlers
    out, err = capsys.readouterr()
    return code, out, err


def test_help_lists_envs_agents_scenarios_and_key_options(capsys, monkeypatch):
    code, out, _ = _run_main(["--help"], capsys, monkeypatch)
    assert code == 0
    for group in ("env", "agent", "scenario"):  # every option of each group, read from conf/GROUP/
        for p in (CONF_DIR / group).glob("*.yaml"):
            assert (f"{group}={p.stem} " in out) if group != "scenario" else (p.stem in out), (group, p.stem)
    assert "env=cluster_v1      gpusched/Cluster-v1" in out and "  device:   daris_rt, h100_pairs, tally_pairs" in out
    assert "round it UP to whole rollouts of agent.params.n_steps x n_envs" in out
    assert "(default 512 x 2 = 1024)" in out  # conf/agent/maskable_ppo.yaml n_steps x conf/train.yaml n_envs
    for key in ("total_timesteps=N", "seed=S", "out_dir=DIR", "overwrite=true", "resume=true", "max_train_minutes=M",
                "n_envs=K", "bc.teacher=H", "select.enabled=true", "tiresias"):
        assert key in out, key
    assert "Hydra" not in out


@pytest.mark.parametrize(("argv", "message"), [
    (["bc.teacher=nope"], "bc.teacher must be a heuristic (fifo, sjf, srtf, las, "),
    (["env.bogus=1"], "env.bogus: unknown key; allowed at env: age_scale_s, age_weight, energy_weight, fifo_slots, id,"),
    (["+env.bogus=1"], "env.bogus: unknown key for gpusched/Cluster-v0; allowed: age_scale_s,"),
    (["env=cluster_v1", "+env.bogus=1"], "env.bogus: unknown key for gpusched/Cluster-v1; allowed: age_scale_s, age_weight, "
                                          "clairvoyant, energy_weight,"),
    (["scenario=tally_pairs", "env=gpushare", "env.mechanism=nope"], "env.mechanism must be one of ['exclusive',"),
    (["scenario=tally_pairs", "env=gpushare", "env.duration_s=0"], "env.duration_s must be a number of seconds > 0"),
    (["env.workloads=[9]"], "env.workloads: indices [9] out of range; scenario synthetic_small has 1 workload (indices 0..0)"),
    (["agent.params.learning_rate=-1"], "agent.params.learning_rate must be a number > 0, got -1"),
    (["scenario=tally_pairs", "env=gpushare", "env.be_weight=nan"], "env.be_weight must be finite, got nan"),
    (["max_train_minutes=0"], "max_train_minutes must be a number of minutes > 0 or null (no wall-clock limit), got 0"),
    (["resume=true"], "resume=true: no checkpoint to resume in "),
    (["scenario.model.locality.lf=0"], "scenario.model.locality.lf: must be"),
], ids=lambda x: " ".join(x) if isinstance(x, list) else "")
def test_bad_input_is_one_line_exit_2_before_anything_is_written(argv, message, tmp_path, capsys, monkeypatch):
    out = tmp_path / "run"
    scenario = [] if any(a.startswith("scenario=") for a in argv) else [f"scenario={SCN}"]
    code, _, err = _run_main([*scenario, *argv, f"out_dir={out}"], capsys, monkeypatch)
    lines = [x for x in err.splitlines() if x.strip()]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"gpusched-train: error: {message}"), lines[0]
    assert not out.exists()
    assert not (Path.cwd() / "train.log").exists()


def test_out_dir_that_cannot_be_written_is_named(tmp_path):
    from gpusched.agents.train import check

    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match=r"^out_dir: cannot create .*/file/run: .*/file is not a folder$"):
        check(_cfg(), tmp_path / "file" / "run")
    if os.geteuid() != 0:  # root writes anywhere
        ro = tmp_path / "ro"
        ro.mkdir(mode=0o500)
        with pytest.raises(ConfigError, match=r"^out_dir: cannot write into .*/ro \(permission denied\)$"):
            check(_cfg(), ro / "run")


def test_a_trained_out_dir_is_refused_unless_overwrite_or_resume(tmp_path):
    from gpusched.agents.train import check

    (tmp_path / "model.zip").write_bytes(b"")
    with pytest.raises(ConfigError, match="already holds model.zip; overwrite=true replaces that run, resume=true"):
        check(_cfg(), tmp_path)
    assert check(_cfg("overwrite=true"), tmp_path).resumed is None
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "model_32_steps.zip").write_bytes(b"")
    assert check(_cfg("resume=true"), tmp_path).resumed == (tmp_path / "checkpoints" / "model_32_steps.zip", None)


def _policy_params(model_zip: Path) -> dict:
    import io

    import torch

    with zipfile.ZipFile(model_zip) as z:
        return torch.load(io.BytesIO(z.read("policy.pth")), map_location="cpu")


def test_progress_lines_reach_train_log_and_the_summary_records_the_plan(tmp_path):
    from gpusched.agents.train import train

    summary = train(_cfg("progress_s=1000"), tmp_path)
    log = (tmp_path / "train.log").read_text().splitlines()
    assert len(log) == 3, log  # the plan, the start and the end (progress_s is longer than the run)
    assert log[0].endswith(f"INFO training maskable_ppo on gpusched/Cluster-v0 ({SCN}), seed 0, into {tmp_path}: "
                           "64 steps, rounded up to whole rollouts of n_steps x n_envs = 32")
    assert " INFO steps 0/64 (0.0 %) | episodes 0 | mean episode reward - (no episode finished yet) | " in log[1]
    assert " INFO steps 64/64 (100.0 %) | episodes " in log[2] and log[2].endswith("| left 0:00:00")
    assert summary["planned_timesteps"] == summary["num_timesteps"] == summary["rl_steps"] == 64
    assert summary["stopped_by_wall_clock"] is False and summary["interrupted"] is False
    assert json.loads((tmp_path / "train_summary.json").read_text()) == summary


def test_progress_line_counts_episodes_and_their_mean_return():
    from gpusched.agents.train_callbacks import Progress

    class Log:
        lines: list[str] = []

        def info(self, msg: str) -> None:
            self.lines.append(msg)

    class Model:
        num_timesteps = 0

    ticks = iter([0.0, 0.0, 5.0, 10.0, 10.0])
    p = Progress(400, 7.0, Log(), clock=lambda: next(ticks))  # type: ignore[arg-type]
    p.model = Model()  # type: ignore[assignment]
    p._on_training_start()  # t = 0
    Model.num_timesteps = 100
    p.locals = {"infos": [{"episode": {"r": -3.0}}, {}]}
    p._on_step()  # t = 5: no line
    Model.num_timesteps = 200
    p.locals = {"infos": [{"episode": {"r": -5.0}}, {"episode": {"r": -1.0}}]}
    p._on_step()  # t = 10: a line
    assert Log.lines[-1] == ("steps 200/400 (50.0 %) | episodes 3 | mean episode reward -3 (last 3) | elapsed 0:00:10"
                             " | left ~0:00:10")


def test_wall_clock_stop_is_recorded_and_warned(tmp_path):
    from gpusched.agents.train import train

    summary = train(_cfg("max_train_minutes=1e-9", "total_timesteps=100000"), tmp_path)
    assert summary["stopped_by_wall_clock"] is True
    assert summary["num_timesteps"] == 1 and summary["planned_timesteps"] == 100000
    warn = [x for x in (tmp_path / "train.log").read_text().splitlines() if " WARNING " in x]
    assert len(warn) == 1 and warn[0].endswith("WARNING max_train_minutes=1e-09 stopped training at 1 of 100,000 planned "
                                               "steps: this is not the planned model (train_summary.json: "
                                               "stopped_by_wall_clock)")


def test_same_seed_trains_the_same_model(tmp_path):
    from gpusched.agents.train import train

    for name in ("a", "b"):
        train(_cfg("seed=3"), tmp_path / name)
    a, b = (_policy_params(tmp_path / name / "model.zip") for name in ("a", "b"))
    assert a.keys() == b.keys() and all(a[k].equal(b[k]) for k in a)


def _interrupt_when_trainer_listens(timeout_s: float = 120.0) -> threading.Thread:
    """A thread that sends this process SIGINT once gpusched-train's Ctrl-C handler is installed."""
    def run() -> None:
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            handler = signal.getsignal(signal.SIGINT)
            if type(getattr(handler, "__self__", None)).__name__ == "SigintStop":
                os.kill(os.getpid(), signal.SIGINT)
                return
            time.sleep(0.01)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_ctrl_c_saves_the_model_and_the_command_that_resumes_it(tmp_path, monkeypatch):
    from gpusched.agents.adapter import read_meta
    from gpusched.agents.train import last_checkpoint, train

    argv = [*TINY, "total_timesteps=100000", f"out_dir={tmp_path}"]
    monkeypatch.setattr(sys, "argv", ["gpusched-train", *argv])
    before = signal.getsignal(signal.SIGINT)  # SIG_IGN where the suite runs in a background job
    thread = _interrupt_when_trainer_listens()
    summary = train(_cfg("total_timesteps=100000", "max_train_minutes=5"), tmp_path)
    thread.join()
    assert signal.getsignal(signal.SIGINT) is before  # restored
    n = summary["num_timesteps"]
    assert summary["interrupted"] is True and summary["stopped_by_wall_clock"] is False and 1 <= n < 100000
    assert read_meta(tmp_path / "model.zip")["num_timesteps"] == n
    assert last_checkpoint(tmp_path / "checkpoints") == (tmp_path / "checkpoints" / f"model_{n}_steps.zip",
                                                         tmp_path / "checkpoints" / f"model_vecnormalize_{n}_steps.pkl")
    assert not [p.name for p in tmp_path.rglob("*tmp*")]
    resume = shlex.join(["gpusched-train", *argv, "resume=true"])
    assert (tmp_path / "train.log").read_text().rstrip().endswith(f"Resume with: {resume}")
    again = train(_cfg("total_timesteps=64", "resume=true"), tmp_path)
    assert again["resumed_from"] == str(tmp_path / "checkpoints" / f"model_{n}_steps.zip")
    assert again["num_timesteps"] >= 64 and (again["num_timesteps"] - n) % 32 == 0  # whole rollouts of 32 from n
    assert again["interrupted"] is False


@pytest.mark.slow
def test_ctrl_c_on_the_command_line_with_subprocess_envs(tmp_path):
    """A real SIGINT to gpusched-train (SubprocVecEnv workers ignore it): exit 130, the model and a
    checkpoint saved, the resume command printed."""
    import subprocess

    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=str(root) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    argv = [*TINY, "total_timesteps=100000", "n_envs=2", "vec_env=subprocess", "progress_s=0.1", f"out_dir={tmp_path}"]
    p = subprocess.Popen([sys.executable, "-m", "gpusched.agents.train", *argv], cwd=root, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    assert p.stdout is not None
    for line in p.stdout:  # the first progress line after a step
        if line.startswith("steps ") and not line.startswith("steps 0/"):
            break
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=300)
    assert p.returncode == 130, err[-3000:]
    assert out.rstrip().endswith(f"Resume with: {shlex.join(['gpusched-train', *argv, 'resume=true'])}")
    summary = json.loads((tmp_path / "train_summary.json").read_text())
    n = summary["num_timesteps"]
    assert summary["interrupted"] is True and (tmp_path / "checkpoints" / f"model_{n}_steps.zip").is_file()
