"""Markdown tables of the policies of every level, read from their registries.

``python -m gpusched.bench.doc_tables`` prints them; ``--write README.md`` replaces the text between the
``<!-- policies:begin -->`` and ``<!-- policies:end -->`` lines of that file. tests/test_doc_tables.py
checks that README.md holds exactly this output.

Sources: the registries (:mod:`gpusched_env.registry`): the cluster level's
:data:`~gpusched.baselines.POLICIES` (name, what it does, module); the device level's :data:`~gpusched_env.device.mechanisms.MECHANISMS` and ``daris_rt``'s
:data:`~gpusched_env.device.daris.scenario.STAGE_POLICIES` (built by ``make_scheduler``); the pipeline
level's :data:`~gpusched_env.pipeline.schedules.SCHEDULES`. The family / paper column is the first
sentence of the defining module's docstring up to its first colon; a description missing from a
registry is the rest of that sentence (for ``daris_rt``'s baselines, their entry in the module's list).
References to design notes kept outside the repository (``NAME.md``) are left out.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpusched_env.registry import Entry

BEGIN = "<!-- policies:begin -->"
END = "<!-- policies:end -->"


@dataclass(frozen=True)
class Row:
    """One policy of one level."""

    name: str
    family: str
    description: str
    module: str  # dotted module name of the code that implements it


def _md(text: str) -> str:
    """reST inline markup as Markdown: ``x`` and :role:`~a.b.c` become `x` and `c`."""
    text = re.sub(r":\w+:`~?([\w.]+)`", lambda m: "`" + m.group(1).rsplit(".", 1)[-1] + "`", text)
    return text.replace("``", "`")


def _drop_doc_refs(text: str) -> str:
    """``text`` without references to ``NAME.md`` notes: bare in parentheses, listed in them, or a clause."""
    ref = r"[A-Z][A-Z_]*\.md"
    text = re.sub(rf"\s*\((?:{ref}(?:,\s*)?)+\)", "", text)
    text = re.sub(rf"[;,]\s*{ref}(?:,\s*{ref})*(?=\))", "", text)
    text = re.sub(rf"\({ref}(?:,\s*{ref})*[;,]\s*", "(", text)
    return re.sub(rf",[^,()]*\b{ref}[^,()]*", "", text)


def _paragraphs(doc: str | None) -> list[str]:
    """The docstring's paragraphs, each joined onto one line."""
    return [" ".join(p.split()) for p in (doc or "").strip().split("\n\n") if p.strip()]


def _first_sentence(text: str) -> str:
    return re.split(r"(?<=\.)\s+(?=[A-Z])", text, maxsplit=1)[0]


def _split_colon(sentence: str) -> tuple[str, str]:
    """(before, after) the first ": " outside parentheses; after is "" when there is none."""
    depth = 0
    for i, ch in enumerate(sentence):
        depth += (ch == "(") - (ch == ")")
        if depth == 0 and sentence.startswith(": ", i):
            return sentence[:i], sentence[i + 2:]
    return sentence, ""


def _clean(text: str) -> str:
    """One table cell: no note references, Markdown code, no final period."""
    return _md(_drop_doc_refs(text)).strip().rstrip(".").strip()


def _lower_first(text: str) -> str:
    """A description starts lower-case, as the registry's own ones do ("MPS-like" stays)."""
    if len(text) > 1 and text[0].isupper() and text[1].islower():
        return text[0].lower() + text[1:]
    return text


def _module_family(module: str) -> tuple[str, str]:
    """(family / paper, the rest of the sentence) from the first sentence of ``module``'s docstring."""
    paras = _paragraphs(importlib.import_module(module).__doc__)
    family, rest = _split_colon(_first_sentence(paras[0]))
    if not rest and len(paras) > 1:
        rest = _first_sentence(paras[1])
    return _clean(family), _lower_first(_clean(rest.split("; ")[0])) if rest else ""


def cluster_rows() -> list[Row]:
    from gpusched.baselines import POLICIES

    return [Row(e.name, _module_family(e.module)[0], _clean(e.summary), e.module) for e in POLICIES.entries()]


def _registry_rows(entries: Sequence[Entry[Any]]) -> list[Row]:
    """One row per entry: the family from its module's docstring, its summary (else the rest of
    that docstring's first sentence)."""
    rows = []
    for e in entries:
        family, rest = _module_family(e.module)
        rows.append(Row(e.name, family, e.summary or rest, e.module))
    return rows


def mechanism_rows() -> list[Row]:
    from gpusched_env.device.mechanisms import MECHANISMS

    return _registry_rows(MECHANISMS.entries())


def _list_entry(module: str, name: str) -> str:
    """The text of the ``- ``name``: ...`` item of ``module``'s docstring, up to its first "; "."""
    for para in _paragraphs(importlib.import_module(module).__doc__):
        for item in re.split(r"(?:^| )- (?=``)", para):
            head = f"``{name}``: "
            if item.startswith(head):
                return _clean(item[len(head):].split("; ")[0])
    return ""


def stage_rows() -> list[Row]:
    from gpusched_env.device.daris.scenario import STAGE_POLICIES, DarisScenario, make_scheduler

    scn = DarisScenario(name="doc_tables")
    rows = []
    for name in STAGE_POLICIES:
        module = type(make_scheduler(name, scn)).__module__
        family, rest = _module_family(module)
        rows.append(Row(name, family, _list_entry(module, name) or rest, module))
    return rows


def schedule_rows() -> list[Row]:
    from gpusched_env.pipeline.schedules import SCHEDULES

    return _registry_rows(SCHEDULES.entries())


def _table(rows: list[Row]) -> list[str]:
    out = ["| policy | family / paper | what it does | code |", "|---|---|---|---|"]
    for r in rows:
        path = r.module.replace(".", "/") + ".py"
        cells = [f"`{r.name}`", r.family, r.description, f"[`{path}`]({path})"]
        out.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return out


def render() -> str:
    """The policy tables of every level, as Markdown (ends with a newline)."""
    sections = [
        ("Cluster level (`gpusched/baselines/`)", cluster_rows()),
        ("Device level, kernel model (`tally_pairs`, `h100_pairs`)", mechanism_rows()),
        ("Device level, stage model (`daris_rt`)", stage_rows()),
        ("Pipeline level (`adaptra_14b`)", schedule_rows()),
    ]
    lines: list[str] = []
    for title, rows in sections:
        lines += [f"**{title}**", "", *_table(rows), ""]
    return "\n".join(lines)


def replace_block(text: str, block: str) -> str:
    """``text`` with the lines between the BEGIN and END markers replaced by ``block``."""
    if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        raise ValueError(f"expected one {BEGIN} line followed by one {END} line")
    head, rest = text.split(BEGIN + "\n", 1)
    tail = rest.split(END, 1)[1]
    return f"{head}{BEGIN}\n{block}{END}{tail}"


def block_of(text: str) -> str:
    """The text between the BEGIN and END marker lines of ``text``."""
    if text.count(BEGIN) != 1 or text.count(END) != 1:
        raise ValueError(f"expected one {BEGIN} line and one {END} line")
    return text.split(BEGIN + "\n", 1)[1].split(END, 1)[0]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gpusched.bench.doc_tables", description=__doc__.split("\n")[0])
    ap.add_argument("--write", metavar="FILE", help="replace the marked block of FILE instead of printing")
    args = ap.parse_args(argv)
    block = render()
    if args.write is None:
        sys.stdout.write(block)
        return 0
    path = Path(args.write)
    try:
        path.write_text(replace_block(path.read_text(), block))
    except (OSError, ValueError) as e:
        print(f"doc_tables: error: {path}: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
