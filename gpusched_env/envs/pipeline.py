"""``gpusched/Pipeline-v0``: per-stage warm-up counts of a pipeline-parallel job, iteration by iteration."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from gpusched_env.pipeline import greedy
from gpusched_env.pipeline.bench import workload_rng
from gpusched_env.pipeline.config import PipelineScenario
from gpusched_env.pipeline.config import load as load_pipeline
from gpusched_env.pipeline.dynamics import Workload, conditions, random_trace
from gpusched_env.pipeline.execute import IterationResult, execute
from gpusched_env.pipeline.run import RunSummary, jitter_scales
from gpusched_env.pipeline.warmup import adaptra_warmup, zb_warmup
from gpusched_env.scenario_file import read_scenario_file

DELAY_SCALE_MS = 100.0  # choice: observation scale of link delays (the paper's delays are 10-60 ms)


class PipelineEnv(gym.Env[np.ndarray, np.ndarray]):
    """
    ## Description

    One pipeline-parallel training job of a pipeline scenario (``conf/scenario/NAME.yaml`` with
    ``level: pipeline``, default ``adaptra_14b``) running iteration after iteration while its links
    slow down and heal (a random dynamic trace per episode). Before each iteration the agent sets
    every stage's warm-up forward count; the iteration is then planned by the ZeroBubble-family list
    scheduler (warm-up, then B > F > W; :mod:`gpusched_env.pipeline.greedy`) for the conditions the
    agent observed in the previous iteration, with CPU-delegated sends, and executed under this
    iteration's real link delays and stage slowdowns (:mod:`gpusched_env.pipeline.execute`).
    Adaptra is the rule-based agent of this env (:meth:`adaptra_action`).

    ## Action Space

    ``MultiDiscrete([W] * S)`` with ``W = min(M, activation_limit)``: stage ``s`` runs ``a[s] + 1``
    warm-up forwards. ``action_masks()`` (and ``info["action_mask"]``, the same function) is the
    concatenation of the per-stage masks: all ``W`` counts are valid (the planner caps memory
    itself), so the mask exists for MaskablePPO and for later envs that restrict it.

    ## Observation Space

    ``Box(0, 10, (2S + 1,), float32)``: the previous iteration's link delays (S-1 values, / 100 ms),
    stage slowdowns (S values, factor - 1), its iteration time (/ 1000 ms) and the fraction of the
    episode done.

    ## Rewards

    ``-(iteration time in seconds)`` per step, overhead included, so the return is minus the
    episode's total training time.

    ## Starting State

    Healthy observation; the trace comes from ``np_random`` (seeded by ``reset(seed=...)``), as
    does the per-operation jitter; without a seed and with ``run_seeds``, from
    ``SeedSequence(run_seed)`` of a run seed drawn from that pool. ``reset(options={"workload": i})``
    (or a pool ``workloads`` of case indices) runs the scenario's workload (case) ``i`` instead of a
    random trace; with ``reset(seed=s)`` its jitter is drawn exactly as ``gpusched-bench`` draws it
    for seed ``s`` (:func:`gpusched_env.pipeline.bench.workload_rng`).

    ## Episode End

    Terminated after the trace's iterations (``scenario.env.iterations`` for random traces);
    truncated after ``max_steps`` steps if set. At the end ``info["metrics"]`` holds the run's
    pipeline metrics (``iteration_time_ms``, ``throughput_samples_s``, bubble fractions, peak
    activations: the keys of ``gpusched-bench``) and ``info["series"]`` the iteration times.

    ## Arguments

    ``scenario`` (name or :class:`~gpusched_env.pipeline.config.PipelineScenario`), ``workloads``
    (case indices run instead of random traces, one drawn per episode; None = random traces),
    ``run_seeds`` (pool of run seeds or None), ``max_steps``.

    ## Version History

    * v0: initial version.
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, scenario: str | PipelineScenario = "adaptra_14b", workloads: list[int] | None = None,
                 run_seeds: list[int] | None = None, max_steps: int | None = None) -> None:
        super().__init__()
        self.scn = _load(scenario) if isinstance(scenario, str) else scenario
        n_wl = len(self.scn.workloads)
        if workloads is not None and (not workloads or any(not 0 <= int(w) < n_wl for w in workloads)):
            raise ValueError(f"workloads must be case indices in 0..{n_wl - 1} or None, got {workloads}")
        self.workloads = None if workloads is None else [int(w) for w in workloads]
        self.run_seeds = None if run_seeds is None else [int(s) for s in run_seeds]
        if max_steps is not None and max_steps < 1:
            raise ValueError(f"max_steps must be >= 1 or None, got {max_steps}")
        self.max_steps = max_steps
        self.model = self.scn.job.model().with_conditions(comm="cpu", split_backward=True)
        self.S, self.M = self.model.stages, self.model.microbatches
        self.max_warm = min(self.M, self.model.activation_limit)
        self.action_space = spaces.MultiDiscrete([self.max_warm] * self.S)
        self.observation_space = spaces.Box(0.0, 10.0, (2 * self.S + 1,), dtype=np.float32)
        self._wl: Workload | None = None
        self._i = 0
        self._seen = (self.model.link_delay_ms, self.model.slowdown)
        self._planned = self._seen  # the conditions the last paid-for plan was made for
        self._last_ms = 0.0
        self._rng = self.np_random
        self._results: list[IterationResult] = []
        self._times: list[float] = []

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        options = options or {}
        run_seed = seed if seed is not None or not self.run_seeds else int(self.np_random.choice(self.run_seeds))
        case = options.get("workload")
        if case is None and self.workloads is not None:
            case = int(self.np_random.choice(self.workloads))
        if case is not None:
            self._wl = self.scn.workloads[int(case)]
            n = len(self.scn.workloads)
            self._rng = self.np_random if run_seed is None else workload_rng(run_seed, int(case), n)
        else:
            self._rng = self.np_random if run_seed is None or seed is not None else np.random.default_rng(run_seed)
            e = self.scn.env
            self._wl = random_trace(self._rng, self.S, e.iterations, e.delays_ms, e.change_prob)
        self._i = 0
        self._results, self._times = [], []
        self._seen = (self.model.link_delay_ms, self.model.slowdown)
        self._planned = self._seen
        self._last_ms = 0.0
        return self._obs(), {"action_mask": self.action_masks()}

    def action_masks(self) -> np.ndarray:
        """Valid warm-up counts, per stage, concatenated (MaskablePPO's MultiDiscrete layout)."""
        return np.ones(self.S * self.max_warm, dtype=bool)

    def step(self, action: Any):
        if self._wl is None:
            raise RuntimeError("call reset() before step()")
        a = np.asarray(action, dtype=np.int64).reshape(-1)
        if a.shape != (self.S,) or a.min() < 0 or a.max() >= self.max_warm:
            raise ValueError(f"action must be {self.S} warm-up indices in 0..{self.max_warm - 1}, got {a.tolist()}")
        warm = tuple(int(x) + 1 for x in a)
        delay, slow = conditions(self._wl, self._i, self.S, self.scn.dynamics.host_path_delay_ms)
        orders, _ = greedy.plan(self.model.with_conditions(*self._seen), warm)
        scale = jitter_scales(self._rng, self.scn.dynamics.jitter_cv, self.S, self.M)
        r = execute(self.model.with_conditions(delay, slow), orders, scale)
        t = r.iteration_ms
        if self._seen != self._planned:  # a plan for new conditions: its planning time (as the runner)
            t += self.scn.dynamics.replan_ms
            self._planned = self._seen
        self._seen, self._last_ms = (delay, slow), t
        self._results.append(r)
        self._times.append(t)
        self._i += 1
        done = self._i >= self._wl.iterations
        info: dict[str, Any] = {"action_mask": self.action_masks(), "iteration_ms": t, "warmup": warm}
        if done:
            summary = RunSummary(tuple(self._times), tuple(self._results), 0)
            info["metrics"] = summary.metrics(self.M * self.scn.job.microbatch_size)
            info["series"] = {"iteration_ms": list(summary.iteration_ms)}
        trunc = not done and self.max_steps is not None and self._i >= self.max_steps
        return self._obs(), -t / 1000.0, done, trunc, info

    def adaptra_action(self) -> np.ndarray:
        """Adaptra's warm-up rule for the delays observed so far, as an action."""
        w = adaptra_warmup(self.model.with_conditions(*self._seen).durations()[0], self._seen[0])
        return np.minimum(np.array(w) - 1, self.max_warm - 1)

    def zb_action(self) -> np.ndarray:
        """ZeroBubble's default warm-up (2(S-1-s)+1), as an action."""
        return np.minimum(np.array(zb_warmup(self.S)) - 1, self.max_warm - 1)

    def _obs(self) -> np.ndarray:
        delay, slow = self._seen
        iters = self._wl.iterations if self._wl is not None else 1
        x = np.concatenate([np.asarray(delay) / DELAY_SCALE_MS, np.asarray(slow) - 1.0,
                            [self._last_ms / 1000.0, self._i / iters]])
        return np.clip(x, 0.0, 10.0).astype(np.float32)


def _load(name: str) -> PipelineScenario:
    """``conf/scenario/NAME.yaml`` (or a path) as a pipeline scenario."""
    return load_pipeline(read_scenario_file(name, level="pipeline"), name)
