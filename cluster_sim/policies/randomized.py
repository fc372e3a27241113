"""Random order: the baseline that any real policy must beat."""

from __future__ import annotations

import numpy as np

from cluster_sim.policies.base import PolicyScheduler
from cluster_sim.protocol import SchedulerView


class RandomOrder(PolicyScheduler):
    """Waiting jobs in a random order (drawn from the scheduler's seeded generator), with backfilling."""

    ordering = "random"
    default_backfill = True

    def order(self, view: SchedulerView, queue: np.ndarray) -> np.ndarray:
        return queue[self.rng.permutation(len(queue))]
