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
2. the eligible candidate with the lowest ``select.objective`` wins: a JCT figure, ``energy_kwh``, or
   ``worst_ratio`` (the largest ratio of a bounded metric to its bound: the candidate with the widest
   margin on its tightest bound); with none eligible, the one with the most jobs finished, then the
   smallest worst ratio. Ties go to the earliest.

With a training mix (``mix=NAME``, :mod:`gpusched.agents.scenario_mix`) the validation episodes are
those of every *training* variant (its workloads x ``select.run_seeds``; never a held-out variant):
a candidate's score and each reference's are means over all of them (every episode weighing the
same, as above), and ``selection.json`` adds ``variants``: each variant's episodes, the references'
and every candidate's scores on that variant alone.

Evaluation time is not charged to ``max_train_minutes`` (that caps RL). The history goes to
``selection.json`` in the run folder; a resumed run selects among the candidates scored since the
resume.

Another objective over the same scores needs no training and no scoring, where every candidate's
policy was kept (``checkpoint_freq`` equal to ``select.freq``):

    python -m gpusched.agents.selection runs/x --objective worst_ratio --out runs/x/margin_model.zip

and across validation sets, with one scored later by :mod:`gpusched.studies.rescore` (``--also NAME``:
:func:`select_across`), or on such a set alone (``--only NAME``).

A validation episode cut at ``select.max_steps`` counts its unfinished jobs as unfinished, so a
policy that was only slow in steps (Cluster-v1: a clone of SRTF took 1,041 to 20,342 steps on
1,000-job ``synthetic_philly`` windows) is made ineligible: ``Score.truncated`` counts the cut
episodes, the trainer warns, and ``format_history`` marks them.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gpusched_env.atomic import atomic_path
from gpusched_env.metrics import compute_metrics

METRICS = ("avg_jct_s", "p99_jct_s", "avg_run_s", "energy_kwh")  # what a rule may bound or minimise
OBJECTIVES = (*METRICS, "worst_ratio")  # what a rule may minimise
BOUND_KEYS = {"avg_bound": "avg_jct_s", "p99_bound": "p99_jct_s", "run_bound": "avg_run_s"}  # select.* -> metric
TRUNCATED = "truncated"  # RunResult.extra key: the validation episode was cut at the env's max_steps


@dataclass(frozen=True)
class Score:
    """One policy's figures on the validation episodes (means over episodes)."""

    steps: int
    avg_jct_s: float
    p99_jct_s: float
    avg_run_s: float  # finish - first start (EaCO's "average runtime", gpusched.bench.runner.with_run_time)
    energy_kwh: float  # the whole cluster's energy over the run
    finished: int  # tracked jobs finished, summed over episodes
    jobs: int  # tracked jobs, summed over episodes
    eval_s: float = 0.0
    truncated: int = 0  # episodes cut at the env's max_steps (their jobs left unfinished count as unfinished)

    @property
    def all_finished(self) -> bool:
        return self.finished == self.jobs


def score_runs(steps: int, results: list[Any], eval_s: float = 0.0) -> Score:
    """A :class:`Score` from the episodes' ``RunResult`` objects (each metric as ``gpusched-bench``
    computes it, averaged over episodes)."""
    from gpusched_env.cluster.build import with_run_time

    ms = [with_run_time(compute_metrics(r), r) for r in results]
    mean = {m: float(np.mean([x.get(m, float("nan")) for x in ms])) for m in METRICS}
    return Score(steps=steps, **mean,
                 finished=int(sum(m["jobs_finished"] for m in ms)),
                 jobs=int(sum(len(r.tracked) for r in results)), eval_s=round(eval_s, 1),
                 truncated=sum(TRUNCATED in r.extra for r in results))


@dataclass(frozen=True)
class Rule:
    """The selection rule: upper bounds per metric (already times ``1 + slack``) and the objective."""

    bounds: dict[str, float]
    objective: str = "avg_jct_s"

    def __post_init__(self) -> None:
        for m in self.bounds:
            if m not in METRICS:
                raise ValueError(f"unknown metric {m!r}; a rule bounds one of {METRICS}")
        if self.objective not in OBJECTIVES:
            raise ValueError(f"unknown objective {self.objective!r}; a rule minimises one of {OBJECTIVES}")
        if self.objective == "worst_ratio" and not self.bounds:
            raise ValueError("objective worst_ratio needs at least one bound")

    def eligible(self, s: Score) -> bool:
        return s.all_finished and all(getattr(s, m) <= b for m, b in self.bounds.items())

    def worst_ratio(self, s: Score) -> float:
        return max((getattr(s, m) / b for m, b in self.bounds.items()), default=0.0)

    def objective_of(self, s: Score) -> float:
        return self.worst_ratio(s) if self.objective == "worst_ratio" else float(getattr(s, self.objective))

    def best(self, scores: list[Score]) -> Score:
        """The selected candidate (see the module docstring); the earliest on ties."""
        if not scores:
            raise ValueError("no candidates to select from")
        ok = [s for s in scores if self.eligible(s)]
        if ok:
            return min(ok, key=self.objective_of)
        return min(scores, key=lambda s: (-s.finished, self.worst_ratio(s)))


