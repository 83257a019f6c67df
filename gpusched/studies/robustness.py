"""Robustness of trained cluster-level agents: each model and the heuristics on scenarios the models
were not trained on, and how much each degrades against its own figure on the training scenario.

    python -m gpusched.studies.robustness runs/syn_nc_s{0,1,2,3,4}/model.zip --out runs/robust_syn
    python -m gpusched.studies.robustness --report runs/robust_syn/results.json      # re-print, run nothing
    python -m gpusched.studies.robustness --report R.json --goal las,tiresias        # + against two named heuristics

A *variant* is a named set of Hydra overrides of ``gpusched-bench``'s scenario, written
``NAME: OVERRIDE ...`` (e.g. ``load_1.2: scenario=synthetic_philly scenario.workload.load=1.2``), and
optionally the workloads it runs (``workloads=[4,5,6,7]``: a multi-workload scenario's held-out ones);
:data:`VARIANT_SETS` holds the default set of each training scenario (``synthetic_philly``,
``pal_philly``), each variant with why it is there; the models' training scenario picks it. The first
variant (``--base``, default ``train``) is the scenario the models were trained on. For every variant the
tool runs ``gpusched-bench`` (:func:`gpusched.bench.cli.run_bench`, one process, the same runs the CLI makes)
once with the heuristics and once per model (``policies=[agent]``), into ``OUT/VARIANT/heuristics``
and ``OUT/VARIANT/agent_K`` (``results.json`` and ``run.json``: the overrides, the equivalent
command). A run folder whose ``run.json`` matches and whose ``results.json`` is complete is reused,
so an interrupted study goes on where it stopped. ``--import VARIANT=FILE`` takes a variant's runs
from existing bench results (e.g. the in-distribution evaluation), checked against the variant: the
scenario overrides in ``.hydra/overrides.yaml`` beside FILE, the seeds, and for an agent's results
the model (env, scenario, training seed and steps recorded in FILE's ``agent``).

The table, per variant and for average and p99 JCT: each heuristic's figure, its gap to the best
heuristic on that variant (``vs best``), the change of that gap from the base variant in points
(``Δ gap``) and its change against its own figure on the base variant (``vs base``); then the same
for the agents as the median over models and their range (min..max). An agent that degrades more
than the heuristics shows a positive ``Δ gap``; ``vs base`` shows how the scenario moved everybody.
``OUT/results.json`` (written atomically after each variant) holds every figure the table needs.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpusched.studies.seeds_report import load_results, pct_change, short_num
from gpusched_env.config_util import ConfigError

METRICS = ("avg_jct_s", "p99_jct_s")
TABLE_METRICS = ["avg_jct_s", "p99_jct_s", "makespan_s", "preemptions", "jobs_finished"]
HEURISTICS = ("las", "tiresias", "srtf", "sjf", "pal")
DEFAULT_SEEDS = tuple(range(12))  # choice: >= 12 windows per variant (issue 32 item 3; the bench's own default is 3)
_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


@dataclass(frozen=True)
class Variant:
    """A named set of scenario overrides (Hydra syntax, as on the ``gpusched-bench`` command line), with
    ``workloads=[...]`` among them where it runs only some of a scenario's workloads."""

    name: str
    overrides: tuple[str, ...]
    doc: str = ""

    @property
    def spec(self) -> str:
        return f"{self.name}: {' '.join(self.overrides)}"


PHILLY_WINDOW = Variant("philly_window", ("scenario=philly_window",),
                        "real Philly arrivals and durations: 1,000 jobs of virtual cluster 6c71a0 (conf/scenario/"
                        "philly_window.yaml) on 16 x 4 V100, with philly_full's model (bandwidth locality, "
                        "stragglers)")
"""The real-trace variant of both default sets (its models' cluster shape: 16 x 4 V100)."""

