"""The measured H100 pairs (data/calibration/colocation-h100): BE throughput and HP p99 per cell.

The CSV names two mechanisms its own way (``timeslice``, ``mps_prio``); :func:`policy_name`
translates them as the file is read. Read from the data folder when it is there; otherwise the
summary embedded below (derived from the same CSV; tests/device/test_measured.py checks they agree)
keeps a fresh clone working.
"""

from __future__ import annotations

import csv
import functools
from dataclasses import dataclass

from gpusched_env.data import DataMissing, data_path
from gpusched_env.vocabulary import BE_CAPPED, MPS_PRIORITY, SHARING_MECHANISMS, TIME_SLICING

CSV = "calibration/colocation-h100/h100_hp_be_pairs.csv"
CSV_MECHANISM_NAMES = {"timeslice": TIME_SLICING, "mps_prio": MPS_PRIORITY}
"""The colocation-h100 CSV's own names (and those of ``gpusched-real pairs`` files written before the
one vocabulary) -> this project's names; translated here, where every pairs CSV is read."""


def policy_name(mechanism: str, where: str = CSV) -> str:
    """This project's policy name for a mechanism name of a pairs CSV (``where`` names the file in errors):
    a current name or ``mps_beNN`` (MPS with the BE client capped at NN % of the threads, 1 <= NN <= 99;
    ``mps_be50`` is the colocation-h100 cell) stays as it is, a name of :data:`CSV_MECHANISM_NAMES` is
    translated."""
    if mechanism in SHARING_MECHANISMS or BE_CAPPED.fullmatch(mechanism):
        return mechanism
    if mechanism in CSV_MECHANISM_NAMES:
        return CSV_MECHANISM_NAMES[mechanism]
    raise ValueError(f"{where}: column mechanism: unknown mechanism {mechanism!r}; expected one of "
                     f"{', '.join((*SHARING_MECHANISMS, *CSV_MECHANISM_NAMES))} or mps_beNN (1 <= NN <= 99)")


@dataclass(frozen=True, slots=True)
class Cell:
    """One (policy, HP, BE) cell over the runs that measured it."""

    be_norm: tuple[float, ...]  # be_iter_per_s / be_solo_iter_per_s per run
    be_iter_per_s: tuple[float, ...]
    hp_p99_ms: tuple[float, ...]


def _f(x: str) -> float | None:
    return float(x) if x else None


@functools.lru_cache(maxsize=2)
def measured_cells(rel: str = CSV) -> dict[tuple[str, str, str], Cell]:
    """(policy, hp_model, be_model) -> Cell; exclusive cells combine the HP-alone and BE-alone rows."""
    try:
        with open(data_path(rel), newline="") as f:
            rows = list(csv.DictReader(f))
    except DataMissing:
        return dict(EMBEDDED)
    acc: dict[tuple[str, str, str], tuple[list[float], list[float], list[float]]] = {}
    solo_hp = {(r["run"], r["hp_model"]): _f(r["hp_p99_ms"]) for r in rows if r["mechanism"] == "exclusive" and r["hp_model"]}
    solo_be = {(r["run"], r["be_model"]): _f(r["be_iter_per_s"]) for r in rows if r["mechanism"] == "exclusive" and r["be_model"]}
    hps = sorted({r["hp_model"] for r in rows if r["hp_model"]})
    bes = sorted({r["be_model"] for r in rows if r["be_model"]})
    for run in sorted({r["run"] for r in rows}):
        for h in hps:
            for b in bes:
                if (run, h) in solo_hp and (run, b) in solo_be:
                    cell = acc.setdefault(("exclusive", h, b), ([], [], []))
                    cell[0].append(1.0)
                    cell[1].append(solo_be[(run, b)] or 0.0)
                    cell[2].append(solo_hp[(run, h)] or 0.0)
    for r in rows:
        if r["mechanism"] == "exclusive":
            continue
        cell = acc.setdefault((policy_name(r["mechanism"], rel), r["hp_model"], r["be_model"]), ([], [], []))
        cell[0].append(float(r["be_iter_per_s"]) / float(r["be_solo_iter_per_s"]))
        cell[1].append(float(r["be_iter_per_s"]))
        cell[2].append(float(r["hp_p99_ms"]))
    return {k: Cell(tuple(a), tuple(b), tuple(c)) for k, (a, b, c) in acc.items()}


