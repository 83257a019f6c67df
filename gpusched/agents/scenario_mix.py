"""Training across scenarios (``gpusched-train mix=NAME``, ``conf/mix/NAME.yaml``): each training
episode runs on one *variant* of the training scenario, drawn uniformly from the run's one
``numpy.random.SeedSequence``.

A variant is the training scenario with dotted overrides (``workload.load: 0.9``,
``cluster.nodes.0.count: 8``; a key must exist unless written ``+key``) and optionally the workloads it
trains on; a list of values (a grid) is a range: ``workload.load: [0.7, 0.8, 0.9, 1.0]``. The mix also
names its *held-out* variants (written the same way): those the agents are evaluated on afterwards
(``gpusched.studies.robustness``). A training variant whose scenario and workloads equal a held-out one's is a
ConfigError naming both, so the held-out set stays out of training.

:class:`MixEnv` holds one env per variant (all built before training, so a variant whose observation or
action space differs from the first's is named at once: a flat model needs one node count; the set
network, ``agent=maskable_ppo_set``, reads any). ``reset`` draws the episode's variant; each inner env is
seeded at its first reset from the same SeedSequence (the ``seed`` given to ``reset`` is not used: the
run's seed already fixes every draw). ``info["variant"]`` names the episode's variant.

``cycle=True`` takes the variants in turn instead (episode ``e`` on variant ``e mod V``): the BC warm
start's teacher episodes and the evaluation callback use it, so a few episodes cover every variant
evenly; training episodes are drawn.
"""

from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from gpusched_env.config_util import ConfigError


@dataclass(frozen=True)
class TrainVariant:
    """One scenario of the mix: its name, the scenario config (overrides applied) and its workloads."""

    name: str
    raw: dict[str, Any]
    workloads: tuple[int, ...] | None


def _set(raw: dict[str, Any], key: str, value: Any, where: str) -> None:
    """Set dotted ``key`` (``+key`` may add a missing last part) in ``raw``; ConfigError naming ``where``."""
    add = key.startswith("+")
    parts = key.lstrip("+").split(".")
    node: Any = raw
    for i, p in enumerate(parts):
        last = i == len(parts) - 1
        if isinstance(node, list):
            if not p.isdigit() or int(p) >= len(node):
                raise ConfigError(f"{where}: {key!r}: {p!r} is not an index of a list of {len(node)}")
            if last:
                node[int(p)] = value
            else:
                node = node[int(p)]
        elif isinstance(node, dict):
            if p not in node and not (last and add):
                raise ConfigError(f"{where}: {key!r}: the scenario has no key {p!r} here "
                                  f"(known: {', '.join(map(str, node))}; write +{key} to add one)")
            if last:
                node[p] = value
            else:
                node = node[p]
        else:
            raise ConfigError(f"{where}: {key!r}: {'.'.join(parts[:i])} is not a mapping or list")


def expand(base: dict[str, Any], spec: Any, where: str) -> list[TrainVariant]:
    """The variants of one entry ``{name, overrides, workloads}``; a list value in ``overrides`` is a
    grid, one variant per combination (named ``NAME[key=value,...]``)."""
    if not isinstance(spec, dict) or not isinstance(spec.get("name"), str) or not spec["name"]:
        raise ConfigError(f"{where}: expected {{name: NAME, overrides: {{KEY: VALUE}}, workloads: [...]}}, got {spec!r}")
    unknown = sorted(set(spec) - {"name", "overrides", "workloads"})
    if unknown:
        raise ConfigError(f"{where}.{unknown[0]}: unknown key (name, overrides, workloads)")
    over = spec.get("overrides") or {}
    if not isinstance(over, dict):
        raise ConfigError(f"{where}.overrides: expected a mapping of dotted scenario keys to values, got {over!r}")
    wl = spec.get("workloads")
    if wl is not None and (not isinstance(wl, list) or not wl
                           or any(isinstance(w, bool) or not isinstance(w, int) or w < 0 for w in wl)):
        raise ConfigError(f"{where}.workloads: expected a non-empty list of workload indices or null, got {wl!r}")
    keys = list(over)
    grids = [over[k] if isinstance(over[k], list) and over[k] else [over[k]] for k in keys]
    out = []
    for combo in itertools.product(*grids):
        raw = copy.deepcopy(base)
        for k, v in zip(keys, combo, strict=True):
            _set(raw, str(k), v, f"{where}.overrides")
        ranged = [f"{k}={v}" for k, v, g in zip(keys, combo, grids, strict=True) if len(g) > 1]
        name = spec["name"] + (f"[{','.join(ranged)}]" if ranged else "")
        out.append(TrainVariant(name, raw, None if wl is None else tuple(int(w) for w in wl)))
    return out


