"""Shipped checkpoints, usable by name: ``agent_path=pretrained:NAME`` (``gpusched-bench``, the service).

Each lives in this folder as ``NAME.zip`` (a ``gpusched-train`` model.zip, < 1 MB) and is described in
``manifest.json``: its scenario, env, the ``gpusched-train`` command that trained it (a step budget and
a seed, so the same machine type trains the same weights), the steps, the training wall time measured
here and the evaluation it got (the command and its table). ``make agents`` retrains every one into
``runs/pretrained/NAME`` and says whether each matches the shipped weights:

    python -m gpusched.agents.pretrained list
    python -m gpusched.agents.pretrained train [NAME ...] [--out runs/pretrained]   # what `make agents` runs
    python -m gpusched.agents.pretrained ship RUN_DIR/model.zip NAME [--actor-only]  # write gpusched/agents/pretrained/NAME.zip

A shipped file holds the trained weights and the env arguments, not the optimizer's moments (a fresh
optimizer state instead: the file is a third of the size; resuming training from it is not the run's).
``ship --actor-only`` (manifest ``"actor_only": true``) also zeroes the critic (the value network: PPO's
training signal, never used to play), for networks whose weights alone pass 1 MB; the weight comparisons
of such an entry then cover the actor, every parameter that chooses an action.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from gpusched_env.config_util import ConfigError

HERE = Path(__file__).resolve().parent
MANIFEST = HERE / "manifest.json"
PREFIX = "pretrained:"
KEYS = ("file", "scenario", "env_id", "agent", "command", "steps", "seed", "train_wall_s", "evaluation", "doc")
# parameters that only estimate the value (Stable-Baselines3's actor-critic names: the flat MLP policy's
# critic branch and head, the set policy's critic encoder); play never reads them
CRITIC = ("mlp_extractor.value_net.", "value_net.", "vf_features_extractor.")


def manifest() -> dict[str, dict[str, Any]]:
    """The shipped checkpoints by name (``manifest.json``); a ConfigError naming the file when it is wrong."""
    try:
        doc = json.loads(MANIFEST.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ConfigError(f"{MANIFEST}: not a readable JSON manifest ({type(e).__name__}: {e})") from None
    if not isinstance(doc, dict) or not all(isinstance(v, dict) for v in doc.values()):
        raise ConfigError(f"{MANIFEST}: expected an object of checkpoint name -> description")
    for name, entry in doc.items():
        missing = [k for k in KEYS if k not in entry]
        if missing:
            raise ConfigError(f"{MANIFEST}: checkpoint {name!r} lacks {', '.join(missing)}")
    return doc


def resolve(path: str | Path) -> str:
    """``pretrained:NAME`` as the shipped file's path; any other path as it is. ConfigError listing the
    known names when NAME is not one."""
    text = str(path)
    if not text.startswith(PREFIX):
        return text
    name = text[len(PREFIX):]
    known = manifest()
    if name not in known:
        raise ConfigError(f"agent_path {text!r}: no shipped checkpoint {name!r}; known: "
                          f"{', '.join(PREFIX + n for n in sorted(known)) or 'none'} (gpusched/agents/pretrained/manifest.json)")
    file = HERE / str(known[name]["file"])
    if not file.is_file():
        raise ConfigError(f"agent_path {text!r}: {file} is missing (reinstall, or `make agents` to retrain it)")
    return str(file)


def same_weights(a: str | Path, b: str | Path, actor_only: bool = False) -> float:
    """The largest absolute difference between the policy parameters of two model.zip files (inf when
    their parameter names or shapes differ); ``actor_only``: the critic's (:data:`CRITIC`) left out."""
    import io
    import zipfile

    import torch

    def params(p: str | Path) -> dict[str, Any]:
        with zipfile.ZipFile(p) as z:
            return dict(torch.load(io.BytesIO(z.read("policy.pth")), map_location="cpu", weights_only=True))

    pa, pb = params(a), params(b)
    if actor_only:
        pa, pb = ({k: v for k, v in p.items() if not k.startswith(CRITIC)} for p in (pa, pb))
    if pa.keys() != pb.keys() or any(pa[k].shape != pb[k].shape for k in pa):
        return float("inf")
    return max((float((pa[k] - pb[k]).abs().max()) for k in pa), default=0.0)


