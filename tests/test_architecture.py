"""The import direction of the three levels: contracts at the top of ``gpusched_env``, then the
cluster level; the device and pipeline levels never import the cluster level; nothing in
``gpusched_env`` imports a policy, an agent, the bench app or the real backend (nothing of ``gpusched``).
Above the model the apps, the subpackages of ``gpusched``, stand in a line, gpusched_env <-
gpusched.baselines <- gpusched.agents <- gpusched.bench <- gpusched.studies, with the real backend
(gpusched.real) beside the bench app (on gpusched_env, baselines and agents); no package imports one
above it, and no relative import crosses a package. The wheel's only top-level packages are
``gpusched_env`` and ``gpusched``."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "gpusched_env"
APPS = ("gpusched",)
"""What the model may never import: the package of every app (``gpusched`` and its subpackages)."""
BL, AG, BE, RE, ST = (f"gpusched.{p}" for p in ("baselines", "agents", "bench", "real", "studies"))
MAY_IMPORT: dict[str, tuple[str, ...]] = {
    "gpusched_env": (),
    BL: ("gpusched_env",),
    AG: ("gpusched_env", BL),
    BE: ("gpusched_env", BL, AG),
    RE: ("gpusched_env", BL, AG),
    ST: ("gpusched_env", BL, AG, BE),
}
"""Each project package (the model and the apps under ``gpusched``) and those it may import (besides itself)."""


@functools.cache
def _tree(source: str, filename: str) -> ast.Module:
    """``source`` parsed, once per text: the tests below scan the same files several times."""
    return ast.parse(source, filename)


@functools.cache
def _source_imports(source: str, filename: str) -> tuple[str, ...]:
    out: list[str] = []
    for node in ast.walk(_tree(source, filename)):
        if isinstance(node, ast.Import):
            out.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append(node.module)
    return tuple(out)


def _imports(path: Path) -> list[str]:
    """Every module an ``import`` or ``from ... import`` in ``path`` names (absolute), anywhere in it."""
    return list(_source_imports(path.read_text(), str(path)))


def _modules(sub: str = "") -> list[Path]:
    return sorted((PKG / sub).rglob("*.py"))


def _violations(files: list[Path], forbidden: tuple[str, ...]) -> list[str]:
    bad = []
    for f in files:
        for m in _imports(f):
            if any(m == x or m.startswith(x + ".") for x in forbidden):
                bad.append(f"{f.relative_to(ROOT) if f.is_relative_to(ROOT) else f.name} imports {m}")
    return bad


def test_model_never_imports_policies_agents_or_apps():
    assert _violations(_modules(), APPS) == []


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _reachable(start: str, graph: dict[str, set[str]]) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        m = todo.pop()
        for n in graph.get(m, ()):
            if n not in seen:
                seen.add(n)
                todo.append(n)
    return seen


def _graph() -> dict[str, set[str]]:
    """module -> the gpusched_env modules it imports (a package import counts its __init__)."""
    names = {_module_name(f): f for f in _modules()}
    graph: dict[str, set[str]] = {}
    for name, f in names.items():
        deps = set()
        for m in _imports(f):
            while m and m not in names:
                m = m.rpartition(".")[0]
            if m and m != name:
                deps.add(m)
        graph[name] = deps
    return graph


@pytest.mark.parametrize("level", ["device", "pipeline"])
def test_lower_levels_never_import_the_cluster_level(level):
    """Not directly, and not through another module (e.g. a scenario loader that imports the cluster)."""
    assert _violations(_modules(level), ("gpusched_env.cluster", "gpusched_env.envs", *APPS)) == []
    graph = _graph()
    bad = {}
    for f in _modules(level):
        name = _module_name(f)
        hit = sorted(m for m in _reachable(name, graph) if m.startswith(("gpusched_env.cluster", "gpusched_env.envs")))
        if hit:
            bad[name] = hit
    assert bad == {}


def test_contracts_never_import_a_level_implementation():
    """The contract modules may name the lower levels' spec leaves, nothing else below them."""
    contracts = [PKG / f"{m}.py" for m in ("types", "view", "allocation", "policy", "placement", "levels", "topology", "vocabulary")]
    leaves = {"gpusched_env.pipeline.spec", "gpusched_env.device.service"}
    bad = [v for v in _violations(contracts, ("gpusched_env.cluster", "gpusched_env.device", "gpusched_env.pipeline",
                                               "gpusched_env.envs"))
           if v.split(" imports ")[1] not in leaves]
    assert bad == []


def test_spec_leaves_import_nothing_from_the_package():
    for leaf in (PKG / "pipeline" / "spec.py", PKG / "device" / "service.py"):
        assert [m for m in _imports(leaf) if m.startswith("gpusched_env")] == []


