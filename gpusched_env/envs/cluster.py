"""``gpusched/Cluster-v0``: the simulated GPU cluster as a Gymnasium environment."""

from __future__ import annotations

import bisect
from itertools import compress
from operator import attrgetter
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from gpusched_env.cluster.build import WorkloadCache, build_simulator
from gpusched_env.cluster.simulator import Simulator
from gpusched_env.envs.observe import OBS_HIGH, OBS_LOW, DecisionBuilder, JobCache, obs_size
from gpusched_env.envs.options import (
    DEFAULT_PLACEMENTS,
    OPTION_NAMES,
    OptionSet,
    PlacementFactory,
    pal_params,
)
from gpusched_env.envs.tokens import (
    DEFAULT_MAX_NODES,
    DEFAULT_MAX_QUEUE,
    check_sizes,
    pad_mask,
    to_tokens,
    token_space,
    window_action,
)
from gpusched_env.metrics import J_PER_KWH, RunResult
from gpusched_env.policy import Policy
from gpusched_env.scenario import Scenario, load_scenario
from gpusched_env.types import Decision, Job, Start
from gpusched_env.view import ClusterView

_ARRIVAL, _JOB_ID, _TRACKED = attrgetter("arrival_s"), attrgetter("job_id"), attrgetter("tracked")


class _JctIntegral:
    """S(t) = sum over tracked jobs of their time in the system up to t (so S(end) = total JCT), and
    Q(t) = sum of half its square (so Q(end) = sum of JCT^2 / 2): the integral of each job's age."""

    def __init__(self, jobs: list[Job]) -> None:
        arr = np.sort(np.array(list(compress(map(_ARRIVAL, jobs), map(_TRACKED, jobs))), dtype=np.float64))
        # Python lists (the same floats): one bisect and two float reads per call, no numpy calls
        self.arrivals: list[float] = arr.tolist()
        self.cum: list[float] = np.concatenate([[0.0], np.cumsum(arr)]).tolist()
        self.cum2: list[float] = np.concatenate([[0.0], np.cumsum(arr * arr)]).tolist()
        self.n_fin = 0
        self.fin_sum = 0.0
        self.fin_a = 0.0  # finished jobs: sum of arrivals, of squared arrivals, of squared JCTs
        self.fin_a2 = 0.0
        self.fin_q = 0.0

    def finish(self, t: float, arrival: float = 0.0) -> None:
        self.n_fin += 1
        self.fin_sum += t
        self.fin_a += arrival
        self.fin_a2 += arrival * arrival
        self.fin_q += (t - arrival) ** 2

    def at(self, t: float) -> float:
        n = bisect.bisect_right(self.arrivals, t)
        return (n * t - self.cum[n]) - (self.n_fin * t - self.fin_sum)

    def at2(self, t: float) -> float:
        n = bisect.bisect_right(self.arrivals, t)
        arrived = n * t * t - 2.0 * t * self.cum[n] + self.cum2[n]  # sum of (t - a)^2
        past_finish = self.n_fin * t * t - 2.0 * t * self.fin_a + self.fin_a2 - self.fin_q
        return 0.5 * (arrived - past_finish)