def ship(src: str | Path, name: str, actor_only: bool = False) -> Path:
    """``src`` (a gpusched-train model.zip) as ``NAME.zip`` here: same weights and env arguments, a fresh
    optimizer state, members compressed; ``actor_only``: the critic's parameters set to 0."""
    import tempfile
    import zipfile

    from gpusched.agents.adapter import META_MEMBER, load_model, read_meta, write_meta

    meta = read_meta(src)
    model = load_model(src, meta.get("algo"))
    pol = model.policy
    if actor_only:
        import torch

        with torch.no_grad():
            for key, param in pol.named_parameters():
                if key.startswith(CRITIC):
                    param.zero_()
    pol.optimizer = pol.optimizer_class(pol.parameters(), lr=pol.optimizer.param_groups[0]["lr"], **pol.optimizer_kwargs)
    dst = HERE / f"{name}.zip"
    with tempfile.TemporaryDirectory() as tmp:
        plain = Path(tmp) / "model.zip"
        model.save(str(plain))
        write_meta(plain, meta)
        with zipfile.ZipFile(plain) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zout:
            for item in zin.infolist():
                zout.writestr(item.filename, zin.read(item.filename))
    assert META_MEMBER in zipfile.ZipFile(dst).namelist()
    return dst


def train(names: list[str], out: Path) -> int:
    """Run each checkpoint's training command into ``out/NAME`` and compare with the shipped weights;
    0 when every one trained (a mismatch is reported, not an error: other machine types may differ)."""
    known = manifest()
    bad = [n for n in names if n not in known]
    if bad:
        raise ConfigError(f"no shipped checkpoint {bad[0]!r}; known: {', '.join(sorted(known))}")
    for name in names or sorted(known):
        entry = known[name]
        argv = shlex.split(str(entry["command"]))
        if argv[:1] != ["gpusched-train"]:
            raise ConfigError(f"{MANIFEST}: {name}: command must start with gpusched-train, got {argv[:1]}")
        run_dir = out / name
        cmd = [sys.executable, "-m", "gpusched.agents.train", *argv[1:], f"out_dir={run_dir}", "overwrite=true"]
        print(f"[{name}] {shlex.join(cmd)}  (took {entry['train_wall_s']} s when shipped)", flush=True)
        t0 = time.perf_counter()
        rc = subprocess.call(cmd)
        if rc != 0:
            print(f"[{name}] training failed (exit code {rc})", flush=True)
            return rc
        actor = bool(entry.get("actor_only", False))
        diff = same_weights(run_dir / "model.zip", HERE / str(entry["file"]), actor)
        print(f"[{name}] trained in {time.perf_counter() - t0:.0f} s; largest weight difference to the shipped "
              f"checkpoint{' (actor)' if actor else ''}: {diff:.3g}{' (the same weights)' if diff == 0 else ''}",
              flush=True)
    return 0


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m gpusched.agents.pretrained", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list", help="the shipped checkpoints: name, scenario, env, steps, seed")
    t = sub.add_parser("train", help="retrain shipped checkpoints (all by default) and compare their weights")
    t.add_argument("names", nargs="*")
    t.add_argument("--out", type=Path, default=Path("runs/pretrained"))
    s = sub.add_parser("ship", help="copy a trained model.zip here as NAME.zip (weights and env arguments)")
    s.add_argument("model")
    s.add_argument("name")
    s.add_argument("--actor-only", action="store_true", help="zero the critic (not used to play) to fit 1 MB")
    a = ap.parse_args(argv)
    try:
        if a.cmd == "ship":
            dst = ship(a.model, a.name, a.actor_only)
            diff = same_weights(a.model, dst, a.actor_only)
            print(f"wrote {dst} ({dst.stat().st_size:,} bytes; largest weight difference"
                  f"{' (actor)' if a.actor_only else ''} {diff:.3g})")
            return
        if a.cmd == "list":
            for name, e in sorted(manifest().items()):
                print(f"{PREFIX}{name:<20} {e['scenario']:<18} {e['env_id']:<22} {e['steps']:>8,} steps  seed {e['seed']}"
                      f"  ({e['doc']})")
            return
        raise SystemExit(train(list(a.names), a.out))
    except ConfigError as e:
        print(f"python -m gpusched.agents.pretrained: error: {e}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
