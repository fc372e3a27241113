"""The agents marlsched trains, one module each: their network, decision layer, observations and algorithms.

``AGENTS`` is the one table that ``marlsched train`` (:mod:`marl.training.recipes`), the policy-folder registry
(:mod:`marl.deploy.registry`) and the docs read; a new learned scheduler is one more spec here.
"""

from marl.agents import dl2, metaplace, priority, rounds, sia_weights, topdrl
from marl.agents.spec import AgentSpec, Algorithm, resolve

AGENTS: dict[str, AgentSpec] = {
    spec.name: spec for spec in (priority.SPEC, rounds.SPEC, sia_weights.SPEC, topdrl.SPEC, dl2.SPEC, metaplace.SPEC)
}

__all__ = ["AGENTS", "AgentSpec", "Algorithm", "resolve"]
