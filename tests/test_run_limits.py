"""Runs that would never end: idle round ticks are skipped, NaN/inf model values and hopeless failure
rates are rejected before any run, and the event/wall limits stop what is left with an error that
names the limit's key and the run; a running run reports its simulated time and finished jobs."""

from __future__ import annotations

import math

import pytest

from gpusched.bench.runner import Task, make_policy, run_tasks, simulate
from gpusched_env.cluster import watch as watch_mod
from gpusched_env.cluster.model import SimModel
from gpusched_env.cluster.simulator import Simulator
from gpusched_env.cluster.variability import VariabilityConfig
from gpusched_env.cluster.watch import RunLimitExceeded, RunLimits, RunProgress, Watch
from gpusched_env.config_util import ConfigError
from gpusched_env.policy import run_policy
from gpusched_env.scenario import build_workloads, load_scenario
from gpusched_env.topology import NodeGroup, Topology
from gpusched_env.types import Job

T = 0.1754  # resnet50: base iteration time on a V100 (catalogue)


def _small(**workload: object) -> dict:
    import yaml

    from gpusched_env.scenario import CONF_DIR

    raw = yaml.safe_load((CONF_DIR / "scenario" / "synthetic_small.yaml").read_text())
    raw["workload"].update(workload)
    return raw


class _Recorder:
    """LAS (round 360 s, events on) that records the time of every decision point."""

    def __init__(self) -> None:
        from gpusched.baselines import get_policy

        self.inner = get_policy("las", round_s=360.0)
        self.name, self.round_s, self.events = "las", 360.0, True
        self.times: list[float] = []

    def decide(self, view):  # noqa: ANN001, ANN201
        self.times.append(view.now)
        return self.inner.decide(view)


def test_idle_round_ticks_are_skipped_up_to_the_last_one_before_the_next_arrival() -> None:
    """Job 0 (100 iterations) runs at 0; job 1 arrives at 5,000 rounds + 10 s. The ticks while the
    cluster is empty are skipped except the last one before the arrival (1,800,000 s, the same float
    sum the ticks make); without the skip there would be 5,000 more decision points."""
    topo = Topology.build([NodeGroup(1, 1)], 1)
    late = 360.0 * 5000 + 10.0
    jobs = [Job(0, 0.0, 1, 100, "resnet50"), Job(1, late, 1, 100, "resnet50")]
    sim = Simulator(topo, jobs, SimModel(variability=VariabilityConfig(mode="none")), seed=0)
    pol = _Recorder()
    run_policy(sim, pol)
    t_run = 100 * T
    assert pol.times == pytest.approx([0.0, t_run, 360.0, 1_800_000.0, late, late + t_run])
    assert pol.times[3] == sum([360.0] * 5000)  # the tick the run would have reached one by one
    finish = {r.job.job_id: r.finish_s for r in sim.result().records}
    assert finish == pytest.approx({0: t_run, 1: late + t_run})


def test_skipping_idle_ticks_changes_no_result(monkeypatch: pytest.MonkeyPatch) -> None:
    """Round-based policies on a sparse workload (idle gaps of many rounds): every record is the
    same with and without the skip."""
    scn = load_scenario(_small(n_jobs=8, load=0.05))
    policies = ["las", "tiresias", "packed_sticky", "random_nonsticky"]

    def records() -> dict[str, list[tuple]]:
        out = {}
        for p in policies:
            _, res = simulate(scn, make_policy(p, scn, 1), 1)
            out[p] = [(r.job.job_id, r.first_start_s, r.finish_s, r.preemptions) for r in res.records]
        return out

    skips = []
    original = Simulator._idle_ticks

    def counted(self: Simulator, round_s: float) -> float:
        delay = original(self, round_s)
        skips.append(delay > round_s)
        return delay

    monkeypatch.setattr(Simulator, "_idle_ticks", counted)
    skipped = records()
    assert sum(skips) >= 10  # the workload has idle gaps
    monkeypatch.setattr(Simulator, "_idle_ticks", lambda self, round_s: round_s)
    assert records() == skipped


def test_tiny_load_with_round_ticks_ends() -> None:
    """synthetic_small at load 1e-9 (arrivals ~1e12 s apart): LAS ends (it ran for ever before),
    within a small event budget, with each job alone on the cluster: the same JCTs as FIFO."""
    scn = load_scenario(_small(load=1e-9))
    jcts = {}
    for p in ("fifo", "las"):
        _, res = simulate(scn, make_policy(p, scn, 0), 0, limits=RunLimits(max_events_per_job=50, max_wall_s=60))
        jcts[p] = [r.jct_s for r in res.tracked]
    assert jcts["las"] == jcts["fifo"]


