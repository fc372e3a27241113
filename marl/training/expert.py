"""Heuristic expert in the agents' action space, for the DL2-style imitation warm start.

The expert is strict FIFO with one placement strategy: each agent starts its queue head with that
strategy's candidate when it is feasible and otherwise waits (``backfill=True`` instead takes the first
feasible job among the Q shown). With a single agent (K = 1) strict FIFO reproduces
``cluster_sim.policies.make_scheduler("fifo", strategy)`` exactly (the named policies ``fifo`` for
consolidate and ``closest-gpus``): the same jobs start at the same times on the same GPUs. With K > 1 it
is per-partition FIFO, which no plain heuristic equals. The shown jobs are in the coordinator's slot order,
so with ``queue_order="estimate"`` the backfilling expert is per-partition shortest-estimated-GPU-time first
(estimates from completed jobs of the same model, see :meth:`marl.env.coordinator.Coordinator.shown`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from marl.env.obs_layout import ObsLayout


class ExpertPolicy:
    """Chooses candidates from action masks; ``placements`` must be the env's candidate strategies."""

    def __init__(
        self, layout: ObsLayout, placements: Sequence[str], strategy: str = "consolidate", backfill: bool = False
    ) -> None:
        placements = tuple(placements)
        if layout.Q * len(placements) != layout.C:
            raise ValueError(f"layout has C={layout.C} candidates, but Q={layout.Q} x {len(placements)} placements")
        if strategy not in placements:
            raise ValueError(f"expert strategy {strategy!r} is not among the env's placements {placements}")
        self.layout = layout
        self.strategy = strategy
        self.backfill = backfill
        p = placements.index(strategy)
        self._slots = np.arange(layout.Q if backfill else 1) * len(placements) + p

    def actions(self, masks: np.ndarray) -> np.ndarray:
        """(K,) actions from (K, C + 1) masks; wait (C) unless a preferred candidate is allowed. Where wait
        itself is masked (an idle partition), the first allowed candidate."""
        masks = np.asarray(masks) > 0
        wait = self.layout.C
        pref = masks[:, self._slots]
        out = np.where(pref.any(axis=1), self._slots[pref.argmax(axis=1)], wait)
        forced = ~masks[np.arange(len(out)), out]
        out[forced] = masks[forced, :wait].argmax(axis=1)
        return out

    def __call__(self, batch: Mapping[str, np.ndarray]) -> np.ndarray:
        """One-hot logits (K, C + 1): a ``policy_fn`` for :class:`marl.deploy.scheduler.MarlScheduler`."""
        acts = self.actions(batch["action_mask"])
        logits = np.zeros((len(acts), self.layout.num_actions), dtype=np.float32)
        logits[np.arange(len(acts)), acts] = 1.0
        return logits

    def act(self, obs: Mapping[str, Mapping[str, np.ndarray]]) -> dict[str, int]:
        """Actions for an env's observation dict (agent id -> observation)."""
        ids = list(obs)
        acts = self.actions(np.stack([obs[a]["action_mask"] for a in ids]))
        return {a: int(x) for a, x in zip(ids, acts, strict=True)}
