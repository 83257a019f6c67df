"""synthetic_quick, the quick-start scenario, tells the classic policies apart (synthetic_small's 40 jobs
hardly queue: FIFO and SJF gave the same JCTs there to the digit)."""

from __future__ import annotations

from gpusched.bench.runner import make_policy, simulate
from gpusched_env.metrics import compute_metrics
from gpusched_env.scenario import load_scenario


def test_synthetic_quick_separates_fifo_sjf_srtf_las() -> None:
    scn = load_scenario("synthetic_quick")
    assert scn.cluster.topology().n_gpus == 8 and scn.workload.n_jobs == 120
    m = {}
    for p in ("fifo", "sjf", "srtf", "las"):
        _, res = simulate(scn, make_policy(p, scn, 0), 0)
        m[p] = compute_metrics(res)
        assert m[p]["jobs_finished"] == 120
    jct = {p: v["avg_jct_s"] for p, v in m.items()}
    # queues build (offered load 1.0): shortest-first beats arrival order, and preempting long jobs
    # for short ones (SRTF knows sizes, LAS guesses them from service) beats both
    assert jct["sjf"] < 0.9 * jct["fifo"]
    assert max(jct["srtf"], jct["las"]) < 0.5 * jct["sjf"]
    assert abs(jct["srtf"] - jct["las"]) > 1.0  # different orders, different results
    assert m["srtf"]["preemptions"] > 0 and m["las"]["preemptions"] > 0 and m["fifo"]["preemptions"] == 0
    assert m["fifo"]["avg_queue_s"] > 3600  # jobs wait hours under FIFO