DEFAULT_VARIANTS: tuple[Variant, ...] = (
    Variant("train", ("scenario=synthetic_philly",),
            "the training scenario (16 x 4 V100, 1,000 generated jobs, offered load 0.8): the base"),
    Variant("load_0.6", ("scenario=synthetic_philly", "scenario.workload.load=0.6"),
            "lighter load: the same jobs arriving at 0.75 x the training rate"),
    Variant("load_1.2", ("scenario=synthetic_philly", "scenario.workload.load=1.2"),
            "heavier load: the same jobs arriving at 1.5 x the training rate"),
    Variant("16x8", ("scenario=synthetic_philly", "scenario.cluster.nodes.0.gpus_per_node=8",
                     "+scenario.workload.max_gpus=64"),
            "twice the GPUs per node (128 GPUs; a model needs 16 nodes), the training job mix (jobs of at "
            "most 64 GPUs), load 0.8 of 128 GPUs: twice the arrival rate"),
    Variant("16x2", ("scenario=synthetic_philly", "scenario.cluster.nodes.0.gpus_per_node=2"),
            "half the GPUs per node (32 GPUs), load 0.8 of 32 GPUs; the generator drops its 64-GPU jobs "
            "(wider than the cluster) and renormalises the mix"),
    PHILLY_WINDOW,
)
"""The default variants of ``synthetic_philly`` models: the base, then one axis changed at a time
(load, GPUs per node, real trace)."""

_PAL_HELD_OUT = "workloads=[4,5,6,7]"  # the held-out PAL workloads 5-8 (models train on 1-4)
PAL_VARIANTS: tuple[Variant, ...] = (
    Variant("train", ("scenario=pal_philly", _PAL_HELD_OUT),
            "the training scenario on its held-out workloads 5-8 (16 x 4 V100, the artifact's variability "
            "draw, 2 background jobs/h): the base"),
    Variant("bg_1", ("scenario=pal_philly", "scenario.workload.background_rate_per_hour=1.0", _PAL_HELD_OUT),
            "lighter load: half the artifact's background arrival rate (--jobs-per-hour 1)"),
    Variant("bg_3", ("scenario=pal_philly", "scenario.workload.background_rate_per_hour=3.0", _PAL_HELD_OUT),
            "heavier load: 1.5 x the artifact's background arrival rate (--jobs-per-hour 3)"),
    Variant("16x8", ("scenario=pal_philly", "scenario.cluster.nodes.0.gpus_per_node=8", _PAL_HELD_OUT),
            "twice the GPUs per node (128 GPUs; the artifact's variability draw procedure over all of them), the "
            "same jobs"),
    Variant("16x3", ("scenario=pal_philly", "scenario.cluster.nodes.0.gpus_per_node=3", _PAL_HELD_OUT),
            "three quarters of the GPUs (48: the widest PAL job still fits; at 16 x 2 workloads 5, 6 and 8 "
            "hold 48-GPU jobs wider than the cluster), the same jobs"),
    PHILLY_WINDOW,
)
"""The default variants of ``pal_philly`` models, on the held-out workloads where the scenario has them."""

VARIANT_SETS: dict[str, tuple[Variant, ...]] = {"synthetic_philly": DEFAULT_VARIANTS, "pal_philly": PAL_VARIANTS}
"""Default variants by the scenario the models were trained on."""


def default_variants(models: list[dict[str, Any]]) -> list[Variant]:
    """The default variant set of the models' training scenario (one for all); else a ConfigError."""
    trained = sorted({str(m.get("scenario")) for m in models})
    if len(trained) != 1:
        raise ConfigError(f"models trained on {trained}: give models of one scenario, or the variants (--variant)")
    if trained[0] not in VARIANT_SETS:
        raise ConfigError(f"no default variants for models trained on {trained[0]!r} (defaults exist for "
                          f"{sorted(VARIANT_SETS)}); give them with --variant 'NAME: OVERRIDE ...'")
    return list(VARIANT_SETS[trained[0]])


def _is_variant_key(override: str) -> bool:
    """A scenario override (``scenario=NAME``, ``scenario.KEY=VALUE``) or the workloads run."""
    key = override.partition("=")[0].lstrip("+~")
    return key in ("scenario", "workloads") or key.startswith("scenario.")


