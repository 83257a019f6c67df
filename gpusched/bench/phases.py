"""Where a simulation's time goes: ``python -m gpusched.bench.phases SCENARIO POLICY [key=value ...]``.

Runs one policy on one scenario (seed 0, workload 0) with :func:`gpusched_env.policy.run_policy`'s
loop, timing its four phases separately:

- ``events``: ``Simulator.advance`` (the event loop: arrivals, completions, stragglers, round ticks,
  with the speed and power updates they cause);
- ``view``: ``Simulator.view`` (building the policy's read-only view);
- ``policy``: ``Policy.decide``;
- ``allocation``: ``Simulator.apply`` (validating and applying decisions, speed and power updates of
  the jobs they move).

Prints decision points, seconds per phase and microseconds per decision point. ``key=value``
arguments override scenario keys as ``gpusched-bench`` does, e.g. ``workload.limit=5000``.
``--profile FILE`` also writes a cProfile of the run.
"""

from __future__ import annotations

import argparse
import cProfile
import time
from dataclasses import dataclass, field
from typing import Any

import yaml

from gpusched_env.policy import Backend, Policy, quiet_gc

PHASES = ("policy", "view", "allocation", "events")


@dataclass
class PhaseTimes:
    """Seconds spent in each phase of a run and the decision points it stopped at."""

    rounds: int = 0
    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))

    @property
    def total(self) -> float:
        return sum(self.seconds.values())

    def row(self) -> str:
        per = {k: 1e6 * v / max(1, self.rounds) for k, v in self.seconds.items()}
        parts = " | ".join(f"{k} {self.seconds[k]:.2f} s ({per[k]:.0f} us)" for k in PHASES)
        return f"{self.rounds} decision points; {parts}; total {self.total:.2f} s"


def run_timed(backend: Backend, policy: Policy) -> PhaseTimes:
    """:func:`gpusched_env.policy.run_policy` with each phase timed (under the same :func:`quiet_gc`)."""
    with quiet_gc():
        return _run_timed(backend, policy)


def _run_timed(backend: Backend, policy: Policy) -> PhaseTimes:
    clock = time.process_time  # CPU seconds: steadier than wall time on a shared machine
    out = PhaseTimes()
    s = out.seconds
    backend.start(policy.round_s, policy.events)
    while True:
        t0 = clock()
        more = backend.advance()
        t1 = clock()
        s["events"] += t1 - t0
        if not more:
            return out
        out.rounds += 1
        view = backend.view()
        t2 = clock()
        decisions = policy.decide(view)
        t3 = clock()
        s["view"] += t2 - t1
        s["policy"] += t3 - t2
        if decisions:
            backend.apply(decisions)
            s["allocation"] += clock() - t3


def _scenario_cfg(name: str, overrides: list[str]) -> dict[str, Any]:
    """``conf/scenario/NAME.yaml`` with dotted ``key=value`` overrides (YAML values) applied."""
    from gpusched_env.scenario_file import read_scenario_file

    cfg = read_scenario_file(name)
    for kv in overrides:
        key, _, value = kv.partition("=")
        *path, last = key.split(".")
        node = cfg
        for k in path:
            node = node.setdefault(k, {})
        node[last] = yaml.safe_load(value)
    return cfg


def main(argv: list[str] | None = None) -> int:
    from gpusched.agents.policies import make_policy
    from gpusched_env.cluster.build import build_simulator
    from gpusched_env.scenario import load_scenario

    ap = argparse.ArgumentParser(prog="python -m gpusched.bench.phases", description=__doc__.split("\n")[0])
    ap.add_argument("scenario")
    ap.add_argument("policy")
    ap.add_argument("overrides", nargs="*", help="scenario keys, e.g. workload.limit=5000")
    ap.add_argument("--profile", help="write a cProfile of the run to this file")
    args = ap.parse_args(argv)
    scn = load_scenario(_scenario_cfg(args.scenario, args.overrides))
    t0 = time.perf_counter()
    _, jobs, sim = build_simulator(scn, 0)
    policy = make_policy(args.policy, scn, 0)
    load = time.perf_counter() - t0
    prof = cProfile.Profile() if args.profile else None
    if prof is not None:
        prof.enable()
    times = run_timed(sim, policy)
    if prof is not None:
        prof.disable()
        prof.dump_stats(args.profile)
    print(f"{scn.name} {args.policy}: {len(jobs)} jobs (load {load:.2f} s); {times.row()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
