"""``gpusched-real`` service subcommands: submit prints the id, queue, cancel, logs, report, errors."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from gpusched.real import cli as real_cli
from gpusched.real.service.cli import main


def _run(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(sys, "argv", ["gpusched-real", *argv])
    with pytest.raises(SystemExit) as e:
        real_cli.main()
    return int(e.value.code or 0)


def test_submit_queue_serve_logs_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "svc"
    spec = tmp_path / "j.yaml"
    spec.write_text("name: hello\ncommand: [echo, hello from $GPUSCHED_JOB_ID]\ngpus: 2\n")
    assert _run(["submit", str(spec), f"out_dir={out}"], monkeypatch) == 0
    assert _run(["submit", str(spec), f"out_dir={out}"], monkeypatch) == 0
    assert capsys.readouterr().out.split() == ["1", "2"]
    assert main(["cancel", "2", f"out_dir={out}"]) == 0
    assert capsys.readouterr().out.strip() == "job 2: cancelled"
    assert main(["serve", f"out_dir={out}", "devices_per_node=2", "poll_s=0.05", "exit_when_idle=true"]) == 0
    assert main(["queue", f"out_dir={out}"]) == 0
    table = capsys.readouterr().out
    assert "hello" in table and "finished" in table and "cancelled" in table
    assert main(["logs", "1", f"out_dir={out}"]) == 0
    logs = capsys.readouterr().out
    assert "hello from $GPUSCHED_JOB_ID" in logs  # no shell: the argument is passed as written
    assert "# " in logs and "finished: exit 0" in logs
    assert main(["report", f"out_dir={out}"]) == 0
    printed = capsys.readouterr().out
    doc = json.loads((out / "results.json").read_text())
    assert doc["scenario"] == "lab_cluster" and list(doc["policies"]) == ["fifo"]
    m = doc["policies"]["fifo"]["metrics"]
    assert m["jobs_finished"] == 1 and m["jobs_cancelled"] == 1 and m["restarts"] == 0
    assert m["avg_jct_s"] > 0 and m["makespan_s"] == pytest.approx(m["avg_jct_s"])
    rows = {ln.strip("│┃ ").split("│")[0].strip(): ln.split("│")[-2].strip()
            for ln in printed.splitlines() if ln.count("│") == 3}  # the table's body rows
    assert rows["jobs finished"] == "1" and rows["jobs cancelled"] == "1" and rows["restarts"] == "0"
    assert rows["avg JCT (s)"] == f"{m['avg_jct_s']:.1f}" and rows["utilisation"] == f"{m['utilization']:.3f}"
    assert printed.rstrip().endswith(f"-> {out / 'results.json'}")


@pytest.mark.parametrize("argv, msg", [
    (["submit", "nofile.yaml", "out_dir=X"], "gpusched-real submit: error: nofile.yaml: no such file"),
    (["queue"], "gpusched-real queue: error: out_dir: gpusched-real queue needs out_dir=DIR"),
    (["serve", "out_dir=X", "colour=red"], "gpusched-real serve: error: colour: unknown key for serve"),
    (["serve", "out_dir=X", "engine=k8s"], "gpusched-real serve: error: engine: must be one of"),
    (["serve", "out_dir=X", "ray_address=h:6379"], "gpusched-real serve: error: ray_address: only used with engine=ray"),
    (["serve", "out_dir=X", "grace_s=soon"], "gpusched-real serve: error: grace_s: expected float, got 'soon'"),
    (["serve", "out_dir=X", "engine=slurm", "shared_fs=false"],
     "gpusched-real serve: error: shared_fs: engine=slurm needs out_dir on a filesystem every node shares"),
    (["serve", "out_dir=X", "shared_fs=no"], "gpusched-real serve: error: shared_fs: expected bool, got 'no'"),
    (["serve", "out_dir=X", "checkpoint_max_mb=0"], "gpusched-real serve: error: checkpoint_max_mb: must be > 0, got 0.0"),
    (["cancel", "7", "out_dir=X"], "gpusched-real cancel: error: gpusched-real cancel: no job 7"),
    (["logs", "x", "out_dir=X"], "gpusched-real logs: error: gpusched-real logs: job id must be an integer"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str], argv: list[str], msg: str) -> None:
    monkeypatch.chdir(tmp_path)
    assert _run(argv, monkeypatch) == 2
    err = capsys.readouterr().err
    assert err.startswith(msg) and err.count("\n") == 1


def test_help_lists_every_service_subcommand_once_and_points_at_the_deploy_guide(real_help: str) -> None:
    from gpusched.real.service.cli import SERVICE_CMDS

    root = Path(__file__).resolve().parents[3]
    for cmd in (*SERVICE_CMDS, "profile", "replay", "compare", "pairs"):
        rows = [ln for ln in real_help.splitlines() if ln.startswith(f"  {cmd} ")]
        assert len(rows) == 1, (cmd, rows)
        assert len(rows[0].split()) >= 4, rows[0]  # the name and a description
    lines = real_help.splitlines()
    for cmd in SERVICE_CMDS:  # one line each
        i = next(i for i, ln in enumerate(lines) if ln.startswith(f"  {cmd} "))
        assert not lines[i + 1].startswith("    "), lines[i + 1]
    assert "docs/DEPLOY.md" in real_help
    assert (root / "docs" / "DEPLOY.md").is_file()