class ClusterEnv(gym.Env[np.ndarray, np.int64]):
    """
    ## Description

    A calibrated GPU cluster (:class:`gpusched_env.cluster.simulator.Simulator`) running one workload of a
    scenario (``conf/scenario/NAME.yaml``). Decision points are scheduling events: job arrivals,
    completions, node failures/repairs and round ticks every ``round_s`` seconds. At a decision
    point the agent starts queued jobs one action at a time until it picks "done" or no placement
    is valid any more; the starts taken at one decision point form one batch applied with
    ``Simulator.apply``; the simulation then advances to the next decision point at which at least
    one start is possible (points where nothing can start are passed over inside the simulator,
    their time still counts in the reward). A round tick is a decision point only when the agent
    left a valid start untaken at the point before it (it waits for the next round); ticks at which
    nothing could start are never scheduled. The agent never preempts or migrates (started jobs keep their GPUs);
    round-based heuristics that do (PAL, LAS, ...) run through :meth:`step_decisions` (below).

    ## Action Space

    ``Discrete(K * P + 1)``: action ``a < K * P`` starts the job in queue slot ``a // P`` with
    placement option ``a % P``; action ``K * P`` is "done". Queue slots: the first ``fifo_slots``
    pending jobs by arrival, then the pending jobs with the least work estimate (so skipping the head
    of the line, backfilling, is possible). Placement options (``options``, default all five, see
    :mod:`gpusched_env.envs.options`): ``pal`` (PAL's L x V choice), ``pm_first``, ``packed``,
    ``spread``, ``least_interference`` (co-location allowed). ``action_masks()`` and
    ``info["action_mask"]`` come from one function. "Done" is masked only when the cluster would
    sit idle (nothing running, nothing started yet at this point, a start possible), so no policy
    can stall a run. An invalid action is a no-op that costs
    ``invalid_penalty``; after ``max_actions_per_decision`` actions at one point, "done" is implied.

    ## Observation Space

    ``Box(-1, 10, (n_nodes * 8 + K * 11 + 8,), float32)``, always finite: per node (free GPUs,
    up GPUs, mean slowdown factor of free GPUs per class, power, co-located load), per queue slot
    (present, GPUs, class, waiting time, work estimate, fits now, demand / free), global (time of
    day, load, queue length, running jobs, queued demand, starts in this batch). Layout:
    :mod:`gpusched_env.envs.observe`.

    ``tokens=True``: the same numbers as sets (a ``Dict`` of node rows padded to ``max_nodes``, window
    slot rows padded to ``max_queue``, a node presence mask and the global row) and
    ``Discrete(max_queue * P + 1)`` actions, so a set network fits any cluster size and window:
    :mod:`gpusched_env.envs.tokens`.

    ## Rewards

    ``-(tracked jobs in the system) x (elapsed seconds) x reward_scale`` for the time between
    decision points, given on the step that ends the decision point ("done" or the last possible
    start). The episode return is therefore ``-(total JCT of the tracked jobs) x reward_scale``
    exactly (``reward_scale`` default ``1/3600``: job-hours). Optional: ``- energy_weight x kWh``
    consumed; ``- slo_weight`` per job finishing after its deadline; an age-weighted (tail) term
    ``- age_weight x (sum of each job's age x elapsed) / age_scale_s x reward_scale``, so a job of age
    A costs ``(1 + age_weight x A / age_scale_s) x reward_scale`` per second in the system and the
    return adds ``- age_weight x sum(JCT^2) / (2 x age_scale_s) x reward_scale`` (a convex JCT cost:
    a job kept waiting grows dearer, which holds back the tail). An invalid action gives
    ``-invalid_penalty``. Background (untracked) jobs count in no reward or metric, like the
    metrics; the observation does not say which jobs are tracked.

    ## Starting State

    ``reset`` picks a workload from ``workloads`` (uniformly from ``np_random``) and a run seed
    (from ``run_seeds`` if given, else ``np_random``); the workload jobs, the simulator seed and
    the GPU variability all derive from the run seed exactly as in ``gpusched-bench``
    (:func:`gpusched_env.cluster.build.build_simulator`). ``options={"workload": i, "run_seed": s}`` fixes them.

    ## Episode End

    Terminated when every tracked job has finished (or the simulation cannot go on: nothing left
    to run, or a stall). Truncated after ``max_steps`` steps when set.

    ## Arguments

    ``scenario`` (name or :class:`~gpusched_env.scenario.Scenario`), ``workloads`` (indices, default
    all), ``run_seeds`` (pool of run seeds or None), ``queue_slots`` K (16), ``fifo_slots`` (8),
    ``options`` (names), ``reward_scale``, ``energy_weight``, ``slo_weight``, ``age_weight`` (0: off)
    and ``age_scale_s`` (86,400), ``invalid_penalty``,
    ``max_actions_per_decision`` (64), ``max_steps`` (None), ``round_s`` (scenario's), ``pal``
    (PAL placement parameters, default the scenario's ``policies.pal``), ``placements`` (factory of
    the exclusive placement options or its ``"module:function"`` path; default the heuristics' own,
    ``gpusched.baselines.env_options:exclusive_placements``), ``tokens`` (False), ``max_nodes`` (64) and
    ``max_queue`` (32) (the token observation's padding).

    Heuristic passthrough: ``reset(options={"passthrough": True, "round_s": ..., "events": ...})``
    stops at every decision point of the policy's schedule and :meth:`step_decisions` applies any
    decision batch (starts, preemptions, migrations); :func:`run_policy_in_env` drives any policy so.

    ## Version History

    * v0: initial version; later ``age_weight`` / ``age_scale_s`` (an optional reward term, off by
      default: the observation, actions and default reward are unchanged) and ``tokens`` (an optional
      observation, off by default).
    """

    metadata: dict[str, Any] = {"render_modes": []}
    _every_tick = False  # every round tick a candidate decision point in agent mode (Cluster-v1)
    _own_tokens = False  # a subclass that builds its own token observation (Cluster-v1)

    def __init__(
        self,
        scenario: str | Scenario = "synthetic_philly",
        workloads: list[int] | None = None,
        run_seeds: list[int] | None = None,
        queue_slots: int = 16,
        fifo_slots: int = 8,
        options: list[str] | tuple[str, ...] = OPTION_NAMES,
        reward_scale: float = 1.0 / 3600.0,
        energy_weight: float = 0.0,
        slo_weight: float = 0.0,
        invalid_penalty: float = 1.0,
        max_actions_per_decision: int = 64,
        max_steps: int | None = None,
        round_s: float | None = None,
        pal: dict[str, Any] | None = None,
        workload_cache: int = 8,
        placements: str | PlacementFactory = DEFAULT_PLACEMENTS,
        age_weight: float = 0.0,
        age_scale_s: float = 86400.0,
        tokens: bool = False,
        max_nodes: int = DEFAULT_MAX_NODES,
        max_queue: int = DEFAULT_MAX_QUEUE,
    ) -> None:
        super().__init__()
        self.scn = load_scenario(scenario) if isinstance(scenario, str) else scenario
        self.topo = self.scn.cluster.topology()
        n_wl = len(self.scn.workload_names)
        self.workloads = list(range(n_wl)) if workloads is None else [int(w) for w in workloads]
        if not self.workloads or any(not 0 <= w < n_wl for w in self.workloads):
            raise ValueError(f"workloads must be indices in 0..{n_wl - 1}, got {workloads}")
        self.run_seeds = None if run_seeds is None else [int(s) for s in run_seeds]
        if queue_slots < 1 or not 0 <= fifo_slots <= queue_slots:
            raise ValueError(f"need queue_slots >= 1 and 0 <= fifo_slots <= queue_slots, got {queue_slots}, {fifo_slots}")
        self.k = int(queue_slots)
        self.fifo_slots = int(fifo_slots)
        self._option_args = (tuple(options), pal, placements)
        self._option_sets: dict[str, OptionSet] = {}  # by PAL parameters (a workload's lf may differ)
        self.option_set = self._options_for(self.workloads[0])
        self._shares = bool(self.scn.cluster.max_jobs_per_gpu > 1 and not self.option_set.exclusive.all())
        self.reward_scale = float(reward_scale)
        self.energy_weight = float(energy_weight)
        self.slo_weight = float(slo_weight)
        if age_weight < 0 or age_scale_s <= 0:
            raise ValueError(f"need age_weight >= 0 and age_scale_s > 0, got {age_weight}, {age_scale_s}")
        self.age_weight = float(age_weight)
        self.age_scale_s = float(age_scale_s)
        self.invalid_penalty = float(invalid_penalty)
        self.max_actions_per_decision = int(max_actions_per_decision)
        self.max_steps = max_steps
        self.default_round_s = self.scn.round_for("agent") if round_s is None else round_s
        self.n_actions = self.k * len(self.option_set) + 1
        self.action_space = spaces.Discrete(self.n_actions)
        self.observation_space = spaces.Box(
            OBS_LOW, OBS_HIGH, (obs_size(self.topo.n_nodes, self.k),), dtype=np.float32
        )
        self.tokens = bool(tokens)
        self.max_nodes, self.max_queue = int(max_nodes), int(max_queue)
        if self.tokens:  # sets of node and slot rows (gpusched_env/envs/tokens.py)
            if type(self) is not ClusterEnv and not self._own_tokens:
                raise ValueError(f"tokens is built for gpusched/Cluster-v0 and -v1 only, not {type(self).__name__}")
            check_sizes(self.topo.n_nodes, self.k, self.max_nodes, self.max_queue)
            self.n_actions = self.max_queue * len(self.option_set) + 1
            self.action_space = spaces.Discrete(self.n_actions)
            self.observation_space = token_space(self.max_nodes, self.max_queue)  # type: ignore[assignment]
        # built workloads of the last ``workload_cache`` run seeds (each seed's workloads built as used)
        self._workloads = WorkloadCache(self.scn, self.topo, size=int(workload_cache) * n_wl)
        self.sim: Simulator | None = None
        self.builder: DecisionBuilder | None = None
        self._point: DecisionBuilder | None = None  # the run's builder, re-aimed at each point (_aim)
        self._point_view: ClusterView | None = None  # the view it reads (the time set at each point)
        self._jobs = JobCache()
        self._passthrough = False
        self._over = True
        # step's observation and info as builder_obs and _info of this class make them (written out
        # in step), unless a subclass makes its own or the observation is tokens
        cls = type(self)
        self._plain_out = (not self.tokens and cls.builder_obs is ClusterEnv.builder_obs
                           and cls._info is ClusterEnv._info)

    # -- set-up ------------------------------------------------------------------------------
    def _options_for(self, workload: int) -> OptionSet:
        """The placement options for ``workload``: PAL plans with that workload's locality penalty."""
        names, pal, placements = self._option_args
        params = pal_params(self.scn, pal, workload)
        key = repr(sorted(params.items()))
        if key not in self._option_sets:
            self._option_sets[key] = OptionSet(names, params, placements)
        return self._option_sets[key]

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        opts = dict(options or {})
        rng = self.np_random
        wl = int(opts["workload"]) if "workload" in opts else int(rng.choice(self.workloads))
        if "run_seed" in opts:
            run_seed = int(opts["run_seed"])
        elif self.run_seeds:
            run_seed = int(rng.choice(self.run_seeds))
        else:
            run_seed = int(rng.integers(2**31 - 1))
        self._passthrough = bool(opts.get("passthrough", False))
        round_s = opts.get("round_s", self.default_round_s)
        events = bool(opts.get("events", True)) or not self._passthrough
        self.workload_name, jobs, self.sim = build_simulator(self.scn, run_seed, wl, cache=self._workloads)
        self.option_set = self._options_for(wl)
        self._point, self._point_view = None, None  # a new builder and view for this run
        self.workload_index, self.run_seed = wl, run_seed
        self._seen_done = 0  # completions of sim.completed already rewarded
        self._jobs.clear()
        self._jobs.fill(jobs, self.topo, whole_run=True)
        self._jct = _JctIntegral(jobs)
        self._tracked = set(compress(map(_JOB_ID, jobs), map(_TRACKED, jobs)))  # (no frame per job)
        self._t = 0.0
        self._s = 0.0
        self._q = 0.0
        self._energy = 0.0
        self._steps = 0
        self._acts_here = 0
        self.decision_points = 0
        self.invalid_actions = 0
        self.episode_return = 0.0
        self._carry = 0.0
        # The agent's round ticks are lazy: one is scheduled only when a start stayed possible
        # (see _finish_point); a tick at which nothing can start would be passed over anyway.
        self.sim.start(round_s, events, ticks=self._passthrough or self._every_tick)
        self._over = False
        self._carry = self._advance()  # reward of skipped points before the first one: paid on step 1
        return self.builder_obs(), self._info()

    # -- shared pieces -----------------------------------------------------------------------
    def builder_obs(self) -> Any:
        assert self.builder is not None
        if self.tokens:
            return to_tokens(self.builder.observe(), self.topo.n_nodes, self.k, self.max_nodes, self.max_queue)
        return self.builder.take_observation()  # a fresh array per call (callers keep them)

    def action_masks(self) -> np.ndarray:
        """Valid actions now (sb3-contrib MaskablePPO reads this); the same array as info["action_mask"]."""
        if self.builder is None:
            m = np.zeros(self.n_actions, dtype=np.bool_)
            m[-1] = True
            return m
        if self.tokens:
            return pad_mask(self.builder.mask(), self.k, len(self.option_set), self.max_queue)
        return self.builder.mask()

    def _window_action(self, a: int) -> int:
        """A token action as the decision builder's action (:func:`~gpusched_env.envs.tokens.window_action`)."""
        return window_action(a, self.k, len(self.option_set), self.max_queue)

    def view(self) -> ClusterView:
        assert self.sim is not None
        return self.sim.view()

    def _info(self, invalid: bool = False) -> dict[str, Any]:
        assert self.sim is not None
        b = self.builder
        return {  # the mask as a new array, the builder's own when it can hand it over
            "action_mask": b.take_mask() if b is not None and not self.tokens else self.action_masks().copy(),
            "time_s": float(self.sim.env.now),
            "decision_points": self.decision_points,
            "invalid_action": invalid,
            "workload": self.workload_index,
            "run_seed": self.run_seed,
        }

    def _interval_reward(self) -> float:
        """Reward for the simulated time since the last call (JCT integral, energy, SLO)."""
        sim = self.sim
        assert sim is not None
        now = float(sim.env.now)
        misses = 0
        done = sim.completed
        for jid in done[self._seen_done:]:
            if jid in self._tracked:
                rec = sim.records[jid]
                assert rec.finish_s is not None
                self._jct.finish(rec.finish_s, rec.job.arrival_s)
                if rec.deadline_met is False:
                    misses += 1
        self._seen_done = len(done)
        jct = self._jct  # jct.at(now), written out (the same floats)
        n = bisect.bisect_right(jct.arrivals, now)
        s = (n * now - jct.cum[n]) - (jct.n_fin * now - jct.fin_sum)
        r = -(s - self._s) * self.reward_scale
        self._s = s
        if self.age_weight:
            q = self._jct.at2(now)
            r -= self.age_weight * (q - self._q) / self.age_scale_s * self.reward_scale
            self._q = q
        if self.energy_weight:
            e = sim.energy_now()
            r -= self.energy_weight * (e - self._energy) / J_PER_KWH
            self._energy = e
        if self.slo_weight and misses:
            r -= self.slo_weight * misses
        return float(r)

    def _advance(self) -> float:
        """Run to the next decision point (one with a valid start, unless passthrough); return the
        reward of the time passed. Points where nothing can start are skipped inside the simulator."""
        sim = self.sim
        assert sim is not None
        alive = sim.advance(None if self._passthrough else self._startable)
        reward = self._interval_reward()
        if not alive:
            self._over = True
            self.builder = self._aim(sim)
            return reward
        self.decision_points += 1
        self._acts_here = 0
        if self._passthrough:
            self.builder = self._aim(sim)
        return reward

    def _aim(self, sim: Simulator) -> DecisionBuilder:
        """The run's decision builder aimed at the simulator's current point (one builder and one
        view per run, re-aimed at every candidate point: :meth:`DecisionBuilder.aim`). A view's
        arrays are the simulator's live state, so only its time changes from point to point."""
        view = self._point_view
        if view is None:  # the run's view: its arrays are the live state; only the time is set per point
            view = self._point_view = sim.view()
        else:
            view.now = sim.env.now
        b = self._point
        if b is None:
            b = self._point = DecisionBuilder(view, self.option_set, self.k, self.fifo_slots, self._jobs)
            return b
        return b.aim(view)

    def _startable(self) -> bool:
        """The simulator's wake filter: build this point's decision and keep it if a start is valid."""
        sim = self.sim
        assert sim is not None
        state = sim.state  # _may_start, written out
        if not state.pending:
            return False
        room = state.n_free
        if self._shares:
            room = max(room, int(np.count_nonzero(state.up & (state.n_resident < state.max_jobs_per_gpu))))
        if room == 0 or min(state.pending_sizes) > room:
            return False
        view, b = self._point_view, self._point
        if view is not None and b is not None:  # _aim's common case, written out
            view.now = sim.env.now
            builder = b.aim(view)
        else:
            builder = self._aim(sim)
        if not builder.any_valid():
            return False
        self.builder = builder
        return True

    def _finish_point(self, b: DecisionBuilder) -> float:
        """Apply this point's starts; ask for the next round tick if a start is still possible."""
        sim = self.sim
        assert sim is not None
        again = b._valid  # any_valid(), kept from the step (read before the batch is applied: the
        if again is None:  # builder reads the queue in place)
            again = b.any_valid()
        if b.decisions:
            sim.apply(b.decisions)  # type: ignore[arg-type]  # (Starts; the builder's next point starts a new list)
            self._jobs.dequeued(map(_JOB_ID, b.decisions))
        if again:
            sim.wake_next_round()
        return self._advance()

    def _may_start(self, sim: Simulator) -> bool:
        """Cheap necessary condition for a valid start (GPU counts only); exact check in the builder."""
        state = sim.state
        pend = state.pending
        if not pend:
            return False
        room = state.n_free
        if self._shares:
            room = max(room, int(np.count_nonzero(state.up & (state.n_resident < state.max_jobs_per_gpu))))
        if room == 0:
            return False
        return min(state.pending_sizes) <= room

    # -- stepping ----------------------------------------------------------------------------
    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self.sim is None or self.builder is None:
            raise RuntimeError("step() before reset()")
        if self._over:
            if self._steps == 0:  # the run ended before any decision point (e.g. no jobs)
                self._steps = 1
                reward, self._carry = self._carry, 0.0
                self.episode_return += reward
                return b_obs(self), reward, True, False, self._info()
            raise RuntimeError("step() after the episode ended: call reset()")
        if self._passthrough:
            raise RuntimeError("this episode was reset in passthrough mode: use step_decisions()")
        a = int(action)
        if self.tokens:
            a = self._window_action(a)
        b = self.builder
        self._steps += 1
        self._acts_here += 1
        reward, self._carry = self._carry, 0.0
        invalid = False
        finish = a == b.done_action and b.valid(a)
        if not finish:
            if a == b.done_action or b.act(a) is None:
                invalid = True
                self.invalid_actions += 1
                reward -= self.invalid_penalty
            finish = not b.any_valid()
        if self._acts_here >= self.max_actions_per_decision:
            finish = True
        if finish:
            reward += self._finish_point(b)
        self.episode_return += reward
        truncated = self.max_steps is not None and self._steps >= self.max_steps and not self._over
        if self._plain_out:  # builder_obs() and _info(invalid), written out (the same calls, in order)
            b = self.builder
            sim = self.sim
            obs = b.take_observation()
            return obs, reward, self._over, truncated, {
                "action_mask": b.take_mask(),
                "time_s": float(sim.env.now),
                "decision_points": self.decision_points,
                "invalid_action": invalid,
                "workload": self.workload_index,
                "run_seed": self.run_seed,
            }
        return self.builder_obs(), reward, self._over, truncated, self._info(invalid)

    def step_decisions(self, decisions: list[Decision]) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Passthrough: apply a whole decision batch (any kind) and run to the next decision point."""
        if self._over or self.sim is None:
            raise RuntimeError("step_decisions() after the episode ended: call reset()")
        self._steps += 1
        if decisions:
            self.sim.apply(list(decisions))
            self._jobs.dequeued([d.job_id for d in decisions if isinstance(d, Start)])
        reward = self._carry + self._advance()
        self._carry = 0.0
        self.episode_return += reward
        return b_obs(self), reward, self._over, False, self._info()

    def result(self) -> RunResult:
        assert self.sim is not None
        return self.sim.result()


def b_obs(env: ClusterEnv) -> Any:
    return env.builder_obs()


def run_policy_in_env(
    env: gym.Env, policy: Policy, workload: int, run_seed: int
) -> tuple[RunResult, float]:
    """Run a heuristic through the env (passthrough) on one workload and run seed.

    Same decision points (the policy's ``round_s`` / ``events``), same workload and simulator seed
    as ``gpusched-bench``; returns the run's result and the episode return.
    """
    u = env.unwrapped
    assert isinstance(u, ClusterEnv)
    u.reset(options={"workload": workload, "run_seed": run_seed, "passthrough": True,
                     "round_s": policy.round_s, "events": policy.events})
    over = u._over
    while not over:
        _, _, over, _, _ = u.step_decisions(policy.decide(u.view()))
    return u.result(), u.episode_return
