"""The multi-agent policy as a plain cluster_sim scheduler (deployment and evaluation without RLlib).

At each scheduling point it runs the same :class:`~marl.env.coordinator.Coordinator` round as the RL
environment: all agents observe, ``policy_fn`` scores them in one batch, each agent greedily takes its
best allowed action, and this repeats at the same time point until every agent waits. So a policy gives
the same decisions here as in :class:`marl.env.placement_env.MarlSchedEnv` (greedy), step for step.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from cluster_sim.protocol import Decision
from interference.base import InterferenceModel
from marl.env.candidates import DEFAULT_PLACEMENTS
from marl.env.coordinator import Coordinator
from marl.env.obs_layout import ObsLayout

PolicyFn = Callable[[dict[str, np.ndarray]], np.ndarray]


# Logits this close to a row's best count as tied (the lowest action wins). The same observation scored in
# batches of different sizes (in-process vs grouped actors) differs by ~1e-8 in float32; without a tolerance
# such noise could break an exact tie (two identical candidates) differently on the two paths.
TIE_TOLERANCE = 1e-5


def greedy(logits: np.ndarray, masks: np.ndarray) -> np.ndarray:
    """Argmax of the logits over allowed actions, per row; near-ties go to the lowest action."""
    z = np.where(np.asarray(masks) > 0, np.asarray(logits, dtype=np.float64), -np.inf)
    return (z >= z.max(axis=1, keepdims=True) - TIE_TOLERANCE).argmax(axis=1)


class MarlScheduler:
    """Scheduler protocol adapter: ``policy_fn(batch) -> logits (K, C + 1)`` for the stacked observations.

    ``layout`` must match the coordinator's layout for the simulated cluster and ``num_agents``. It needs
    to see every scheduling point (``wants_all_points``) to dispatch arrivals and learn completions when
    they happen, exactly as the environment does.
    """

    wants_all_points = True

    def __init__(
        self,
        policy_fn: PolicyFn,
        layout: ObsLayout,
        *,
        num_agents: int,
        placements: Sequence[str] = DEFAULT_PLACEMENTS,
        predictor: InterferenceModel | None = None,
        partition_unit: str = "rack",
        name: str = "marl",
        queue_order: str = "arrival",
    ) -> None:
        self.policy_fn = policy_fn
        self.layout = layout
        self.num_agents = num_agents
        self.placements = tuple(placements)
        self.predictor = predictor
        self.partition_unit = partition_unit
        self.queue_order = queue_order
        self.name = name
        self.coord: Coordinator | None = None
        self.policy_calls = 0

    def reset(self, view) -> None:
        if self.coord is None or self.coord.topo is not view.topo:
            self.coord = Coordinator(
                view.topo,
                num_agents=self.num_agents,
                queue_slots=self.layout.Q,
                placements=self.placements,
                predictor=self.predictor,
                partition_unit=self.partition_unit,
                queue_order=self.queue_order,
            )
            got = self.coord.layout
            if got != self.layout:
                raise ValueError(
                    f"policy layout {self.layout} does not fit {view.topo.name!r} split into {self.num_agents} "
                    f"partitions with {len(self.placements)} placements (needs {got})"
                )
        self.coord.reset(view)
        self.policy_calls = 0

    def schedule(self, view) -> list[Decision]:
        coord = self.coord
        coord.begin(view)
        wait = self.layout.C
        waited = np.zeros(self.num_agents, dtype=bool)
        while coord.any_feasible():
            batch = coord.batch()
            if waited.any():
                # An agent's observation only changes when it acts (partitions are disjoint), so one that
                # waited would wait again: its mask says so, and a policy_fn may skip it (marl.deploy.actors does).
                mask = batch["action_mask"].copy()
                mask[waited] = 0.0
                mask[waited, wait] = 1.0
                batch["action_mask"] = mask
            logits = np.asarray(self.policy_fn(batch))
            self.policy_calls += 1
            if logits.shape != (self.num_agents, self.layout.num_actions):
                raise ValueError(
                    f"policy_fn returned logits of shape {logits.shape}, expected "
                    f"({self.num_agents}, {self.layout.num_actions})"
                )
            actions = greedy(logits, batch["action_mask"])
            waited |= actions == wait
            if coord.act(actions) == 0:
                break
        return list(coord.end_round())
