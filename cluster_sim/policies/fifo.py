"""First in, first out: jobs start in arrival order."""

from __future__ import annotations

import numpy as np

from cluster_sim.policies.base import PolicyScheduler
from cluster_sim.protocol import SchedulerView


class FIFO(PolicyScheduler):
    """Arrival order. Strict by default (``backfill=False``): a job that does not fit blocks the queue,
    as in a plain FIFO cluster queue; ``backfill=True`` lets later jobs that fit start first.

    Job ids are arrival order, so sorting the queue by id is arrival order even for a job that was
    preempted by another scheduler's decision and re-entered the queue.
    """

    ordering = "fifo"
    default_backfill = False

    def order(self, view: SchedulerView, queue: np.ndarray) -> np.ndarray:
        # The queue comes in order of (re)insertion: already sorted unless a preempted job re-entered it,
        # and checking that is one vectorised pass where sorting thousands of ids at every event is not.
        if len(queue) < 2 or bool((queue[1:] > queue[:-1]).all()):
            return queue
        return np.sort(queue)

    def blocked(self, view: SchedulerView, queue: np.ndarray) -> bool:
        """Strict order: only the oldest waiting job may start next, so the round is blocked when it does
        not fit (one lookup, however long the queue)."""
        if self.backfill:
            return super().blocked(view, queue)
        return view.num_free < int(view.jobs.num_gpus[int(queue.min())])
