"""A built wheel carries its configs: installed (not editable) into a fresh venv, gpusched-bench runs a
scenario from outside the repository, and the other apps' --help compose."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SKIP = shutil.ignore_patterns(".venv", ".git", "results", "outputs", "multirun", "runs", "build", "dist",
                              "*.egg-info", "__pycache__", ".*_cache")


@pytest.mark.slow
def test_wheel_install_runs_bench_outside_repo(tmp_path: Path) -> None:
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=SKIP, symlinks=True)  # build from a copy: no build/ or egg-info in the checkout
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(dist), str(src)], check=True, capture_output=True, timeout=300)
    (wheel,) = dist.glob("gpusched-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "gpusched_env/conf/bench.yaml" in names and "gpusched_env/conf/scenario/synthetic_small.yaml" in names
    assert "gpusched_env/conf/scenario_defaults/cluster.yaml" in names  # every cluster scenario composes it
    assert "gpusched_env/conf/real/config.yaml" in names and "gpusched_env/conf/train.yaml" in names
    assert "gpusched_env/conf/hydra/launcher/local_joblib.yaml" in names
    assert "gpusched/agents/pretrained/manifest.json" in names
    # exactly the project's two top-level packages: no `agents`, `bench`, `real` ... in a user's site-packages
    assert {n.split("/")[0] for n in names if ".dist-info/" not in n} == {"gpusched_env", "gpusched"}

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    # the dependencies come from this interpreter's site-packages, added by path: its .pth files (an
    # editable install of this project among them) are not run, so only the wheel provides gpusched
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    deps = [p for p in sys.path if p.endswith("site-packages")]
    (Path(site) / "_test_deps.pth").write_text("\n".join(deps) + "\n")
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--force-reinstall",
                    str(wheel)], check=True, capture_output=True, timeout=300)
    work = tmp_path / "elsewhere"
    work.mkdir()
    # the system-site-packages view may hold an editable install of this project: the venv's own
    # site-packages come first, and PYTHONPATH is cleared so the checkout is not importable
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    where = subprocess.run([str(py), "-c", "import gpusched_env, gpusched.bench as b; print(gpusched_env.__file__, b.__file__)"],
                           cwd=work, env=env, capture_output=True, text=True, check=True).stdout
    assert str(venv) in where and str(ROOT) not in where, where
    out = work / "out"
    proc = subprocess.run([str(venv / "bin" / "gpusched-bench"), "scenario=synthetic_small", "seeds=[0]",
                           "policies=[fifo]", "workers=1", "plots=false", f"out_dir={out}"],
                          cwd=work, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads((out / "results.json").read_text())
    assert doc["scenario"] == "synthetic_small" and doc["policies"]["fifo"]["metrics"]["jobs_finished"] == 40
    for app in ("gpusched-bench", "gpusched-train", "gpusched-real"):
        h = subprocess.run([str(venv / "bin" / app), "--help"], cwd=work, env=env, capture_output=True, text=True,
                           timeout=120)
        assert h.returncode == 0 and "Primary config directory not found" not in h.stderr, (app, h.stderr[-2000:])
        assert "scenario" in h.stdout
