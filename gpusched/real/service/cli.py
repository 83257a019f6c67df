"""The service subcommands of ``gpusched-real``: serve, submit, queue, cancel, logs, report.

``gpusched-real CMD [FILE|ID] key=value ...``; every one takes ``out_dir=DIR`` (the service folder).
Exit status: 0 ok, 2 bad input (one line on stderr naming the file or key), 1 anything else.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path
from typing import Any

from gpusched_env.config_util import ConfigError

SERVICE_CMDS = ("serve", "submit", "queue", "cancel", "logs", "report")
EXIT_USAGE = 2


def parse_args(cmd: str, args: list[str]) -> tuple[list[str], dict[str, str]]:
    pos, kv = [], {}
    for a in args:
        if "=" in a and not a.startswith(("/", ".")):
            k, v = a.split("=", 1)
            kv[k.lstrip("+")] = v
        else:
            pos.append(a)
    if "out_dir" not in kv:
        raise ConfigError(f"out_dir: gpusched-real {cmd} needs out_dir=DIR (the service folder)")
    return pos, kv


def _value(field: dataclasses.Field[Any], text: str) -> Any:
    t = str(field.type)
    if text.lower() in ("null", "none", "~") and "None" in t:
        return None
    try:
        if t.startswith("bool"):
            if text.lower() not in ("true", "false"):
                raise ValueError(text)
            return text.lower() == "true"
        if t.startswith("int"):
            return int(text)
        if t.startswith("float"):
            return float(text)
    except ValueError:
        raise ConfigError(f"{field.name}: expected {t.split(' ')[0]}, got {text!r}") from None
    return text


def serve_config(kv: dict[str, str]) -> Any:
    from gpusched.real.service.serve import ServeConfig

    fields = {f.name: f for f in dataclasses.fields(ServeConfig)}
    for k in kv:
        if k not in fields:
            raise ConfigError(f"{k}: unknown key for serve; known: {', '.join(fields)}")
    return ServeConfig(**{k: _value(fields[k], v) for k, v in kv.items()})


def _one(pos: list[str], cmd: str, what: str) -> str:
    if len(pos) != 1:
        raise ConfigError(f"gpusched-real {cmd}: expected one {what}, got {pos or 'none'}")
    return pos[0]


def _job_id(pos: list[str], cmd: str) -> int:
    text = _one(pos, cmd, "job id")
    if not text.isdigit():
        raise ConfigError(f"gpusched-real {cmd}: job id must be an integer, got {text!r}")
    return int(text)


def _dur(s: float | None) -> str:
    if s is None:
        return "-"
    return f"{s:.0f}s" if s < 120 else f"{s / 60:.1f}m" if s < 7200 else f"{s / 3600:.1f}h"


def show_queue(out_dir: str) -> None:
    from rich.console import Console
    from rich.table import Table

    from gpusched.real.service.queue import JobQueue

    q = JobQueue(out_dir)
    rows, now = q.jobs(), time.time()
    q.close()
    t = Table(title=f"gpusched queue {out_dir}")
    for c in ("id", "name", "state", "GPUs", "node", "waited", "ran", "restarts"):
        t.add_column(c, justify="right" if c in ("id", "GPUs", "restarts") else "left")
    for r in rows:
        start = r.first_start_t if r.first_start_t is not None else (now if r.state == "pending" else r.finish_t)
        ran = r.ran_s + (now - r.started_t if r.state == "running" and r.started_t else 0.0)
        nodes = ",".join(p["node"] for p in r.placement) or "-"
        t.add_row(str(r.id), r.name or "-", r.state, str(r.spec.gpus), nodes,
                  _dur(None if start is None else start - r.submit_t), _dur(ran), str(r.restarts))
    Console(width=120).print(t)


def show_logs(out_dir: str, job_id: int) -> int:
    from gpusched.real.service.queue import JobQueue

    q = JobQueue(out_dir)
    row = q.get(job_id)
    hist = q.history(job_id)
    q.close()
    if row is None:
        raise ConfigError(f"gpusched-real logs: no job {job_id} in {out_dir}")
    for _, t, state, detail in hist:
        print(f"# {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(t))} {state}: {detail}")
    logs = sorted(Path(out_dir).glob(f"nodes/*/jobs/{job_id}/log"))
    for p in logs:
        if len(logs) > 1:
            print(f"# --- {p.parent.parent.parent.name}")
        sys.stdout.write(p.read_text(errors="replace"))
    if not logs:
        print(f"# no log here: it is on node(s) {', '.join(x['node'] for x in row.placement) or '?'}"
              + (f"\n{row.error}" if row.error else ""))
    return 0


# the report table: (metric key, label, format); every other key is in results.json
REPORT_ROWS = (
    ("jobs_finished", "jobs finished", "{:.0f}"), ("jobs_failed", "jobs failed", "{:.0f}"),
    ("jobs_cancelled", "jobs cancelled", "{:.0f}"), ("jobs_running", "jobs running", "{:.0f}"),
    ("jobs_pending", "jobs pending", "{:.0f}"), ("avg_jct_s", "avg JCT (s)", "{:.1f}"),
    ("p99_jct_s", "p99 JCT (s)", "{:.1f}"), ("avg_queue_s", "avg queueing (s)", "{:.1f}"),
    ("makespan_s", "makespan (s)", "{:.1f}"), ("utilization", "utilisation", "{:.3f}"),
    ("preemptions", "preemptions", "{:.0f}"), ("restarts", "restarts", "{:.0f}"),
    ("migrations", "migrations", "{:.0f}"),
)
# with NVML samples (NVIDIA nodes) only
NVML_ROWS = (("energy_kwh", "GPU energy (kWh, NVML)", "{:.4f}"), ("nvml_utilization", "utilisation (NVML)", "{:.3f}"))


# the shadow comparison table: Slurm's run next to the policy's replay of the same jobs
SHADOW_ROWS = (
    ("jobs_finished", "jobs compared", "{:.0f}"), ("avg_jct_s", "avg JCT (s)", "{:.1f}"),
    ("p99_jct_s", "p99 JCT (s)", "{:.1f}"), ("avg_queue_s", "avg queueing (s)", "{:.1f}"),
    ("makespan_s", "makespan (s)", "{:.1f}"), ("utilization", "utilisation", "{:.3f}"),
    ("preemptions", "preemptions", "{:.0f}"),
)


def show_slurm_shadow(out_dir: str, doc: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    (slurm, slurm_m), (policy, policy_m) = ((k, v["metrics"]) for k, v in doc["policies"].items())
    print(f"Slurm vs {policy} (replayed in the simulator) on the same {len(doc['jobs'])} jobs")
    t = Table()
    t.add_column("metric")
    t.add_column("slurm", justify="right")
    t.add_column(policy, justify="right")
    for key, label, fmt in SHADOW_ROWS:
        t.add_row(label, *(fmt.format(m[key]) if key in m else "-" for m in (slurm_m, policy_m)))
    Console(width=120).print(t)
    print(f"jobs: {' '.join(str(j) for j in doc['jobs']) or 'none finished yet'}")
    print(f"-> {Path(out_dir) / 'shadow_results.json'}")


def show_report(out_dir: str) -> None:
    """Write results.json and print its main metrics as a table (shadow mode on Slurm: the
    comparison with Slurm, shadow_results.json)."""
    from rich.console import Console
    from rich.table import Table

    from gpusched.real.service.report import report, slurm_shadow_report

    shadow = slurm_shadow_report(out_dir)
    if shadow is not None:
        show_slurm_shadow(out_dir, shadow)
        return

    policy, entry = next(iter(report(out_dir)["policies"].items()))
    t = Table(title=f"policy {policy}")
    t.add_column("metric")
    t.add_column("value", justify="right")
    m = entry["metrics"]
    for key, label, fmt in REPORT_ROWS + (NVML_ROWS if "nvml_samples" in m else ()):
        t.add_row(label, fmt.format(m[key]))
    Console(width=120).print(t)
    print(f"-> {Path(out_dir) / 'results.json'}")


def main(argv: list[str]) -> int:
    """Run one service subcommand (``argv[0]`` in :data:`SERVICE_CMDS`); returns the exit status."""
    cmd = argv[0]
    try:
        pos, kv = parse_args(cmd, argv[1:])
        out = kv["out_dir"]
        if cmd == "serve":
            from gpusched.real.service.serve import Service

            if pos:
                raise ConfigError(f"gpusched-real serve: unexpected argument {pos[0]!r} (keys are key=value)")
            Service(serve_config(kv)).run()
        elif cmd == "submit":
            from gpusched.real.service.queue import JobQueue
            from gpusched.real.service.spec import SpecError, load_spec

            try:
                spec = load_spec(_one(pos, cmd, "job spec file"))
            except SpecError as e:
                raise ConfigError(str(e)) from None
            q = JobQueue(out)
            print(q.submit(spec))
            q.close()
        elif cmd == "queue":
            show_queue(out)
        elif cmd == "cancel":
            from gpusched.real.service.queue import JobQueue

            q = JobQueue(out)
            job = _job_id(pos, cmd)
            what = q.cancel(job)
            q.close()
            if what == "unknown":
                raise ConfigError(f"gpusched-real cancel: no job {job} in {out}")
            print(f"job {job}: {what}")
        elif cmd == "logs":
            return show_logs(out, _job_id(pos, cmd))
        elif cmd == "report":
            show_report(out)
    except ConfigError as e:
        print(f"gpusched-real {cmd}: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    return 0
