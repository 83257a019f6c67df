"""``gpusched/Cluster-v1``: the simulated GPU cluster with preemption and migration in the action space."""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from gpusched_env.envs.cluster import ClusterEnv
from gpusched_env.envs.observe import OBS_HIGH, OBS_LOW
from gpusched_env.envs.preempt import PreemptBuilder, n_actions_v1, obs_size_v1
from gpusched_env.envs.tokens import (
    DEFAULT_MAX_RUNNING,
    check_sizes_v1,
    pad_mask_v1,
    to_tokens_v1,
    token_action_v1,
    token_space_v1,
    window_action_v1,
)
from gpusched_env.rounds import RoundClock
from gpusched_env.scenario import Scenario


class ClusterV1Env(ClusterEnv):
    """
    ## Description

    The cluster of ``gpusched/Cluster-v0`` (same simulator, scenarios, workloads, seeds, reward),
    with an action space in which the agent can also **preempt** a running job (it is checkpointed
    and returns to the queue; the scenario's ``model.restart_cost_s`` applies when it starts again,
    exactly as for a heuristic's ``Preempt``) and **re-place** one (a ``Migrate`` when the GPUs
    change: one restart cost). So whatever LAS, SRTF, Tiresias and PAL's non-sticky rounds do, the
    agent can express: at a round point preempt the jobs a heuristic would not keep, then start the
    ones it would choose (``tests/envs/test_cluster_v1.py`` replays LAS and SRTF so, exactly).

    Decision points are those of v0 (arrivals, completions, failures, round ticks). A decision point
    is a **round point** when at least ``round_s`` has passed since the last round point (the
    heuristics' rule, :class:`RoundClock`); preemptions and re-placements are valid only at round
    points, starts at every point (as the round-based heuristics preempt only at rounds and fill
    free GPUs between them), and only when some job is queued (a lift could otherwise only idle GPUs
    or move a job for nothing). Points at which nothing but "done" is valid are passed over. Design choice, for learning: the agent edits the running set (start / preempt
    / re-place a few jobs, then "done"), running jobs keep their GPUs by default, so a step is one
    change and an episode is about as long as the number of changes, not of (round x job) pairs.

    ## Action Space

    ``Discrete(K*P + R + 1)``: start slot ``s`` (a queued or lifted job) with placement option ``o``
    (``s*P + o``); lift running slot ``i`` (``K*P + i``): preempted at "done" unless restarted (same
    GPUs: kept; other GPUs: migrated) in the same batch; "done". Slots (:mod:`gpusched_env.envs.preempt`): ``K =
    queue_slots`` pending jobs (the first ``fifo_slots`` by arrival, then the least service key),
    ``R = running_slots`` running jobs (largest service key first). Service key: attained
    GPU-seconds (LAS's) unless ``clairvoyant``, then remaining work (SRTF's). ``action_masks()`` and
    ``info["action_mask"]`` come from one function; "done" is masked only when the batch would leave
    the cluster idle while a start is possible. An invalid action is a no-op that costs
    ``invalid_penalty``; after ``max_actions_per_decision`` actions at one point "done" is implied.

    ## Observation Space

    ``Box(-1, 10, (n_nodes*8 + (K+R)*17 + 10,), float32)``, finite: per node (as v0), per slot
    (present, running, GPUs, class, time in system, attained GPU-hours, attained hours per GPU,
    restarts, fits now / hours on its current GPUs, GPUs per free GPU, and only when ``clairvoyant``
    the total and remaining work), global (time of day, load, queue, running, demand, starts and
    preemptions in this batch, round point). ``clairvoyant=False`` (default) hides every job's total
    work and remaining time — in the numbers and in the window order — so the agent sees what LAS and
    Tiresias see (attained service, size, waiting time); ``clairvoyant=True`` exposes them (what SJF
    and SRTF use). ``info["round"]`` says whether the point is a round point.

    ``tokens=True``: the same numbers as sets (:mod:`gpusched_env.envs.tokens`): a ``Dict`` of node
    rows padded to ``max_nodes``, start-slot rows padded to ``max_queue``, running-slot rows padded to
    ``max_running`` (each job row with two more columns: its ranks in its set by time in system and
    by attained service, the order the flat observation holds in its slot positions), a node presence
    mask and the global row, and ``Discrete(max_queue*P + max_running + 1)`` actions, so one set
    network fits any cluster size and window.

    ## Rewards

    As v0: ``-(tracked jobs in the system) x (elapsed s) x reward_scale`` between decision points
    (episode return = ``-total JCT x reward_scale``), optional energy, SLO and age-weighted (tail)
    terms (``age_weight``, ``age_scale_s``: a job of age A costs ``1 + age_weight x A / age_scale_s``
    times as much per second as a new one),
    ``-invalid_penalty`` per invalid action.

    ## Starting State, Episode End

    As v0 (``options={"workload", "run_seed"}``; terminated when every tracked job has finished or
    the run cannot go on; truncated after ``max_steps``). Heuristic passthrough as v0
    (``reset(options={"passthrough": True, ...})``, :meth:`step_decisions`,
    :func:`~gpusched_env.envs.cluster.run_policy_in_env`).

    ## Arguments

    Those of v0 (``queue_slots`` default 12, ``fifo_slots`` 4, ``max_actions_per_decision`` 128),
    plus ``running_slots`` R (8), ``clairvoyant`` (False), ``migrations`` (True), ``max_running`` (16,
    the token observation's running-slot padding).

    ## Version History

    * v1: preemption and re-placement (migration) of running jobs at round points; running jobs in
      the window; clairvoyant / non-clairvoyant observation (``clairvoyant``), attained service and
      restarts observed; every round tick is a candidate decision point. Token observation
      (``tokens``): running jobs as a third set, one lift action per running row; job rows carry their
      window ranks (issue 32: without them a set clone of Tiresias could not find the head of its queue).
    * v0: initial version (starts only).
    """

    _every_tick = True
    _own_tokens = True

    def __init__(
        self,
        scenario: str | Scenario = "synthetic_philly",
        *,
        running_slots: int = 8,
        clairvoyant: bool = False,
        migrations: bool = True,
        queue_slots: int = 12,
        fifo_slots: int = 4,
        max_actions_per_decision: int = 128,
        max_running: int = DEFAULT_MAX_RUNNING,
        **v0_args: Any,
    ) -> None:
        """v1's own arguments; every other keyword is :class:`ClusterEnv`'s, passed on unchanged (three
        of them with v1's own defaults: a smaller start window, more actions per decision point)."""
        super().__init__(
            scenario, queue_slots=queue_slots, fifo_slots=fifo_slots,
            max_actions_per_decision=max_actions_per_decision, **v0_args,
        )
        if running_slots < 1:
            raise ValueError(f"running_slots must be >= 1, got {running_slots}")
        self.r = int(running_slots)
        self.clairvoyant = bool(clairvoyant)
        self.migrations = bool(migrations)
        self.n_actions = n_actions_v1(self.k, self.r, len(self.option_set))
        self.action_space = spaces.Discrete(self.n_actions)
        self.observation_space = spaces.Box(
            OBS_LOW, OBS_HIGH, (obs_size_v1(self.topo.n_nodes, self.k, self.r),), dtype=np.float32
        )
        self.max_running = int(max_running)
        if self.tokens:  # sets of node, start-slot and running-slot rows (gpusched_env/envs/tokens.py)
            check_sizes_v1(self.topo.n_nodes, self.k, self.r, self.max_nodes, self.max_queue, self.max_running)
            self.n_actions = self.max_queue * len(self.option_set) + self.max_running + 1
            self.action_space = spaces.Discrete(self.n_actions)
            self.observation_space = token_space_v1(  # type: ignore[assignment]
                self.max_nodes, self.max_queue, self.max_running)
        self.builder: PreemptBuilder | None = None  # type: ignore[assignment]
        self._clock = RoundClock(self.default_round_s)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        self._clock = RoundClock((options or {}).get("round_s", self.default_round_s))
        return super().reset(seed=seed, options=options)

    def builder_obs(self) -> Any:
        if not self.tokens:
            return super().builder_obs()
        assert self.builder is not None
        return to_tokens_v1(self.builder.observe(), self.topo.n_nodes, self.k, self.r,
                            self.max_nodes, self.max_queue, self.max_running)

    def action_masks(self) -> np.ndarray:
        if not self.tokens or self.builder is None:
            return super().action_masks()
        return pad_mask_v1(self.builder.mask(), self.k, self.r, len(self.option_set), self.max_queue,
                           self.max_running)

    def _window_action(self, a: int) -> int:
        return window_action_v1(a, self.k, self.r, len(self.option_set), self.max_queue, self.max_running)

    def token_action(self, a: int) -> int:
        """A window action of the decision builder (``K*P + R + 1``) as this env's action: the same
        index for a flat env, the token action with ``tokens`` (:func:`~gpusched_env.envs.tokens.token_action_v1`)."""
        if not self.tokens:
            return a
        return token_action_v1(a, self.k, self.r, len(self.option_set), self.max_queue, self.max_running)

    def _build(self, is_round: bool) -> PreemptBuilder:
        assert self.sim is not None
        return PreemptBuilder(
            self.sim.view(), self.option_set, self.k, self.fifo_slots, self.r, self._jobs,
            clairvoyant=self.clairvoyant, is_round=is_round, migrations=self.migrations,
        )

    def _info(self, invalid: bool = False) -> dict[str, Any]:
        info = super()._info(invalid)
        info["round"] = bool(self.builder is not None and self.builder.is_round)
        return info

    def _advance(self) -> float:
        sim = self.sim
        assert sim is not None
        alive = sim.advance(None if self._passthrough else self._wake)
        reward = self._interval_reward()
        if not alive:
            self._over = True
            self.builder = self._build(False)
            return reward
        self.decision_points += 1
        self._acts_here = 0
        if self._passthrough:
            self.builder = self._build(self._clock.tick(float(sim.env.now)))
        return reward

    def _wake(self) -> bool:
        """The simulator's wake filter: keep a point where some action other than "done" is valid."""
        sim = self.sim
        assert sim is not None
        is_round = self._clock.tick(float(sim.env.now))
        state = sim.state
        if is_round and state.pending and state.running:
            self.builder = self._build(True)
            return True
        if not self._may_start(sim):
            return False
        b = self._build(is_round)
        if not b.any_valid():
            return False
        self.builder = b
        return True

    def _finish_point(self, b: PreemptBuilder) -> float:  # type: ignore[override]
        sim = self.sim
        assert sim is not None
        if b.decisions:
            sim.apply(list(b.decisions))
        return self._advance()