def parse_variant(spec: str) -> Variant:
    """``NAME: OVERRIDE ...`` -> :class:`Variant`; a ConfigError naming the variant when malformed."""
    name, sep, rest = spec.partition(":")
    name = name.strip()
    if not sep or not _NAME.match(name):
        raise ConfigError(f"variant {spec!r}: expected 'NAME: OVERRIDE ...' with NAME of letters, digits, "
                          "'_', '.', '-' (e.g. 'load_0.6: scenario=synthetic_philly scenario.workload.load=0.6')")
    try:
        overrides = tuple(shlex.split(rest))
    except ValueError as e:
        raise ConfigError(f"variant {name}: cannot split its overrides ({e})") from None
    if not overrides:
        raise ConfigError(f"variant {name}: no overrides (give at least scenario=NAME)")
    for o in overrides:
        if "=" not in o or not _is_variant_key(o):
            raise ConfigError(f"variant {name}: {o!r} is not a scenario override (scenario=NAME, "
                              "scenario.KEY=VALUE or workloads=[...]); seeds, policies and models are this "
                              "tool's options")
    return Variant(name, overrides)


def compose(variant: Variant, extra: list[str]) -> Any:
    """The ``gpusched-bench`` config (conf/bench.yaml) with the variant's overrides and ``extra``;
    Hydra's errors become a ConfigError naming the variant."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from gpusched_env.scenario import CONF_DIR

    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            return hydra_compose("bench", overrides=[*variant.overrides, *extra])
    except (HydraException, OmegaConfBaseException) as e:
        line = " ".join(str(e).split())
        raise ConfigError(f"variant {variant.name}: {line}") from None


def check_variant(variant: Variant) -> str:
    """The variant composes into a cluster-level scenario (its name is returned); else a ConfigError
    naming the variant and the bad key."""
    from gpusched.bench.cli import scenario_from_cfg
    from gpusched_env.levels import level_of

    cfg = compose(variant, [])
    try:
        raw = dict(cfg.scenario)
        if level_of(raw) != "cluster":
            raise ConfigError(f"scenario {raw.get('name')!r} is a {level_of(raw)}-level scenario; the models "
                              "here are cluster-level")
        return scenario_from_cfg(cfg).name
    except (ConfigError, ValueError, TypeError) as e:
        raise ConfigError(f"variant {variant.name}: {' '.join(str(e).split())}") from None


# ------------------------------------------------------------------------------------------------ runs
@dataclass
class Run:
    """One ``gpusched-bench`` run of a variant: the heuristics (``model`` None) or one model."""

    variant: Variant
    out: Path
    policies: list[str]
    seeds: list[int]
    model: int | None = None
    agent_path: str | None = None

    def overrides(self) -> list[str]:
        extra = [f"policies=[{','.join(self.policies)}]", f"seeds=[{','.join(map(str, self.seeds))}]",
                 "workers=1", "plots=false", f"out_dir={self.out}", f"table_metrics=[{','.join(TABLE_METRICS)}]"]
        if self.agent_path:
            extra.append(f"agent_path={self.agent_path}")
        return [*self.variant.overrides, *extra]

    def command(self) -> str:
        return "gpusched-bench " + " ".join(shlex.quote(o) for o in self.overrides())

    def done(self) -> dict[str, Any] | None:
        """The results of an earlier identical run in ``out`` (complete, same overrides), else None."""
        try:
            spec = json.loads((self.out / "run.json").read_text())
            doc = json.loads((self.out / "results.json").read_text())
        except (OSError, json.JSONDecodeError):
            return None
        if spec.get("overrides") != self.overrides() or doc.get("partial"):
            return None
        return dict(doc)


def _identity(agent: dict[str, Any]) -> dict[str, Any]:
    """What identifies a model in results (its path may be relative to another folder)."""
    return {k: agent.get(k) for k in ("env_id", "clairvoyant", "algo", "scenario", "seed", "num_timesteps")}


def check_import(variant: Variant, path: str, seeds: list[int], models: list[dict[str, Any]]) -> tuple[dict[str, Any], int | None]:
    """A bench results.json taken for ``variant``: (its document, the model index it evaluates or
    None for heuristics). Its scenario overrides (``.hydra/overrides.yaml`` beside it) must be the
    variant's, its seeds ``seeds``; an agent's results must be of one of ``models``."""
    import yaml

    doc = load_results(path)
    where = f"--import {variant.name}={path}"
    ov_file = Path(path).parent / ".hydra" / "overrides.yaml"
    if not ov_file.is_file():
        raise ConfigError(f"{where}: no {ov_file} (cannot check which scenario overrides it ran with)")
    ran = [str(o) for o in yaml.safe_load(ov_file.read_text()) or []]
    mine = sorted(o for o in ran if _is_variant_key(o))
    if mine != sorted(variant.overrides):
        raise ConfigError(f"{where}: ran with scenario overrides {mine}, the variant is {sorted(variant.overrides)}")
    if doc.get("seeds") != seeds:
        raise ConfigError(f"{where}: seeds {doc.get('seeds')}, this study uses {seeds}")
    if "agent" not in doc["policies"]:
        return doc, None
    ident = _identity(doc.get("agent") or {})
    for i, m in enumerate(models):
        if _identity(m) == ident:
            return doc, i
    raise ConfigError(f"{where}: its agent {ident} is none of the models given")


def figures(doc: dict[str, Any], policy: str, where: str) -> dict[str, float]:
    """avg / p99 JCT and finished jobs of ``policy`` in a bench results document."""
    try:
        m = doc["policies"][policy]["metrics"]
        return {k: float(m[k]) for k in (*METRICS, "jobs_finished")}
    except (KeyError, TypeError):
        raise ConfigError(f"{where}: no avg_jct_s / p99_jct_s / jobs_finished for policy {policy!r}") from None


@dataclass
class Study:
    """What to run: models × variants, heuristics, seeds, the output folder."""

    models: list[str]
    variants: list[Variant]
    out: Path
    heuristics: list[str] = field(default_factory=lambda: list(HEURISTICS))
    seeds: list[int] = field(default_factory=lambda: list(DEFAULT_SEEDS))
    imports: dict[str, list[str]] = field(default_factory=dict)

    def runs(self) -> list[Run]:
        out = []
        for v in self.variants:
            out.append(Run(v, self.out / v.name / "heuristics", self.heuristics, self.seeds))
            out += [Run(v, self.out / v.name / f"agent_{i}", ["agent"], self.seeds, i, m)
                    for i, m in enumerate(self.models)]
        return out


def run_study(study: Study, console: Any = None, rerun: bool = False) -> dict[str, Any]:
    """Run (or reuse, or import) every run of the study; write and return ``OUT/results.json``."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from gpusched.agents.adapter import describe_agent
    from gpusched.bench.cli import check_bench, run_bench
    from gpusched.bench.report import wide_console, write_json_atomic

    console = console or wide_console()
    names = [v.name for v in study.variants]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ConfigError(f"variants: {dup} named more than once")
    unknown = sorted(set(study.imports) - set(names))
    if unknown:
        raise ConfigError(f"--import: no variant named {unknown}; variants: {names}")
    for v in study.variants:
        check_variant(v)
    models = [describe_agent(m) for m in study.models]
    imported: dict[tuple[str, int | None], tuple[dict[str, Any], str]] = {}
    for v in study.variants:
        for f in study.imports.get(v.name, []):
            doc, idx = check_import(v, f, study.seeds, models)
            if idx is None:
                missing = [h for h in study.heuristics if h not in doc["policies"]]
                if missing:
                    raise ConfigError(f"--import {v.name}={f}: no results for heuristics {missing}")
            imported[(v.name, idx)] = (doc, f)
    todo: list[Run] = []
    sims = 0  # simulations to run: policies x seeds x workloads of every run to do
    for r in study.runs():
        if (r.variant.name, r.model) in imported:
            continue
        cfg = compose(r.variant, r.overrides()[len(r.variant.overrides):])
        try:
            _, _, _, tasks = check_bench(cfg, r.out, False)  # every run checked before any starts
        except ConfigError as e:
            raise ConfigError(f"variant {r.variant.name}: {e}") from None
        if rerun or r.done() is None:
            todo.append(r)
            sims += len(tasks)
    console.print(f"robustness: {len(study.models)} model(s) x {len(study.variants)} variant(s), heuristics "
                  f"{study.heuristics}, seeds {study.seeds}: {len(todo)} bench run(s) to do "
                  f"({len(study.runs()) - len(todo)} reused or imported)")
    doc = _document(study, models)
    quiet = Console(quiet=True)
    t0 = time.perf_counter()
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=False) as bar:
        job = bar.add_task("simulating", total=sims)
        for v in study.variants:
            entry = doc["variants"][[x["name"] for x in doc["variants"]].index(v.name)]
            for r in [x for x in study.runs() if x.variant.name == v.name]:
                key = (v.name, r.model)
                if key in imported:
                    res, src = imported[key]
                elif r in todo:
                    label = "heuristics" if r.model is None else f"agent {r.model}"

                    def done(t: Any, label: str = label, name: str = v.name) -> None:
                        bar.update(job, advance=1, description=f"{name} {label}: {t.task.policy} seed {t.task.seed}")

                    write_json_atomic(r.out / "run.json", {"overrides": r.overrides(), "command": r.command()})
                    res = run_bench(compose(v, r.overrides()[len(v.overrides):]), quiet, r.out, on_done=done)
                    src = str(r.out / "results.json")
                else:
                    res, src = r.done() or {}, str(r.out / "results.json")
                _fill(entry, r, res, src)
            write_json_atomic(study.out / "results.json", doc)
    console.print(f"wrote {study.out / 'results.json'} ({time.perf_counter() - t0:.0f} s wall)")
    return doc