@pytest.mark.parametrize(("model", "key"), [
    ({"sharing": {"count_slowdown": [math.nan]}}, r"scenario\.model\.sharing\.count_slowdown\[0\]: must be a finite"),
    ({"power": {"node_base_w": math.inf}}, r"scenario\.model\.power\.node_base_w: must be a finite"),
    ({"restart_cost_s": math.nan}, r"scenario\.model\.restart_cost_s: must be a finite"),
    ({"failures": {"mtbf_h": math.inf}}, r"scenario\.model\.failures\.mtbf_h: must be a finite"),
    ({"sharing": {"count_slowdown": [1.0, 0.5]}}, r"scenario\.model\.sharing\.count_slowdown\[1\]: must be a slowdown "
                                                   r"factor >= 1"),
    ({"sharing": {"count_slowdown": []}}, r"scenario\.model\.sharing\.count_slowdown: must be a non-empty list"),
])
def test_nan_and_inf_model_values_are_rejected(model: dict, key: str) -> None:
    raw = _small()
    raw["model"].update(model)
    with pytest.raises(ConfigError, match=key):
        load_scenario(raw)


def test_failure_rate_no_job_survives_is_rejected_with_the_rule() -> None:
    """mtbf 0.01 h: job 0 (1 GPU) needs 30 s restart + min(run, 1800 s checkpoint) = 1,800 s without
    a failure of its node, which fails every 36 s: e^50 attempts. 0.0724 h = 1 x 1800 s / ln(1000)."""
    raw = _small()
    raw["model"]["failures"] = {"mtbf_h": 0.01}
    with pytest.raises(ConfigError, match=r"^scenario\.model\.failures\.mtbf_h: 0\.01 h .* e\^50\.0 attempts .*"
                                          r"set mtbf_h >= 0\.0724"):
        build_workloads(load_scenario(raw), 0)
    raw["model"]["failures"] = {"mtbf_h": 0.0725}
    build_workloads(load_scenario(raw), 0)  # just inside the rule


def test_watch_stops_a_run_past_its_event_budget_naming_key_and_run() -> None:
    w = Watch(RunLimits(max_events_per_job=100, max_wall_s=None), jobs=3, label="las seed 4 on toy")
    with pytest.raises(RunLimitExceeded, match=r"^max_events_per_job: las seed 4 on toy stopped at simulated time "
                                               r"1\.2e\+06 s with 2 of 3 jobs unfinished \(512 event instants"):
        for _ in range(10_000):
            w.instant(1.2e6, 2)
    assert w.events == 2 * watch_mod.CHECK_EVERY  # 300 allowed, noticed at the next check
    # background jobs count in the budget (PAL: 160 tracked of 2,160), not in the progress
    assert Watch(RunLimits(max_events_per_job=100), jobs=1, label="x", all_jobs=3).max_events == 300


def test_wall_limit_and_progress_reports(monkeypatch: pytest.MonkeyPatch) -> None:
    scn = load_scenario(_small())
    tasks = [Task("las", 0, 0), Task("las", 1, 0)]
    with pytest.raises(RunLimitExceeded, match=r"^max_wall_s: las seed 0 on synthetic_small stopped at .*longer "
                                               r"than 1e-09 s of wall time"):
        run_tasks(scn, tasks, limits=RunLimits(max_wall_s=1e-9))
    monkeypatch.setattr(watch_mod, "REPORT_EVERY_S", 0.0)
    monkeypatch.setattr(watch_mod, "CHECK_EVERY", 1)  # report at every instant (forked workers too)
    for workers in (1, 2):
        seen: dict[Task, list[RunProgress]] = {}

        def on(t: Task, p: RunProgress, seen: dict[Task, list[RunProgress]] = seen) -> None:
            seen.setdefault(t, []).append(p)

        res = run_tasks(scn, tasks, workers=workers, limits=RunLimits(), on_progress=on)
        assert [r.task for r in res] == tasks
        for t in tasks:
            ps = seen[t]
            assert all(p.jobs == 40 and 0 <= p.finished <= 40 for p in ps)
            assert [p.sim_s for p in ps] == sorted(p.sim_s for p in ps)
            assert [p.finished for p in ps] == sorted(p.finished for p in ps)


@pytest.mark.parametrize(("args", "start"), [
    (["policies=[gandiva]", "scenario.model.sharing.count_slowdown=[nan]"],
     "scenario.model.sharing.count_slowdown[0]: must be a finite number"),
    (["scenario.model.failures.mtbf_h=0.01"], "scenario.model.failures.mtbf_h: 0.01 h leaves job 0 of scenario"),
    (["max_events_per_job=0"], "max_events_per_job: must be an integer >= 1 or null"),
    (["max_wall_s=-1"], "max_wall_s: must be a finite number of seconds > 0 or null"),
    (["policies=[las]", "max_events_per_job=1"], "max_events_per_job: las seed 0 on synthetic_small stopped at"),
])
def test_bench_cli_one_line_errors(args: list[str], start: str, tmp_path, capsys, monkeypatch) -> None:
    from tests.test_cli_errors import BASE, one_line_error, run_main

    code, _, err = run_main([*BASE, f"out_dir={tmp_path / 'o'}", *args], capsys, monkeypatch)
    assert one_line_error(code, err).startswith(f"gpusched-bench: error: {start}")
    assert not (tmp_path / "o" / "results.json").exists()