def parse_mix(base: dict[str, Any], mix: dict[str, Any] | None) -> tuple[list[TrainVariant], list[TrainVariant]]:
    """The training and held-out variants of ``mix`` (``cfg.mix``) over the scenario config ``base``;
    ([], []) when the mix lists no variants. ConfigError naming the key when an entry is wrong or a
    training variant is a held-out one."""
    if not mix:
        return [], []
    unknown = sorted(set(mix) - {"name", "doc", "variants", "held_out"})
    if unknown:
        raise ConfigError(f"mix.{unknown[0]}: unknown key (name, doc, variants, held_out)")
    lists = []
    for key in ("variants", "held_out"):
        entries = mix.get(key) or []
        if not isinstance(entries, list):
            raise ConfigError(f"mix.{key}: expected a list of variants, got {entries!r}")
        lists.append([v for i, e in enumerate(entries) for v in expand(base, e, f"mix.{key}[{i}]")])
    train, held = lists
    names = [v.name for v in train + held]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ConfigError(f"mix: variant name {dup[0]!r} appears twice (names must be unique)")
    for t in train:
        for h in held:
            if t.raw == h.raw and (t.workloads is None or h.workloads is None or set(t.workloads) & set(h.workloads)):
                raise ConfigError(f"mix.variants: {t.name!r} is the held-out variant {h.name!r} (same scenario and "
                                  f"workloads): keep it out of training")
    return train, held


class MixEnv(gym.Env):  # type: ignore[type-arg]
    """One env per training variant; each episode on a variant drawn from ``seed_seq``, or taken in
    turn with ``cycle`` (module docstring)."""

    def __init__(self, envs: list[tuple[str, gym.Env]], seed_seq: np.random.SeedSequence,  # type: ignore[type-arg]
                 cycle: bool = False) -> None:
        if not envs:
            raise ValueError("a mix needs at least one variant")
        self.names = [n for n, _ in envs]
        self.envs = [e for _, e in envs]
        first = self.envs[0]
        for name, env in envs[1:]:
            if env.observation_space != first.observation_space or env.action_space != first.action_space:
                raise ConfigError(f"mix.variants: {name!r} gives observation {env.observation_space} / actions "
                                  f"{env.action_space}, {self.names[0]!r} gives {first.observation_space} / "
                                  f"{first.action_space}: one model needs one shape (agent=maskable_ppo_set reads "
                                  f"any cluster size)")
        self.observation_space = first.observation_space
        self.action_space = first.action_space
        pick, *inner = seed_seq.spawn(1 + len(self.envs))
        self._rng = np.random.default_rng(pick)
        self._first_seed: list[int | None] = [int(s.generate_state(1)[0]) for s in inner]
        self.cycle = cycle
        self.current = 0
        self.counts = [0] * len(self.envs)
        self.resets = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset()  # the draw uses the SeedSequence given at construction (module docstring)
        i = self.resets % len(self.envs) if self.cycle else int(self._rng.integers(len(self.envs)))
        self.resets += 1
        self.current = i
        self.counts[i] += 1
        first, self._first_seed[i] = self._first_seed[i], None
        obs, info = self.envs[i].reset(seed=first, options=options)
        return obs, dict(info, variant=self.names[i])

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        obs, r, term, trunc, info = self.envs[self.current].step(action)
        return obs, float(r), bool(term), bool(trunc), dict(info, variant=self.names[self.current])

    def action_masks(self) -> np.ndarray:
        """The current variant's valid actions (MaskablePPO reads this)."""
        return np.asarray(self.envs[self.current].unwrapped.action_masks())  # type: ignore[attr-defined]

    def close(self) -> None:
        for e in self.envs:
            e.close()