def _document(study: Study, models: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "tool": "gpusched.studies.robustness", "base": study.variants[0].name, "seeds": study.seeds,
        "heuristics": study.heuristics, "models": models,
        "variants": [{"name": v.name, "overrides": list(v.overrides), "doc": v.doc, "scenario": None,
                      "heuristics": {}, "agents": [None] * len(study.models),
                      "sources": {"heuristics": None, "agents": [None] * len(study.models)}}
                     for v in study.variants],
    }


def _fill(entry: dict[str, Any], r: Run, res: dict[str, Any], src: str) -> None:
    entry["scenario"] = res.get("scenario")
    if r.model is None:
        entry["heuristics"] = {h: figures(res, h, src) for h in r.policies}
        entry["sources"]["heuristics"] = src
    else:
        entry["agents"][r.model] = figures(res, "agent", src)
        entry["sources"]["agents"][r.model] = src


# ---------------------------------------------------------------------------------------------- table
@dataclass(frozen=True)
class Cell:
    """One metric of one row: the figure, its gap to the variant's best heuristic, the change of that
    gap from the base variant (points) and the figure's change from its own base figure."""

    value: float
    vs_best: float  # %
    d_gap: float  # percentage points
    vs_base: float  # %


@dataclass(frozen=True)
class Row:
    label: str
    cells: dict[str, Cell]
    finished: float