def play(env: Any, act: Callable[[np.ndarray, np.ndarray], int], episodes: list[tuple[int, int]]) -> list[Any]:
    """``act(obs, mask)`` played through ``env`` (a gym env) on each (workload, run_seed); the results.
    A result whose episode was cut at the env's ``max_steps`` carries ``extra[TRUNCATED] = 1``."""
    out = []
    for workload, run_seed in episodes:
        obs, info = env.reset(options={"workload": workload, "run_seed": run_seed})
        term = trunc = False
        while not (term or trunc):
            obs, _, term, trunc, info = env.step(act(obs, info["action_mask"]))
        result = env.unwrapped.result()
        if trunc and not term:
            result.extra[TRUNCATED] = 1.0
        out.append(result)
    return out


def heuristic_results(scn: Any, name: str, episodes: list[tuple[int, int]]) -> list[Any]:
    """Heuristic ``name`` (the scenario's parameters) on each (workload, run_seed), exactly as
    ``gpusched-bench`` runs it; the results."""
    from gpusched.agents.policies import make_policy
    from gpusched_env.cluster.build import simulate

    return [simulate(scn, make_policy(name, scn, s, workload=w), s, w)[1] for w, s in episodes]


def _atomic_save(model: Any, path: Path) -> None:
    with atomic_path(path, suffix=".zip") as tmp:
        model.save(str(tmp))


@dataclass(frozen=True)
class VariantSet:
    """The validation episodes of one training variant of a mix: its name, env, (workload, run_seed)
    episodes and the references' scores on them."""

    name: str
    env: Any
    episodes: list[tuple[int, int]]
    refs: dict[str, Score]


def selection_callback(env: Any, episodes: list[tuple[int, int]], rule: Rule, refs: dict[str, Score], freq: int,
                       masked: bool, out: Path, variants: list[VariantSet] | None = None) -> Any:
    """An SB3 callback that scores the policy at the start, every ``freq`` calls of ``_on_step``
    (one call = one step of every training env) and at the end; the best so far is saved to
    ``out/selected.zip`` and the history to ``out/selection.json`` after each score. With ``variants``
    (a mix) it plays every variant's episodes instead of ``episodes`` through ``env`` and scores them
    together (module docstring)."""
    from stable_baselines3.common.callbacks import BaseCallback

    from gpusched.agents.adapter import predict

    class Selection(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.scores: list[Score] = []
            self.by_variant: list[dict[str, Score]] = []
            self.chosen: Score | None = None
            self.spent_s = 0.0

        def _score(self) -> None:
            t0 = time.perf_counter()
            act = lambda obs, mask: predict(self.model, obs, mask, masked)  # noqa: E731
            per = [(v, play(v.env, act, v.episodes)) for v in variants] if variants else []
            results = [r for _, rs in per for r in rs] if variants else play(env, act, episodes)
            dt = time.perf_counter() - t0
            self.spent_s += dt
            s = score_runs(int(self.model.num_timesteps), results, dt)
            if per:
                self.by_variant.append({v.name: score_runs(s.steps, rs) for v, rs in per})
            if s.truncated:
                cap = (variants[0].env if variants else env).unwrapped.max_steps
                print(f"selection: {s.truncated} of {len(results)} validation episodes cut at select.max_steps="
                      f"{cap} at {s.steps} steps (their unfinished jobs make the candidate "
                      "ineligible; raise select.max_steps if the policy was not stuck)", file=sys.stderr)
            self.scores.append(s)
            chosen = rule.best(self.scores)
            if chosen is s:
                _atomic_save(self.model, out / "selected.zip")
            self.chosen = chosen
            if variants:
                write_history(out / "selection.json", self.scores, chosen, rule, refs,
                              [(v.name, w, rs) for v in variants for w, rs in v.episodes],
                              (variants, self.by_variant))
            else:
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
                  episodes: list[tuple[Any, ...]],
                  variants: tuple[list[VariantSet], list[dict[str, Score]]] | None = None) -> None:
    """``selection.json`` (atomically): the rule, the references' scores, every candidate, the choice;
    with ``variants`` (a mix's sets and each candidate's scores per variant) also ``variants``, and
    ``episodes`` as (variant, workload, run_seed)."""
    from gpusched_env.atomic import write_json_atomic

    doc: dict[str, Any] = {"objective": rule.objective, "bounds": rule.bounds, "episodes": [list(e) for e in episodes],
                           "references": {name: asdict(s) for name, s in refs.items()}, "chosen_steps": chosen.steps,
                           "candidates": [dict(asdict(s), eligible=rule.eligible(s)) for s in scores]}
    if variants is not None:
        sets, by_variant = variants
        doc["variants"] = {v.name: {"episodes": [list(e) for e in v.episodes],
                                    "references": {h: asdict(r) for h, r in v.refs.items()},
                                    "candidates": [asdict(b[v.name]) for b in by_variant]} for v in sets}
    write_json_atomic(path, doc)


