"""A ``gpusched-real pairs`` file beside the reference measurement and the device model, per cell.

``python -m gpusched.real.pairs_table PAIRS.csv [--sim RESULTS.json]`` prints one markdown table:
per (mechanism, HP, BE) cell of the file, the BE throughput as a share of BE alone (the calibration
target: stable between runs) in this file, in the reference (data/calibration/colocation-h100, the
mean of its runs; its embedded summary without the data) and, with ``--sim``, in a device-level bench
run of ``h100_pairs`` (``gpusched-bench scenario=h100_pairs``'s results.json); then HP p99 (queueing
included: a range, not a point, the reference's README says) in this file, the reference's range and
the model. Below it, the mean absolute BE error of the model and of the reference against this file, and
how many cells are within 15 % (issue 29's target for the device model).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from gpusched_env.device.measured import Cell, measured_cells


@dataclass(frozen=True, slots=True)
class Row:
    """One pair cell: BE share of its solo throughput and HP p99 (ms) per source; None where absent."""

    mechanism: str
    hp: str
    be: str
    be_norm: float
    be_norm_ref: float | None
    be_norm_sim: float | None
    hp_p99_ms: float
    hp_p99_ref: tuple[float, float] | None
    hp_p99_sim: float | None


def _mean(xs: tuple[float, ...]) -> float:
    return sum(xs) / len(xs)


def sim_cells(results: dict) -> dict[tuple[str, str, str], tuple[float, float]]:
    """(policy, hp, be) -> (be_norm_throughput, hp_p99_ms) of a device-level results.json (mean over seeds)."""
    out = {}
    for policy, entry in results["policies"].items():
        for w in entry["per_workload"]:
            hp, _, be = w["workload"].partition("+")
            m = w["metrics"]
            out[(policy, hp, be)] = (m["be_norm_throughput"], m["hp_p99_ms"])
    return out


def rows(measured: dict[tuple[str, str, str], Cell], reference: dict[tuple[str, str, str], Cell],
         sim: dict[tuple[str, str, str], tuple[float, float]]) -> list[Row]:
    """Every shared-GPU cell of ``measured`` (exclusive cells are the baseline, left out)."""
    out = []
    for key in sorted(k for k in measured if k[0] != "exclusive"):
        c, ref, s = measured[key], reference.get(key), sim.get(key)
        out.append(Row(*key, _mean(c.be_norm), _mean(ref.be_norm) if ref else None, s[0] if s else None,
                       _mean(c.hp_p99_ms), (min(ref.hp_p99_ms), max(ref.hp_p99_ms)) if ref else None,
                       s[1] if s else None))
    return out


def _errors(rs: list[Row], field: str) -> list[float]:
    """|other / this file - 1| of BE share per cell where ``field`` is known."""
    return [abs(getattr(r, field) / r.be_norm - 1.0) for r in rs if getattr(r, field) is not None]


def mean_abs_error(rs: list[Row], field: str) -> tuple[float, int]:
    """Mean |other / this file - 1| of BE share over the cells where ``field`` is known, and their count."""
    errs = _errors(rs, field)
    return (sum(errs) / len(errs) if errs else float("nan")), len(errs)


def _f(x: float | None, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def table(rs: list[Row], device: str) -> str:
    lines = [f"| cell | BE share: {device} | reference | model | HP p99 ms: {device} | reference range | model |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rs:
        rng = "-" if r.hp_p99_ref is None else f"{r.hp_p99_ref[0]:.1f}-{r.hp_p99_ref[1]:.1f}"
        lines.append(f"| {r.mechanism} {r.hp}+{r.be} | {r.be_norm:.3f} | {_f(r.be_norm_ref, '.3f')} | "
                     f"{_f(r.be_norm_sim, '.3f')} | {r.hp_p99_ms:.1f} | {rng} | {_f(r.hp_p99_sim, '.1f')} |")
    lines.append("")
    for field, who in (("be_norm_sim", "model"), ("be_norm_ref", "reference")):
        errs = _errors(rs, field)
        if errs:
            within = sum(1 for x in errs if x <= 0.15)
            lines.append(f"BE share, {who} against {device}: mean |error| {sum(errs) / len(errs):.1%} over "
                         f"{len(errs)} cells, {within} within 15 %")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gpusched.real.pairs_table", description=__doc__.split("\n\n")[0])
    ap.add_argument("pairs_csv", help="a gpusched-real pairs CSV (or the reference's own)")
    ap.add_argument("--sim", help="results.json of `gpusched-bench scenario=h100_pairs` (device level)")
    a = ap.parse_args(argv)
    path = Path(a.pairs_csv).resolve()
    if not path.is_file():
        print(f"pairs_table: {a.pairs_csv}: no such file", file=sys.stderr)
        return 2
    try:
        measured = measured_cells(str(path))
        sim = sim_cells(json.loads(Path(a.sim).read_text())) if a.sim else {}
    except (OSError, ValueError, KeyError) as e:
        print(f"pairs_table: {e}", file=sys.stderr)
        return 2
    with open(path) as f:
        header = f.readline().rstrip("\n").split(",")
        first = f.readline().rstrip("\n").split(",")
    device = first[header.index("device")] if "device" in header and len(first) == len(header) else path.name
    print(table(rows(measured, measured_cells(), sim), device))
    return 0


if __name__ == "__main__":
    sys.exit(main())