def test_the_checker_sees_a_violation(tmp_path):
    """The AST scan finds imports inside functions too (a lazy import is still a dependency)."""
    f = tmp_path / "m.py"
    f.write_text("def f():\n    from gpusched.baselines import get_policy\n")
    assert _imports(f) == ["gpusched.baselines"]
    assert _violations([f], APPS) == ["m.py imports gpusched.baselines"]
    f.write_text("import gpusched_env.types\n")  # the model's own name is not the apps' package
    assert _violations([f], APPS) == []


def _package_files(pkg: str) -> list[Path]:
    return sorted((ROOT / pkg.replace(".", "/")).rglob("*.py"))


def _package_of(module: str) -> str:
    """The project package (a key of :data:`MAY_IMPORT`, or ``gpusched`` itself) ``module`` is in, else ''."""
    parts = module.split(".")
    if parts[0] == "gpusched_env":
        return "gpusched_env"
    if parts[0] == "gpusched":
        return ".".join(parts[:2])
    return ""


def _project_imports(path: Path) -> set[str]:
    """The project packages that ``path`` imports (``gpusched`` alone counts: it is no package of the line)."""
    return {_package_of(m) for m in _imports(path)} - {""}


def _order_violations(packages: dict[str, list[Path]]) -> list[str]:
    bad = []
    for pkg, files in packages.items():
        for f in files:
            for top in sorted(_project_imports(f) - {pkg} - set(MAY_IMPORT[pkg])):
                bad.append(f"{f.relative_to(ROOT) if f.is_relative_to(ROOT) else f.name} ({pkg}) imports {top}")
    return bad


def test_apps_import_only_the_packages_below_them():
    assert _order_violations({pkg: _package_files(pkg) for pkg in MAY_IMPORT}) == []


def test_the_order_check_sees_an_import_upwards(tmp_path):
    """agents importing the bench app (the circle the apps once had) is caught, lazily or not."""
    f = tmp_path / "m.py"
    f.write_text("import numpy\n\ndef f():\n    from gpusched.bench.level_runner import level_of\n")
    assert _order_violations({AG: [f]}) == ["m.py (gpusched.agents) imports gpusched.bench"]
    assert _order_violations({RE: [f]}) == ["m.py (gpusched.real) imports gpusched.bench"]
    assert _order_violations({BE: [f], ST: [f]}) == []
    f.write_text("import gpusched\n")  # the umbrella package is no way around the line
    assert _order_violations({BL: [f]}) == ["m.py (gpusched.baselines) imports gpusched"]


def test_no_relative_import_crosses_a_package():
    """``from .x import y`` stays inside its own package folder (``..`` never climbs out of it)."""
    bad = []
    for pkg in MAY_IMPORT:
        for f in _package_files(pkg):
            depth = len(f.relative_to(ROOT / pkg.replace(".", "/")).parts) - 1  # folders below the package root
            for node in ast.walk(_tree(f.read_text(), str(f))):
                if isinstance(node, ast.ImportFrom) and node.level > depth + 1:
                    bad.append(f"{f.relative_to(ROOT)}: from {'.' * node.level}{node.module or ''}")
    assert bad == []


def test_every_package_is_in_the_line():
    """Two top-level packages, the model and ``gpusched``; a new app is a subpackage of ``gpusched`` and
    must take its place in :data:`MAY_IMPORT` (pyproject's packages take ``gpusched.*``). The umbrella
    ``gpusched/__init__.py`` imports nothing."""
    found = {p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file()}
    assert found == {"gpusched_env", "gpusched"}
    apps = {f"gpusched.{p.name}" for p in (ROOT / "gpusched").iterdir() if (p / "__init__.py").is_file()}
    assert apps == set(MAY_IMPORT) - {"gpusched_env"}
    assert _imports(ROOT / "gpusched" / "__init__.py") == []


def test_backends_are_found_by_path_not_by_import():
    """The bench app reaches the real backend only through :data:`gpusched_env.backends.BACKENDS`'
    ``module:factory`` paths: every path resolves to a callable, and the package it names may not be
    imported by the bench app (so the seam, not an import, joins them)."""
    import importlib

    from gpusched_env.backends import BACKENDS

    for name, path in BACKENDS.items():
        module, _, attr = path.partition(":")
        assert callable(getattr(importlib.import_module(module), attr)), name
    assert _package_of(BACKENDS["real"].partition(":")[0]) == RE and RE not in MAY_IMPORT[BE]
    assert _order_violations({BE: _package_files(BE)}) == []