# ------------------------------------------------------------------------------ re-selection (CLI)
def history_path(run_dir: Path, name: str | None = None) -> Path:
    """``selection.json`` (the training's validation set) or ``selection_NAME.json`` (:mod:`gpusched.studies.rescore`)."""
    return run_dir / ("selection.json" if name is None else f"selection_{name}.json")


def load_history(run_dir: Path, name: str | None = None) -> tuple[dict[str, float], list[Score]]:
    """The bounds and candidates' scores of a validation set of ``run_dir`` (:func:`history_path`);
    ConfigError naming the file."""
    from gpusched_env.config_util import ConfigError

    path = history_path(run_dir, name)
    try:
        doc = json.loads(path.read_text())
        bounds = {str(m): float(b) for m, b in doc["bounds"].items()}
        fields = set(Score.__dataclass_fields__)
        scores = [Score(**{k: v for k, v in c.items() if k in fields}) for c in doc["candidates"]]
    except OSError as e:
        hint = ("a run trained with select.enabled=true writes it" if name is None else
                f"python -m gpusched.studies.rescore {run_dir} --name {name} writes it")
        raise ConfigError(f"{path}: cannot read it ({e.strerror}); {hint}") from None
    except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as e:
        raise ConfigError(f"{path}: not a selection history ({type(e).__name__}: {e})") from None
    if not scores:
        raise ConfigError(f"{path}: no candidates")
    return bounds, scores


def candidate_file(run_dir: Path, steps: int) -> Path:
    """The saved policy of the candidate scored at ``steps``: the warm start (``bc_model.zip``) at 0,
    the last policy (``last_model.zip``) at its step count, else ``checkpoints/model_STEPS_steps.zip``."""
    from gpusched.agents.adapter import read_meta
    from gpusched_env.config_util import ConfigError

    for name in ("bc_model.zip", "last_model.zip"):
        f = run_dir / name
        if f.is_file() and int(read_meta(f).get("num_timesteps", -1)) == steps:
            return f
    f = run_dir / "checkpoints" / f"model_{steps}_steps.zip"
    if not f.is_file():
        raise ConfigError(f"{f}: no saved policy for the candidate at {steps} steps (train with checkpoint_freq "
                          "equal to select.freq to keep every candidate)")
    return f


def select_across(histories: list[tuple[dict[str, float], list[Score]]], objective: str) -> int:
    """The step count of the candidate selected over several validation sets of one run, each with its
    own bounds: eligible = eligible in every set; ``worst_ratio`` = the largest over the sets; a metric
    objective = its mean over the sets weighted by their tracked jobs. With none eligible: the most
    jobs finished in all, then the smallest worst ratio; ties to the earliest. One set: :meth:`Rule.best`."""
    rules = [Rule(bounds, objective) for bounds, _ in histories]
    sets = [{s.steps: s for s in scores} for _, scores in histories]
    steps = [s.steps for s in histories[0][1]]
    missing = sorted({st for m in sets for st in m} - {st for st in steps if all(st in m for m in sets)})
    if missing:
        raise ValueError(f"the validation sets score different candidates (steps {missing} not in all of them)")

    def worst(st: int) -> float:
        return max(r.worst_ratio(m[st]) for r, m in zip(rules, sets, strict=True))

    def value(st: int) -> float:
        if objective == "worst_ratio":
            return worst(st)
        return sum(getattr(m[st], objective) * m[st].jobs for m in sets) / sum(m[st].jobs for m in sets)

    ok = [st for st in steps if all(r.eligible(m[st]) for r, m in zip(rules, sets, strict=True))]
    if ok:
        return min(ok, key=value)
    return min(steps, key=lambda st: (-sum(m[st].finished for m in sets), worst(st)))