@dataclass(frozen=True)
class VariantTable:
    name: str
    overrides: list[str]
    doc: str
    best: dict[str, str]  # metric -> best heuristic's name
    heuristics: list[Row]
    agents: list[Row]  # one per model
    median: Row
    spread: dict[str, tuple[Cell, Cell]]  # metric -> (min, max) of each field over the models


def tables(doc: dict[str, Any]) -> list[VariantTable]:
    """Every variant's rows (see :class:`Cell`); the base is the variant named ``doc['base']``."""
    by_name = {v["name"]: v for v in doc["variants"]}
    base = by_name[doc["base"]]
    heur = list(doc["heuristics"])

    def best(v: dict[str, Any], m: str) -> tuple[str, float]:
        name = min(heur, key=lambda h: v["heuristics"][h][m])
        return name, v["heuristics"][name][m]

    base_best = {m: best(base, m)[1] for m in METRICS}
    out = []
    for v in doc["variants"]:
        bests = {m: best(v, m) for m in METRICS}

        def row(label: str, fig: dict[str, float], base_fig: dict[str, float], bests=bests) -> Row:
            cells = {}
            for m in METRICS:
                gap = pct_change(fig[m], bests[m][1])
                cells[m] = Cell(fig[m], gap, gap - pct_change(base_fig[m], base_best[m]), pct_change(fig[m], base_fig[m]))
            return Row(label, cells, fig["jobs_finished"])

        hrows = [row(h, v["heuristics"][h], base["heuristics"][h]) for h in heur]
        arows = [row(f"agent {i}", a, base["agents"][i]) for i, a in enumerate(v["agents"])]

        def stat(f: Callable[[list[float]], float], m: str, rows: list[Row] = arows) -> Cell:
            cs = [r.cells[m] for r in rows]
            return Cell(f([c.value for c in cs]), f([c.vs_best for c in cs]), f([c.d_gap for c in cs]),
                        f([c.vs_base for c in cs]))

        median = Row("agents median", {m: stat(statistics.median, m) for m in METRICS},
                     statistics.median(r.finished for r in arows))
        spread = {m: (stat(min, m), stat(max, m)) for m in METRICS}
        out.append(VariantTable(v["name"], list(v["overrides"]), v.get("doc", ""), {m: bests[m][0] for m in METRICS},
                                hrows, arows, median, spread))
    return out


