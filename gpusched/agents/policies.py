"""A policy by name for one run of a scenario: a heuristic of :mod:`baselines` with the scenario's
parameters for it, or ``agent``, a model trained by ``gpusched-train`` (:mod:`gpusched.agents.adapter`). The
bench app, the real backend and the agents' evaluations all build their policies here."""

from __future__ import annotations

from typing import Any

from gpusched_env.config_util import ConfigError
from gpusched_env.policy import Policy
from gpusched_env.scenario import Scenario, run_rngs


def make_policy(
    name: str, scn: Scenario, seed: int, agent_path: str | None = None, *, workload: int = 0, **overrides: Any
) -> Policy:
    """A policy by registry name, with the scenario's parameters for it (``overrides`` win), the
    scenario's round length, the run's policy RNG and the locality penalty of workload number
    ``workload``'s model (:meth:`Scenario.model_for`) where the policy takes them."""
    params = {**dict(scn.policies.get(name, {})), **overrides}
    if name == "agent":
        if not agent_path:
            raise ConfigError("policies: policy 'agent' needs agent_path=FILE (a model.zip from gpusched-train)")
        from gpusched.agents.adapter import load_agent_policy

        return load_agent_policy(agent_path, scn, workload=workload, **params)
    from gpusched.baselines import get_policy, policy_params

    accepted = policy_params(name)
    if "rng" in accepted:
        params.setdefault("rng", run_rngs(seed)["policy"])
    rs = scn.round_for(name)
    if "round_s" in accepted and rs is not None:
        params.setdefault("round_s", rs)
    locality = scn.model_for(workload).locality
    if "lf" in accepted and locality.mode == "constant":
        params.setdefault("lf", locality.lf)  # a policy plans with the penalty the model charges
    return get_policy(name, **params)