def reselect(run_dir: Path, objective: str, out: Path) -> Score:
    """Select again among ``run_dir``'s scored candidates with another objective (same bounds, same
    scores: nothing is played); the chosen policy is written to ``out`` (:func:`write_candidate`)."""
    bounds, scores = load_history(run_dir)
    chosen = Rule(bounds, objective).best(scores)
    write_candidate(run_dir, chosen, out)
    return chosen


def write_candidate(run_dir: Path, chosen: Score, out: Path) -> None:
    """The policy of ``run_dir``'s candidate ``chosen``, written to ``out`` (atomically) with
    ``model.zip``'s env arguments and its own step count, ready for ``agent_path``."""
    import shutil
    import zipfile

    from gpusched.agents.adapter import META_MEMBER, read_meta, write_meta

    src = candidate_file(run_dir, chosen.steps)
    meta = dict(read_meta(run_dir / "model.zip"), num_timesteps=chosen.steps)
    with atomic_path(out, suffix=".zip") as tmp:
        with zipfile.ZipFile(src) as zin, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zout:
            for item in zin.infolist():
                if item.filename != META_MEMBER:
                    with zin.open(item) as fin, zout.open(item, "w") as fout:
                        shutil.copyfileobj(fin, fout)
        write_meta(tmp, meta)


def format_history(bounds: dict[str, float], scores: list[Score], rule: Rule, chosen: Score) -> str:
    """One line per candidate: steps, the bounded and objective figures, ratios to the bounds, eligibility."""
    cols = [m for m in METRICS if m in bounds or m == rule.objective]
    head = f"{'steps':>8} " + " ".join(f"{m:>11} {'/bound':>7}" if m in bounds else f"{m:>11}" for m in cols)
    lines = ["bounds: " + ", ".join(f"{m} <= {b:.6g}" for m, b in bounds.items()) + f"; objective {rule.objective}",
             head + f" {'worst':>7} {'finished':>9}  eligible"]
    for s in scores:
        figs = " ".join(f"{getattr(s, m):>11.6g} {getattr(s, m) / bounds[m]:>7.3f}" if m in bounds
                        else f"{getattr(s, m):>11.6g}" for m in cols)
        mark = "  <- chosen" if s is chosen else ""
        cut = f" ({s.truncated} cut)" if s.truncated else ""
        lines.append(f"{s.steps:>8} {figs} {rule.worst_ratio(s):>7.3f} {f'{s.finished}/{s.jobs}':>9}  "
                     f"{'yes' if rule.eligible(s) else 'no':<8}{mark}{cut}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    import argparse

    from gpusched_env.config_util import ConfigError

    ap = argparse.ArgumentParser(prog="python -m gpusched.agents.selection",
                                 description="Select again among a run's scored candidates with another objective "
                                             "(selection.json's bounds and scores; nothing is played).")
    ap.add_argument("run_dir", type=Path, help="a gpusched-train folder trained with select.enabled=true")
    ap.add_argument("--objective", required=True, choices=OBJECTIVES, help="minimised among the eligible")
    ap.add_argument("--out", type=Path, help="write the chosen policy here (a model.zip for agent_path); "
                                             "without it, only print the candidates")
    sets = ap.add_mutually_exclusive_group()
    sets.add_argument("--also", action="append", default=[], metavar="NAME",
                      help="select across selection.json and RUN_DIR/selection_NAME.json (gpusched.studies.rescore; repeatable)")
    sets.add_argument("--only", metavar="NAME",
                      help="select on RUN_DIR/selection_NAME.json alone (gpusched.studies.rescore plays each episode to its "
                           "end, as gpusched-bench does: no select.max_steps cut)")
    a = ap.parse_args(argv)
    try:
        names: list[str | None] = [a.only] if a.only else [None, *a.also]
        histories = [load_history(a.run_dir, n) for n in names]
        steps = select_across(histories, a.objective)
        chosen = next(s for s in histories[0][1] if s.steps == steps)
        if a.out:
            write_candidate(a.run_dir, chosen, a.out)
    except (ConfigError, ValueError) as e:
        print(f"selection: error: {' '.join(str(e).split())}", file=sys.stderr)
        raise SystemExit(2) from None
    for name, (bounds, scores) in zip(names, histories, strict=True):
        if len(names) > 1:
            print(f"== {history_path(a.run_dir, name).name}")
        mark = next(s for s in scores if s.steps == steps)
        print(format_history(bounds, scores, Rule(bounds, a.objective), mark))
    if a.out:
        print(f"wrote {a.out} (the candidate at {chosen.steps} steps)")


if __name__ == "__main__":
    main()
