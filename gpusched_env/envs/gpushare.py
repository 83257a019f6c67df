"""``gpusched/GPUShare-v0``: one GPU shared by several clients; the agent decides what launches next."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from gpusched_env.device import bench as device_bench
from gpusched_env.device.bench import DeviceScenario
from gpusched_env.device.daris.scenario import DarisScenario
from gpusched_env.device.decisions import DarisDriver, PairDriver, first_choice
from gpusched_env.scenario_file import read_scenario_file
from gpusched_env.vocabulary import current_name

__all__ = ["GPUShareEnv", "first_choice"]


class GPUShareEnv(gym.Env[np.ndarray, np.int64]):
    """
    ## Description

    One GPU of a device-level scenario (``conf/scenario/NAME.yaml`` with ``level: device``):
    ``tally_pairs`` / ``h100_pairs`` (an HP inference service beside a BE training job, the kernel
    model of :mod:`gpusched_env.device.engine`) or ``daris_rt`` (periodic HP / LP DNN tasks on the
    DARIS stage model, :mod:`gpusched_env.device.daris`). The agent is the device-level scheduler
    (:mod:`gpusched_env.device.decisions`): at every decision point (a request arrival, a kernel
    group or stage completion, a queued BE group or a free stream) it picks the next launch, or holds
    BE / LP work back until the next event. A pair episode uses workload ``workload`` (or one drawn
    per episode from ``workloads``, default all); the base sharing mechanism (``mechanism``, default ``mps_priority``) sets the
    SM shares of what was launched. A taskset episode runs DARIS's admission and contexts.

    ## Action Space

    Pairs: ``Discrete(3)``: 0 launch the HP client's queued kernel group, 1 launch the BE one,
    2 hold BE (valid only while no HP group waits). Tasksets: ``Discrete(9)``: serve queue ``a``
    (DARIS's order: highLastDelayed, highLast, highDelayed, highOther, lowLastDelayed, lowDelayed,
    lowLast, lowOther; EDF head) of the context with a free stream, or 8 hold (only LP waits there).
    ``action_masks()`` and ``info["action_mask"]`` are the same function; an invalid action is a
    no-op that costs ``invalid_penalty`` (default 1).
    Always taking the first valid action (:func:`first_choice`) reproduces the base mechanism (pairs)
    or DARIS (tasksets) exactly as ``gpusched-bench`` runs it.

    ## Observation Space

    Pairs: ``Box(0, 10, (17,))``: per client phase one-hot (idle, host, queued, running), waiting
    for a decision, SM share, position in its sequence, waiting requests / 10; then the fraction of the
    episode done. Tasksets: ``Box(-10, 10, (145,))``: per context (8, zero-padded) free streams /
    streams, is the deciding context, queue lengths / 10, head slack (virtual deadline − now) / 50 ms;
    then the fraction done.

    ## Rewards

    ``−violations + λ · be_progress`` per step (λ = ``be_weight``, default 1): violations = HP
    requests over their SLO (``slo_factor`` × standalone request time, default the scenario's or 2),
    counted when they end (or, unfinished, at the end), or jobs past their deadline, counted when the
    deadline passes unfinished or when they end late; be_progress = BE
    work done ÷ its standalone iterations in the run (the running iteration counted by the share of its
    standalone kernel time completed, kernel group by kernel group), or LP jobs done ÷ LP jobs released.

    ## Starting State

    ``reset(seed=s)`` runs seed ``s`` of the scenario (arrivals, phases, kernel shapes from
    ``SeedSequence(s)``), as ``gpusched-bench`` runs seed ``s``; without a seed, one drawn from
    ``run_seeds`` if given, else from ``np_random``.

    ## Episode End

    Terminated at the scenario's ``duration_s`` (or the ``duration_s`` argument); truncated after
    ``max_steps`` steps if set. ``info["metrics"]`` holds the run's device metrics at the end (the
    same keys as ``gpusched-bench``'s run), ``info["series"]`` its plot series.

    ## Arguments

    ``scenario`` (name or typed device scenario), ``workload`` (index or None = drawn from
    ``workloads``), ``workloads`` (pool of indices, None = all), ``run_seeds`` (pool of run seeds or
    None), ``mechanism`` (pairs' base mechanism), ``slo_factor``, ``be_weight``, ``invalid_penalty``,
    ``duration_s``, ``max_steps``.

    ## Version History

    * v0: initial version.
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, scenario: str | DeviceScenario | DarisScenario = "tally_pairs", workload: int | None = None,
                 mechanism: str = "mps_priority", slo_factor: float | None = None, be_weight: float = 1.0,
                 duration_s: float | None = None, invalid_penalty: float = 1.0, workloads: list[int] | None = None,
                 run_seeds: list[int] | None = None, max_steps: int | None = None) -> None:
        super().__init__()
        scn = _load(scenario) if isinstance(scenario, str) else scenario
        if duration_s is not None:
            if not math.isfinite(duration_s) or duration_s <= 0:
                raise ValueError(f"duration_s must be a number of seconds > 0 or None, got {duration_s}")
            scn = replace(scn, duration_s=float(duration_s))
        for name, value in (("be_weight", be_weight), ("invalid_penalty", invalid_penalty)):
            if not math.isfinite(value):
                raise ValueError(f"{name} must be finite, got {value}")
        if slo_factor is not None and (not math.isfinite(slo_factor) or slo_factor <= 0):
            raise ValueError(f"slo_factor must be > 0 or None, got {slo_factor}")
        if workload is not None and not 0 <= workload < len(scn.workload_names):
            raise ValueError(f"workload must be in [0, {len(scn.workload_names) - 1}] or None, got {workload}")
        n_wl = len(scn.workload_names)
        self.workloads = list(range(n_wl)) if workloads is None else [int(w) for w in workloads]
        if not self.workloads or any(not 0 <= w < n_wl for w in self.workloads):
            raise ValueError(f"workloads must be indices in 0..{n_wl - 1}, got {workloads}")
        self.run_seeds = None if run_seeds is None else [int(s) for s in run_seeds]
        if max_steps is not None and max_steps < 1:
            raise ValueError(f"max_steps must be >= 1 or None, got {max_steps}")
        self.max_steps, self._steps = max_steps, 0
        mechanism = current_name(mechanism, "mechanism")
        if mechanism not in device_bench.MECHANISM_POLICIES:
            raise ValueError(f"mechanism must be one of {list(device_bench.MECHANISM_POLICIES)}, got {mechanism!r}")
        self.scn, self.workload, self.mechanism, self.be_weight = scn, workload, mechanism, float(be_weight)
        self.slo_factor, self.invalid_penalty = slo_factor, float(invalid_penalty)
        driver = DarisDriver if isinstance(scn, DarisScenario) else PairDriver
        self.n_actions = int(driver.n_actions)
        self.action_space = spaces.Discrete(self.n_actions)
        lo = -10.0 if driver is DarisDriver else 0.0
        self.observation_space = spaces.Box(lo, 10.0, (driver.obs_size,), np.float32)
        self.driver: PairDriver | DarisDriver | None = None

    def _make_driver(self, w: int) -> PairDriver | DarisDriver:
        if isinstance(self.scn, DarisScenario):
            return DarisDriver(self.scn, w)
        factor = self.slo_factor or self.scn.hp_slo_factor or 2.0
        return PairDriver(self.scn.setup(w), self.mechanism, self.scn.mechanisms.get(self.mechanism), factor)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        if seed is not None:
            run_seed = seed
        elif self.run_seeds:
            run_seed = int(self.np_random.choice(self.run_seeds))
        else:
            run_seed = int(self.np_random.integers(2**31 - 1))
        w = self.workload if self.workload is not None else int(self.np_random.choice(self.workloads))
        self._steps = 0
        self.driver = self._make_driver(w)
        self.driver.reset(run_seed)
        self.driver.advance()
        return self.driver.obs(), self._info()

    def action_masks(self) -> np.ndarray:
        """Valid actions now (sb3-contrib MaskablePPO reads this); the same array as info["action_mask"]."""
        assert self.driver is not None, "call reset() first"
        if self.driver.ended:
            m = np.zeros(self.n_actions, dtype=np.bool_)
            m[-1] = True
            return m
        return self.driver.mask()

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        assert self.driver is not None, "call reset() first"
        a = int(action)
        if not 0 <= a < self.n_actions:
            raise ValueError(f"action must be in [0, {self.n_actions - 1}], got {a}")
        invalid = not self.driver.ended and not self.action_masks()[a]
        if not self.driver.ended and not invalid:
            self.driver.apply(a)
            self.driver.advance()
        miss, be = self.driver.terms()
        self._steps += 1
        info = self._info()
        info["invalid"] = invalid
        if self.driver.ended:
            info["metrics"], info["series"] = self.driver.metrics(), self.driver.series()
        reward = -miss + self.be_weight * be - (self.invalid_penalty if invalid else 0.0)
        trunc = not self.driver.ended and self.max_steps is not None and self._steps >= self.max_steps
        return self.driver.obs(), reward, self.driver.ended, trunc, info

    def _info(self) -> dict[str, Any]:
        return {"action_mask": self.action_masks(), "time_s": float(self.driver.sim.t) if self.driver else 0.0}


def _load(name: str) -> DeviceScenario | DarisScenario:
    raw = read_scenario_file(name, level="device")
    return device_bench.load({k: v for k, v in raw.items() if k != "level"}, name)