def format_report(doc: dict[str, Any]) -> str:
    """The printed table: one block per variant, then a summary line per variant."""
    ts = tables(doc)
    base = doc["base"]
    n = len(doc["models"])
    seeds = doc["seeds"]
    lines = [f"robustness: {n} model(s) trained on {sorted({str(m.get('scenario')) for m in doc['models']})} "
             f"(clairvoyant={sorted({str(m.get('clairvoyant')) for m in doc['models']})}), evaluation seeds {seeds}; "
             f"base variant {base!r}",
             "vs best: against the best heuristic on that variant; Δ gap: change of vs best from the base (points); "
             "vs base: against the same policy's own figure on the base; agents: median over models, then min..max"]
    head = (f"{'policy':<15} {'avg_jct_s':>12} {'vs best':>14} {'Δ gap':>16} {'vs base':>14}   "
            f"{'p99_jct_s':>12} {'vs best':>14} {'Δ gap':>16} {'vs base':>14} {'finished':>10}")
    for t in ts:
        is_base = t.name == base
        lines += ["", f"== {t.name}: {' '.join(t.overrides)}" + (" (base)" if is_base else "")]
        lines += [f"   {t.doc}"] if t.doc else []
        lines.append(head)

        def cells(c: Cell, is_base: bool = is_base) -> str:
            dg = "—" if is_base else f"{c.d_gap:+.1f}pp"
            vb = "—" if is_base else f"{c.vs_base:+.1f}%"
            return f"{short_num(c.value):>12} {c.vs_best:>+13.1f}% {dg:>16} {vb:>14}"

        for r in [*t.heuristics, t.median]:
            lines.append(f"{r.label:<15} {cells(r.cells['avg_jct_s'])}   {cells(r.cells['p99_jct_s'])} {r.finished:>10.4g}")

        def rng(m: str, is_base: bool = is_base, t: VariantTable = t) -> str:
            lo, hi = t.spread[m]
            dg = "—" if is_base else f"{lo.d_gap:+.1f}..{hi.d_gap:+.1f}pp"
            vb = "—" if is_base else f"{lo.vs_base:+.1f}..{hi.vs_base:+.1f}%"
            return (f"{short_num(lo.value) + '..' + short_num(hi.value):>12} {f'{lo.vs_best:+.1f}..{hi.vs_best:+.1f}%':>14} "
                    f"{dg:>16} {vb:>14}")

        fin = [r.finished for r in t.agents]
        lines.append(f"{'agents min..max':<15} {rng('avg_jct_s')}   {rng('p99_jct_s')} "
                     f"{f'{min(fin):.4g}..{max(fin):.4g}':>10}")
        lines.append(f"   best heuristic: avg {t.best['avg_jct_s']}, p99 {t.best['p99_jct_s']}")
    lines += ["", "summary (agents: median over models; heuristics: min..max over heuristics)",
              f"{'variant':<14} {'best avg':>9} {'agents vs best':>15} {'Δ gap':>9} {'agents vs base':>15} "
              f"{'heuristics vs base':>19}   {'best p99':>9} {'agents vs best':>15} {'Δ gap':>9} "
              f"{'all finished':>13}"]
    for t in ts:
        is_base = t.name == base
        a, p = t.median.cells["avg_jct_s"], t.median.cells["p99_jct_s"]
        hb = [r.cells["avg_jct_s"].vs_base for r in t.heuristics]
        most = max(r.finished for r in t.heuristics)
        ok = sum(r.finished >= most for r in t.agents)
        lines.append(
            f"{t.name:<14} {t.best['avg_jct_s']:>9} {a.vs_best:>+14.1f}% "
            f"{'—' if is_base else f'{a.d_gap:+.1f}pp':>9} {'—' if is_base else f'{a.vs_base:+.1f}%':>15} "
            f"{'—' if is_base else f'{min(hb):+.1f}..{max(hb):+.1f}%':>19}   {t.best['p99_jct_s']:>9} "
            f"{p.vs_best:>+14.1f}% {'—' if is_base else f'{p.d_gap:+.1f}pp':>9} {f'{ok} of {len(t.agents)}':>13}")
    return "\n".join(lines)


