"""Shortest job first, with the oracle duration."""

from __future__ import annotations

import numpy as np

from cluster_sim.policies.base import PolicyScheduler
from cluster_sim.protocol import SchedulerView


class SJF(PolicyScheduler):
    """Non-preemptive: the waiting job with the shortest trace duration (``jobs.duration``, an oracle
    fact) starts first, ties by arrival; jobs that do not fit are skipped (backfilling)."""

    ordering = "sjf"
    default_backfill = True

    def order(self, view: SchedulerView, queue: np.ndarray) -> np.ndarray:
        return queue[np.lexsort((queue, view.jobs.duration[queue]))]
