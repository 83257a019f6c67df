"""Are two results.json files the same run? ``python -m gpusched.bench.same_results A.json B.json`` prints each
metric that differs (policy, block, metric, both values) and exits 1 if any does, else prints
``identical`` and exits 0. Wall-clock fields are ignored. Used to show that a refactoring left the
model's results byte-identical."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

IGNORED = {"wall_s"}


def differences(a: dict[str, Any], b: dict[str, Any], path: str = "") -> list[str]:
    """Every leaf (outside :data:`IGNORED`) whose value differs, as ``path: a != b``."""
    out: list[str] = []
    for k in sorted(set(a) | set(b)):
        if k in IGNORED:
            continue
        here = f"{path}.{k}" if path else str(k)
        va, vb = a.get(k), b.get(k)
        if isinstance(va, dict) and isinstance(vb, dict):
            out += differences(va, vb, here)
        elif isinstance(va, list) and isinstance(vb, list) and len(va) == len(vb):
            for i, (x, y) in enumerate(zip(va, vb, strict=True)):
                out += differences(x, y, f"{here}[{i}]") if isinstance(x, dict) and isinstance(y, dict) else (
                    [] if x == y else [f"{here}[{i}]: {x!r} != {y!r}"])
        elif va != vb:
            out.append(f"{here}: {va!r} != {vb!r}")
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m gpusched.bench.same_results A/results.json B/results.json", file=sys.stderr)
        return 2
    a, b = (json.loads(Path(p).read_text())["policies"] for p in args)
    diff = differences(a, b)
    print("\n".join(diff) if diff else "identical")
    return 1 if diff else 0


if __name__ == "__main__":
    raise SystemExit(main())