def goal_report(doc: dict[str, Any], avg_ref: str, p99_ref: str) -> str:
    """Per variant, the agents against two named heuristics rather than the best one: the median
    agent's average JCT against ``avg_ref``'s, its p99 against ``p99_ref``'s, and how many models are
    within both with every job finished (the form of issue 16's goal: average under LAS's, p99 no
    worse than Tiresias's)."""
    for h in (avg_ref, p99_ref):
        if h not in doc["heuristics"]:
            raise ConfigError(f"--goal: {h!r} is not among the study's heuristics {doc['heuristics']}")
    lines = [f"goal: average JCT under {avg_ref}'s, p99 JCT no worse than {p99_ref}'s, every job finished "
             "(agents: median over models)",
             f"{'variant':<14} {avg_ref + ' avg':>13} {'agents avg':>11} {'vs ' + avg_ref:>9}   "
             f"{p99_ref + ' p99':>13} {'agents p99':>11} {'vs ' + p99_ref:>13}   {'models within both':>18}"]
    for v in doc["variants"]:
        ref_avg, ref_p99 = v["heuristics"][avg_ref]["avg_jct_s"], v["heuristics"][p99_ref]["p99_jct_s"]
        most = max(v["heuristics"][h]["jobs_finished"] for h in doc["heuristics"])
        agents = v["agents"]
        avg = statistics.median(a["avg_jct_s"] for a in agents)
        p99 = statistics.median(a["p99_jct_s"] for a in agents)
        ok = sum(a["avg_jct_s"] < ref_avg and a["p99_jct_s"] <= ref_p99 and a["jobs_finished"] >= most for a in agents)
        lines.append(f"{v['name']:<14} {short_num(ref_avg):>13} {short_num(avg):>11} {pct_change(avg, ref_avg):>+8.1f}%   "
                     f"{short_num(ref_p99):>13} {short_num(p99):>11} {pct_change(p99, ref_p99):>+12.1f}%   "
                     f"{f'{ok} of {len(agents)}':>18}")
    return "\n".join(lines)


TOOL_NAMES = ("gpusched.studies.robustness", "studies.robustness", "agents.robustness")
"""The ``tool`` field of this study's results.json (written by the first, read under every name: the
study was ``studies.robustness`` before the apps moved under ``gpusched`` and ``agents.robustness``
before the studies package)."""


def check_document(doc: dict[str, Any], where: str) -> None:
    """A robustness results.json complete enough to print (every figure of every variant present)."""
    if doc.get("tool") not in TOOL_NAMES:
        raise ConfigError(f"{where}: not a gpusched.studies.robustness results.json (no \"tool\": \"gpusched.studies.robustness\")")
    for v in doc.get("variants", []):
        missing = [h for h in doc["heuristics"] if h not in v.get("heuristics", {})]
        if missing or any(a is None for a in v.get("agents", [])):
            raise ConfigError(f"{where}: variant {v.get('name')} is incomplete (heuristics missing {missing}, "
                              f"agents missing {[i for i, a in enumerate(v.get('agents', [])) if a is None]}); "
                              "run the study again to finish it")
    if doc.get("base") not in [v.get("name") for v in doc.get("variants", [])]:
        raise ConfigError(f"{where}: base variant {doc.get('base')!r} is not among its variants")


# ------------------------------------------------------------------------------------------------ CLI
def _print_goal(doc: dict[str, Any], goal: str | None) -> None:
    if goal is None:
        return
    refs = [h.strip() for h in goal.split(",")]
    if len(refs) != 2 or not all(refs):
        raise ConfigError(f"--goal: expected AVG_HEURISTIC,P99_HEURISTIC (e.g. las,tiresias), got {goal!r}")
    print()
    print(goal_report(doc, refs[0], refs[1]))