def comparison(policy: str, hp: str, be: str, sim: dict[str, float]) -> dict[str, float]:
    """Measured-vs-simulated metrics of one cell (empty if the cell was not measured)."""
    cell = measured_cells().get((policy, hp, be))
    if cell is None:
        return {}
    meas = sum(cell.be_norm) / len(cell.be_norm)
    lo, hi = min(cell.hp_p99_ms), max(cell.hp_p99_ms)
    return {
        "be_norm_throughput_measured": meas,
        "be_iter_per_s_measured": sum(cell.be_iter_per_s) / len(cell.be_iter_per_s),
        "be_norm_error": sim["be_norm_throughput"] / meas - 1.0,
        "hp_p99_ms_measured_lo": lo, "hp_p99_ms_measured_hi": hi,
        "hp_p99_in_range": float(lo <= sim["hp_p99_ms"] <= hi),
    }


# Summary of the CSV (be_norm rounded to 4 digits, be_iter_per_s to 3), for clones without the data.
EMBEDDED: dict[tuple[str, str, str], Cell] = {
    ('exclusive', 'bert_inf', 'gpt2_train'): Cell((1.0, 1.0), (23.527, 23.576), (33.262, 27.967)),
    ('exclusive', 'bert_inf', 'resnet50_train'): Cell((1.0, 1.0), (26.909, 26.87), (33.262, 27.967)),
    ('exclusive', 'resnet50_inf', 'gpt2_train'): Cell((1.0, 1.0), (23.527, 23.576), (45.488, 22.794)),
    ('exclusive', 'resnet50_inf', 'resnet50_train'): Cell((1.0, 1.0), (26.909, 26.87), (45.488, 22.794)),
    ('mps', 'bert_inf', 'gpt2_train'): Cell((0.9725, 0.9692), (22.88, 22.85), (77.109, 259.284)),
    ('mps', 'bert_inf', 'resnet50_train'): Cell((0.977, 0.9739), (26.29, 26.169), (56.128, 25.889)),
    ('mps', 'resnet50_inf', 'gpt2_train'): Cell((0.9626, 0.9766), (22.646, 23.025), (891.96, 32.27)),
    ('mps', 'resnet50_inf', 'resnet50_train'): Cell((0.9632, 0.9812), (25.918, 26.366), (131.878, 17.228)),
    ('mps_be50', 'bert_inf', 'gpt2_train'): Cell((0.6692,), (15.776,), (53.066,)),
    ('mps_be50', 'bert_inf', 'resnet50_train'): Cell((0.7411, 0.7422), (19.941, 19.943), (62.872, 53.638)),
    ('mps_be50', 'resnet50_inf', 'gpt2_train'): Cell((0.6663, 0.6733), (15.677, 15.874), (66.995, 16.715)),
    ('mps_be50', 'resnet50_inf', 'resnet50_train'): Cell((0.7358, 0.7421), (19.8, 19.94), (58.19, 14.632)),
    ('mps_priority', 'bert_inf', 'gpt2_train'): Cell((0.9575, 0.9554), (22.528, 22.525), (46.876, 40.9)),
    ('mps_priority', 'bert_inf', 'resnet50_train'): Cell((0.9724, 0.9698), (26.166, 26.059), (59.521, 39.25)),
    ('mps_priority', 'resnet50_inf', 'gpt2_train'): Cell((0.943, 0.9678), (22.187, 22.816), (86.496, 18.756)),
    ('mps_priority', 'resnet50_inf', 'resnet50_train'): Cell((0.9514, 0.981), (25.601, 26.359), (61.069, 19.872)),
    ('time_slicing', 'bert_inf', 'gpt2_train'): Cell((0.8111, 0.7899), (19.082, 18.623), (83.135, 161.239)),
    ('time_slicing', 'bert_inf', 'resnet50_train'): Cell((0.8409, 0.801), (22.629, 21.523), (59.772, 96.629)),
    ('time_slicing', 'resnet50_inf', 'gpt2_train'): Cell((0.7502, 0.8686), (17.65, 20.478), (772.174, 37.791)),
    ('time_slicing', 'resnet50_inf', 'resnet50_train'): Cell((0.7421, 0.8778), (19.969, 23.586), (238.677, 28.951)),
}
