"""``gpusched-real``: profile | replay | compare | pairs (a Hydra app; see ``gpusched-real --help``),
and the lab-cluster service: serve | submit | queue | cancel | logs | report (gpusched/real/service/cli.py).

The subcommand is the first positional argument (rewritten to ``cmd=...`` before Hydra parses the
rest) or the ``cmd=`` key. Config: conf/real/config.yaml.

Exit status: 0 when every tracked job finished; 3 (``EXIT_UNFINISHED``) when the run ended with tracked
jobs unfinished (``deadlocked`` or ``incomplete``; the unfinished job ids are printed and in
results.json); 2 for a config or comparison error (one line on stderr); 130 when ``pairs`` is
interrupted (SIGINT/SIGTERM; finished rows are kept); 1 for anything else.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from gpusched.real.backend import RealBackend, RealConfig
from gpusched.real.compare import CompareError
from gpusched.real.config import (
    DevicesConf,
    RealWorkload,
    as_dict,
    build_devices,
    load_sizes,
    load_workload,
    make_policy,
)
from gpusched.real.launcher import LocalNodeAgent
from gpusched.real.mps import MpsDaemon
from gpusched.real.pairs import CellFailed
from gpusched.real.profile import ProfileConf, ProfileResult, run_profile
from gpusched.real.replay import ReplayOutcome, Terminated, terminate_as_exception
from gpusched.real.runs import KEYS, RealRuns, devices_for, load_profile
from gpusched_env.atomic import write_json_atomic
from gpusched_env.config_util import ConfigError, from_dict

CMDS = ("profile", "replay", "compare", "pairs")
EXIT_USAGE = 2
EXIT_UNFINISHED = 3
EXIT_INTERRUPTED = 130  # pairs: SIGINT or SIGTERM
CONF_DIR = str(Path(__file__).resolve().parents[2] / "gpusched_env" / "conf" / "real")


def _devices(cfg: dict[str, Any], wl: RealWorkload, out: Path) -> tuple[Any, Any]:
    return devices_for(cfg, wl.topology.n_gpus, out)


def cmd_profile(cfg: dict[str, Any], wl: RealWorkload, scn: Any, out: Path) -> ProfileResult:
    devices, runner = _devices(cfg, wl, out)
    pconf = from_dict(ProfileConf, cfg.get("profile"), "profile")
    rconf = from_dict(RealConfig, cfg.get("real"), "real")
    mps = MpsDaemon(runner, out, getattr(devices, "driver_version", None)) if rconf.mps else None
    t = time.monotonic()
    try:
        with terminate_as_exception():
            prof = run_profile(wl.sizes, wl.topology, devices, LocalNodeAgent(runner, out), out, pconf,
                               int(cfg["seed"]), mps)
    finally:
        devices.close()
    print(f"profile of {devices.n} {devices.kind} device(s) in {time.monotonic() - t:.1f} s -> {out}")
    print(f"  base iteration time, median device: {json.dumps({k: round(v, 5) for k, v in prof.base_iter_s.items()})}")
    print(f"  process start-up: {prof.startup_s:.2f} s; slowdown per device (A B C D):")
    for d, row in enumerate(prof.factors):
        print(f"    {d}: " + " ".join(f"{x:.3f}" for x in row))
    return prof


def profile_dir(cfg: dict[str, Any]) -> ProfileResult | None:
    """The profile of ``profile_dir`` (None when unset); a folder without a readable profile is a ConfigError."""
    return load_profile(cfg.get("profile_dir"))


def cmd_replay(cfg: dict[str, Any], wl: RealWorkload, scn: Any, out: Path,
               prof: ProfileResult | None = None) -> tuple[ReplayOutcome, Any]:
    """One run of the real backend (``gpusched-bench backend=real`` runs each of its runs the same way,
    :class:`gpusched.real.runs.RealRuns`), with its own results.json, progress lines and exit status."""
    runs = RealRuns({k: cfg.get(k) for k in KEYS}, where="")
    seed = int(cfg["seed"])
    policy = make_policy(str(cfg["policy"]), scn, seed, cfg.get("agent_path"), dict(cfg.get("policy_kwargs") or {}))
    t = time.monotonic()
    res, devices = runs.replay(wl, policy, seed, out, progress=print_progress(wl), profile=prof)
    m = res.metrics
    print(f"replay {wl.name} / {policy.name} on {devices.n} {devices.kind} device(s): {res.describe()} in "
          f"{time.monotonic() - t:.1f} s -> {out / 'results.json'}")
    print(f"  avg JCT {m['avg_jct_s']:.2f} s, makespan {m['makespan_s']:.2f} s, utilisation {m['utilization']:.3f}, "
          f"energy {m['energy_kwh'] * 3.6e6:.1f} J ({'NVML' if devices.kind == 'nvidia' else 'CPU estimate'})")
    return res, devices


def cmd_compare(cfg: dict[str, Any], wl: RealWorkload, scn: Any, out: Path) -> tuple[dict[str, Any], ReplayOutcome]:
    from gpusched.real.compare import compare, energy_mismatch

    prof = profile_dir(cfg) or cmd_profile(cfg, wl, scn, out / "profile")
    res, devices = cmd_replay(cfg, wl, scn, out / "real", prof)
    name, seed = str(cfg["policy"]), int(cfg["seed"])
    agent_path, kw = cfg.get("agent_path"), dict(cfg.get("policy_kwargs") or {})
    no_energy = ("CPU power is an estimate and the simulator has no CPU power model" if devices.kind != "nvidia"
                 else energy_mismatch(devices.names(), wl.topology))
    doc: dict[str, Any] = compare(wl, prof, lambda: make_policy(name, scn, seed, agent_path, kw), res.result, seed,
                                  energy=no_energy is None, base=scn.model)
    doc["real_status"], doc["unfinished"] = res.status, list(res.unfinished)
    doc["energy_not_compared"] = no_energy  # why not (None: compared)
    doc["command"] = " ".join(["gpusched-real", *sys.argv[1:]])
    write_json_atomic(out / "compare.json", doc)
    print(f"simulator (calibrated from {prof.run_dir}) vs real, policy {name}:")
    print(f"  {'metric':<12}{'real':>10}{'sim':>10}{'error':>9}{'no start-up':>13}")
    for k, e in doc["error"].items():
        r, s, e0 = doc["real"][k], doc["sim"][k], doc["error_no_startup"][k]
        print(f"  {k:<12}{r:>10.2f}{s:>10.2f}{e * 100:>8.1f}%{e0 * 100:>12.1f}%")
    if no_energy is not None:
        print(f"  energy: {no_energy}: not compared")
    print(f"  -> {out / 'compare.json'}")
    return doc, res


def cmd_pairs(cfg: dict[str, Any], out: Path) -> list[dict[str, str]]:
    """HP inference + BE training pairs on one device (gpusched/real/pairs.py): the CSV of the measured H100 pairs."""
    from gpusched.real.pairs import load_pairs_conf, run_pairs, usable_cores

    conf = load_pairs_conf(cfg.get("pairs"))  # every input problem before anything starts
    d = dict(cfg.get("devices") or {})
    if d.get("count") is None and d.get("cores") is None:
        d["count"], d["cores"] = None, [usable_cores()]  # CPU: one device of every usable core; GPU: device 0
        if d.get("kind") == "nvidia":
            d["count"], d["cores"] = 1, None
    out.mkdir(parents=True, exist_ok=True)
    dconf = from_dict(DevicesConf, d, "devices")
    devices, runner = build_devices(dconf, str(cfg.get("commands", "auto")), out / "commands.jsonl")
    dest = Path(conf.out) if Path(conf.out).is_absolute() else out / conf.out
    try:
        with terminate_as_exception():
            return run_pairs(conf, devices, runner, out, int(cfg["seed"]), dest)
    except (KeyboardInterrupt, Terminated):
        done = max(0, len(dest.read_text().splitlines()) - 1) if dest.exists() else 0
        print(f"gpusched-real pairs: interrupted; every process stopped; {done} finished row(s) in {dest}",
              file=sys.stderr)
        sys.exit(EXIT_INTERRUPTED)
    finally:
        devices.close()


def print_progress(wl: RealWorkload, every_s: float = 10.0) -> Callable[[int, float], None]:
    """A replay's progress printer: tracked jobs finished / total and the time since the start, when
    the count changes (at most once a second) and every ``every_s`` seconds (choice: 10 s)."""
    total = sum(1 for j in wl.jobs if j.tracked)
    last = {"n": -1, "t": -math.inf}

    def show(finished: int, elapsed_s: float) -> None:
        if (finished != last["n"] and elapsed_s - last["t"] >= 1.0) or elapsed_s - last["t"] >= every_s:
            print(f"replay {wl.name}: {finished}/{total} jobs finished, {elapsed_s:.0f} s elapsed", flush=True)
            last.update(n=finished, t=elapsed_s)

    return show


def interrupted_line(cmd: str, out: Path) -> str:
    """What Ctrl-C (or SIGTERM) during profile, replay or compare prints: what was kept where."""
    res = next((p for p in (out / "results.json", out / "real" / "results.json") if p.is_file()), None)
    if res is None:
        return f"gpusched-real {cmd}: interrupted; every job process stopped; no run results written"
    try:
        jobs = json.loads(res.read_text())["real"]["jobs"]
        done = sum(j["finish_s"] is not None for j in jobs)
        return (f"gpusched-real {cmd}: interrupted; every job process stopped; {done} of {len(jobs)} jobs "
                f"finished; results of the run so far in {res}")
    except (OSError, ValueError, KeyError, TypeError):
        return f"gpusched-real {cmd}: interrupted; every job process stopped; see {res}"


def check_keys(c: dict[str, Any]) -> None:
    """Only the keys of conf/real/config.yaml (a ``+key=...`` Hydra adds is an error naming it)."""
    import yaml

    known = sorted(k for k in yaml.safe_load((Path(CONF_DIR) / "config.yaml").read_text()) if k != "hydra")
    unknown = sorted(set(c) - set(known))
    if unknown:
        raise ConfigError(f"{unknown[0]}: unknown key; gpusched-real reads only {known}")


def _main(cfg: Any) -> None:
    c = as_dict(cfg)
    cmd = str(c.get("cmd"))
    try:
        check_keys(c)
    except ConfigError as e:
        usage_error(str(e))
    if cmd not in CMDS:
        raise ConfigError(f"cmd: must be one of {CMDS}, got {cmd!r}")
    from hydra.core.hydra_config import HydraConfig

    out = Path(HydraConfig.get().runtime.output_dir)
    try:
        if cmd == "pairs":
            cmd_pairs(c, out)
            return
        wl, scn = load_workload(str(c["scenario"]), load_sizes(c.get("models")), int(c["seed"]))
        if cmd == "profile":
            cmd_profile(c, wl, scn, out)
            return
        res = cmd_replay(c, wl, scn, out)[0] if cmd == "replay" else cmd_compare(c, wl, scn, out)[1]
    except (ConfigError, CompareError) as e:
        print(f"gpusched-real {cmd}: error: {e}", file=sys.stderr)
        sys.exit(EXIT_USAGE)
    except CellFailed as e:
        print(f"gpusched-real {cmd}: {e}", file=sys.stderr)
        sys.exit(1)
    except (KeyboardInterrupt, Terminated):
        print(interrupted_line(cmd, out), file=sys.stderr, flush=True)
        sys.exit(EXIT_INTERRUPTED)
    if not res.complete:
        print(f"gpusched-real {cmd}: run {res.describe()}; see {out / 'results.json'}", file=sys.stderr)
        sys.exit(EXIT_UNFINISHED)


# -- lab-cluster service subcommands (gpusched/real/service/cli.py; plain key=value arguments, no Hydra) --
def _service_main(argv: list[str]) -> int | None:
    """Run a service subcommand, or None when ``argv[0]`` is not one."""
    from gpusched.real.service.cli import SERVICE_CMDS
    from gpusched.real.service.cli import main as service_main

    return service_main(argv) if argv and argv[0] in SERVICE_CMDS else None


def usage_error(msg: str) -> NoReturn:
    print(f"gpusched-real: error: {' '.join(msg.split())}", file=sys.stderr, flush=True)
    raise SystemExit(EXIT_USAGE)


def check_argv(args: list[str]) -> list[str]:
    """The command line with a leading subcommand rewritten to ``cmd=``; an unknown subcommand or a
    ``scenario.*`` override (the scenario is a name or a file here, not a config group) is a usage error."""
    args = list(args)
    if args and args[0] in CMDS:
        args[0] = f"cmd={args[0]}"
    elif args and "=" not in args[0] and not args[0].startswith("-"):
        from gpusched.real.service.cli import SERVICE_CMDS

        usage_error(f"unknown subcommand {args[0]!r}; use one of: {', '.join((*CMDS, *SERVICE_CMDS))} "
                    "(gpusched-real --help)")
    for a in args:
        key = a.split("=", 1)[0].lstrip("+~")
        if key.startswith("scenario."):
            usage_error(f"{key}: gpusched-real takes no scenario.* overrides; copy the scenario's YAML file "
                        "(conf/scenario/NAME.yaml), edit it and pass scenario=PATH.yaml")
    return args


def main() -> None:
    """Entry point: Hydra's own errors (a bad override, an unknown key, an out_dir it cannot create)
    are one line and exit code 2, as the app's own input errors are."""
    rc = _service_main(sys.argv[1:])
    if rc is not None:
        sys.exit(rc)
    sys.argv[1:] = check_argv(sys.argv[1:])
    import hydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    os.environ.setdefault("HYDRA_FULL_ERROR", "1")  # let exceptions reach this function
    try:
        hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="config")(_main)()
    except (HydraException, OmegaConfBaseException) as e:
        usage_error(str(e))
    except OSError as e:
        if e.filename is None:
            raise
        usage_error(f"out_dir: cannot create or write {e.filename} ({e.strerror})")


__all__ = ["main", "RealBackend"]


if __name__ == "__main__":
    main()