def main(argv: list[str] | None = None) -> None:
    from gpusched.bench.cli import BenchInterrupted

    ap = argparse.ArgumentParser(
        prog="python -m gpusched.studies.robustness", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n\n".join(f"default variants of {name} models (the first is the base):\n"
                             + "\n".join(f"  {v.spec}\n      {v.doc}" for v in vs) for name, vs in VARIANT_SETS.items()))
    ap.add_argument("models", nargs="*", help="model.zip files of gpusched-train (one per training seed)")
    ap.add_argument("--out", type=Path, help="output folder (OUT/results.json, OUT/VARIANT/...)")
    ap.add_argument("--variant", action="append", metavar="'NAME: OVERRIDE ...'",
                    help="a variant (repeatable; replaces the defaults; the first is the base)")
    ap.add_argument("--only", help="comma-separated names of default variants to run (the base is always kept)")
    ap.add_argument("--base", default=None, help="the base variant's name (default: the first variant)")
    ap.add_argument("--heuristics", default=",".join(HEURISTICS), help="comma-separated (default %(default)s)")
    ap.add_argument("--seeds", default=",".join(map(str, DEFAULT_SEEDS)),
                    help="evaluation seeds, comma-separated (default %(default)s: at least 12 windows per variant, "
                         "a generated scenario's window being one seed's workload)")
    ap.add_argument("--import", dest="imports", action="append", default=[], metavar="VARIANT=FILE",
                    help="take a variant's heuristics or one model's runs from an existing bench results.json")
    ap.add_argument("--rerun", action="store_true", help="run again even where OUT holds matching results")
    ap.add_argument("--report", metavar="RESULTS_JSON", help="print the table of an earlier study; run nothing")
    ap.add_argument("--goal", metavar="AVG_HEURISTIC,P99_HEURISTIC",
                    help="also compare the agents with two named heuristics, e.g. las,tiresias (average under the "
                         "first's, p99 no worse than the second's)")
    a = ap.parse_args(argv)
    try:
        if a.report:
            doc = json.loads(Path(a.report).read_text()) if Path(a.report).is_file() else None
            if doc is None:
                raise ConfigError(f"--report {a.report}: no such file")
            check_document(doc, a.report)
            print(format_report(doc))
            _print_goal(doc, a.goal)
            return
        if not a.models or a.out is None:
            ap.error("give the models and --out (or --report FILE)")
        if a.variant:
            variants = [parse_variant(s) for s in a.variant]
        else:
            from gpusched.agents.adapter import describe_agent

            variants = default_variants([describe_agent(m) for m in a.models])
        if a.only:
            keep = {s.strip() for s in a.only.split(",") if s.strip()}
            unknown = sorted(keep - {v.name for v in variants})
            if unknown:
                raise ConfigError(f"--only: unknown variant(s) {unknown}; known: {[v.name for v in variants]}")
            variants = [v for i, v in enumerate(variants) if i == 0 or v.name in keep]
        if a.base is not None:
            names = [v.name for v in variants]
            if a.base not in names:
                raise ConfigError(f"--base: no variant named {a.base!r}; variants: {names}")
            variants.sort(key=lambda v: v.name != a.base)
        imports: dict[str, list[str]] = {}
        for item in a.imports:
            name, eq, path = item.partition("=")
            if not eq or not path:
                raise ConfigError(f"--import {item!r}: expected VARIANT=FILE")
            imports.setdefault(name, []).append(path)
        try:
            seeds = [int(s) for s in a.seeds.split(",")]
        except ValueError:
            raise ConfigError(f"--seeds: expected comma-separated integers, got {a.seeds!r}") from None
        heur = [h.strip() for h in a.heuristics.split(",") if h.strip()]
        if not heur or "agent" in heur:
            raise ConfigError(f"--heuristics: expected heuristic policy names, got {a.heuristics!r}")
        study = Study(list(a.models), variants, a.out, heur, seeds, imports)
        doc = run_study(study, rerun=a.rerun)
        print(format_report(doc))
        _print_goal(doc, a.goal)
    except ConfigError as e:
        print(f"robustness: error: {' '.join(str(e).split())}", file=sys.stderr)
        raise SystemExit(2) from None
    except (KeyboardInterrupt, BenchInterrupted):  # the bench run in flight was written, marked partial
        print("robustness: interrupted; finished runs stay in --out and the same command goes on from them",
              file=sys.stderr)
        raise SystemExit(130) from None


if __name__ == "__main__":
    main(sys.argv[1:])
