"""Checkpoint selection on the training workloads: which of a run's policies becomes ``model.zip``.

PPO can drift during training (a non-clairvoyant policy that learns to starve its largest jobs
has a fine average JCT for a while and a tail of days). With ``select.enabled`` the trainer plays
the policy at the start of RL (the warm start, if any), every ``select.freq`` env steps and at the
end, deterministically, on validation episodes of the *training* workloads (``select.workloads``,
``select.run_seeds``; never the held-out ones), and keeps the best by this rule (a documented
choice, not fitted):

1. a candidate is *eligible* when it finished every tracked job of every episode and each bounded
   metric (average JCT bounded by ``select.avg_bound``, p99 JCT by ``select.p99_bound``, average
   runtime by ``select.run_bound``, each a heuristic or none; means over episodes, as
   ``gpusched-bench`` aggregates) is at most ``(1 + select.slack)`` times that heuristic's on the
   same episodes (the scenario's parameters);
2. the eligible candidate with the lowest ``select.objective`` (a JCT figure or ``energy_kwh``) wins; with none eligible, the one
   with the most jobs finished, then the smallest worst ratio of a bounded metric to its bound.
   Ties go to the earliest.

Evaluation time is not charged to ``max_train_minutes`` (that caps RL). The history goes to
``selection.json`` in the run folder; a resumed run selects among the candidates scored since the
resume.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gpusched_env.metrics import compute_metrics

METRICS = ("avg_jct_s", "p99_jct_s", "avg_run_s", "energy_kwh")  # what a rule may bound or minimise
BOUND_KEYS = {"avg_bound": "avg_jct_s", "p99_bound": "p99_jct_s", "run_bound": "avg_run_s"}  # select.* -> metric


@dataclass(frozen=True)
class Score:
    """One policy's figures on the validation episodes (means over episodes)."""

    steps: int
    avg_jct_s: float
    p99_jct_s: float
    avg_run_s: float  # finish - first start (EaCO's "average runtime", bench.runner.with_run_time)
    energy_kwh: float  # the whole cluster's energy over the run
    finished: int  # tracked jobs finished, summed over episodes
    jobs: int  # tracked jobs, summed over episodes
    eval_s: float = 0.0

    @property
    def all_finished(self) -> bool:
        return self.finished == self.jobs


def score_runs(steps: int, results: list[Any], eval_s: float = 0.0) -> Score:
    """A :class:`Score` from the episodes' ``RunResult`` objects (each metric as ``gpusched-bench``
    computes it, averaged over episodes)."""
    from bench.runner import with_run_time

    ms = [with_run_time(compute_metrics(r), r) for r in results]
    mean = {m: float(np.mean([x.get(m, float("nan")) for x in ms])) for m in METRICS}
    return Score(steps=steps, **mean,
                 finished=int(sum(m["jobs_finished"] for m in ms)),
                 jobs=int(sum(len(r.tracked) for r in results)), eval_s=round(eval_s, 1))


@dataclass(frozen=True)
class Rule:
    """The selection rule: upper bounds per metric (already times ``1 + slack``) and the objective."""

    bounds: dict[str, float]
    objective: str = "avg_jct_s"

    def __post_init__(self) -> None:
        for m in (*self.bounds, self.objective):
            if m not in METRICS:
                raise ValueError(f"unknown metric {m!r}; a rule bounds or minimises one of {METRICS}")

    def eligible(self, s: Score) -> bool:
        return s.all_finished and all(getattr(s, m) <= b for m, b in self.bounds.items())

    def worst_ratio(self, s: Score) -> float:
        return max((getattr(s, m) / b for m, b in self.bounds.items()), default=0.0)

    def best(self, scores: list[Score]) -> Score:
        """The selected candidate (see the module docstring); the earliest on ties."""
        if not scores:
            raise ValueError("no candidates to select from")
        ok = [s for s in scores if self.eligible(s)]
        if ok:
            return min(ok, key=lambda s: float(getattr(s, self.objective)))
        return min(scores, key=lambda s: (-s.finished, self.worst_ratio(s)))


def play(env: Any, act: Callable[[np.ndarray, np.ndarray], int], episodes: list[tuple[int, int]]) -> list[Any]:
    """``act(obs, mask)`` played through ``env`` (a gym env) on each (workload, run_seed); the results."""
    out = []
    for workload, run_seed in episodes:
        obs, info = env.reset(options={"workload": workload, "run_seed": run_seed})
        over = False
        while not over:
            obs, _, term, trunc, info = env.step(act(obs, info["action_mask"]))
            over = term or trunc
        out.append(env.unwrapped.result())
    return out


def heuristic_results(scn: Any, name: str, episodes: list[tuple[int, int]]) -> list[Any]:
    """Heuristic ``name`` (the scenario's parameters) on each (workload, run_seed), exactly as
    ``gpusched-bench`` runs it; the results."""
    from bench.runner import make_policy, simulate

    return [simulate(scn, make_policy(name, scn, s, workload=w), s, w)[1] for w, s in episodes]


def _atomic_save(model: Any, path: Path) -> None:
    tmp = path.with_name(path.stem + ".tmp.zip")
    model.save(str(tmp))
    os.replace(tmp, path)


def selection_callback(env: Any, episodes: list[tuple[int, int]], rule: Rule, refs: dict[str, Score], freq: int,
                       masked: bool, out: Path) -> Any:
    """An SB3 callback that scores the policy at the start, every ``freq`` calls of ``_on_step``
    (one call = one step of every training env) and at the end; the best so far is saved to
    ``out/selected.zip`` and the history to ``out/selection.json`` after each score."""
    from stable_baselines3.common.callbacks import BaseCallback

    from agents.adapter import predict

    class Selection(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.scores: list[Score] = []
            self.chosen: Score | None = None
            self.spent_s = 0.0

        def _score(self) -> None:
            t0 = time.perf_counter()
            results = play(env, lambda obs, mask: predict(self.model, obs, mask, masked), episodes)
            dt = time.perf_counter() - t0
            self.spent_s += dt
            s = score_runs(int(self.model.num_timesteps), results, dt)
            self.scores.append(s)
            chosen = rule.best(self.scores)
            if chosen is s:
                _atomic_save(self.model, out / "selected.zip")
            self.chosen = chosen
            write_history(out / "selection.json", self.scores, chosen, rule, refs, episodes)

        def _on_training_start(self) -> None:
            self._score()

        def _on_step(self) -> bool:
            if self.n_calls % freq == 0:
                self._score()
            return True

        def _on_training_end(self) -> None:
            if not self.scores or self.scores[-1].steps != int(self.model.num_timesteps):
                self._score()

    return Selection()


def write_history(path: Path, scores: list[Score], chosen: Score, rule: Rule, refs: dict[str, Score],
                  episodes: list[tuple[int, int]]) -> None:
    """``selection.json`` (atomically): the rule, the references' scores, every candidate, the choice."""
    from bench.report import write_json_atomic

    write_json_atomic(path, {"objective": rule.objective, "bounds": rule.bounds, "episodes": [list(e) for e in episodes],
                             "references": {name: asdict(s) for name, s in refs.items()}, "chosen_steps": chosen.steps,
                             "candidates": [dict(asdict(s), eligible=rule.eligible(s)) for s in scores]})
