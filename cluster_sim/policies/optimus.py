"""Optimus-style allocation by marginal gain (Peng et al., EuroSys'18), with fixed GPU requests and an oracle.

This is ``optimus-oracle``: rigid jobs, true remaining times. The elastic Optimus, with its own fitted
estimate of remaining work, is :mod:`cluster_sim.policies.optimus_elastic` (``optimus``).

Optimus fits each job's convergence curve to predict its remaining time and gives resources to the job
whose completion gains most per resource unit. Here the oracle remaining time stands in for that fitted
estimate, and jobs ask for a fixed GPU count, so the allocation is all-or-nothing per job: starting job
``j`` on GPUs ``G`` consumes ``n_j * remaining_j / speed(j, G)`` GPU-seconds to complete one job, and
the gain per GPU-second is the inverse. Jobs start in decreasing order of that gain (Smith's rule for
total completion time), where ``speed`` comes from the performance model (``view.estimated_speed``) on
the placement the job would get now, so a job that would be placed badly ranks lower.
Running jobs are never resized.
"""

from __future__ import annotations

import numpy as np

from cluster_sim.placement import FreePool
from cluster_sim.policies.base import PolicyScheduler, StayCache
from cluster_sim.protocol import Decision, SchedulerView


class Optimus(PolicyScheduler):
    """Marginal gain per GPU-second with the performance model's speed; backfilling, non-preemptive.

    Placing a job to learn its speed costs a placement call, so only the ``lookahead`` (default 32) most
    promising jobs by ideal GPU-seconds are scored with their speed each round; the rest follow in
    ideal GPU-seconds order.
    """

    ordering = "optimus-oracle"
    default_backfill = True

    def __init__(self, placement: str = "consolidate", *, lookahead: int = 32, **kw) -> None:
        if lookahead < 1:
            raise ValueError(f"Optimus lookahead must be >= 1 job, got {lookahead}")
        super().__init__(placement, **kw)
        self.lookahead = int(lookahead)
        self._remaining = StayCache()

    def reset(self, view: SchedulerView) -> None:
        super().reset(view)
        self._remaining.reset(len(view.jobs))

    def decide(self, view: SchedulerView, queue: np.ndarray, pool: FreePool) -> list[Decision]:
        rem = np.maximum(self._remaining.update(queue, view.remaining_time), 1e-9)
        need = view.jobs.num_gpus[queue].astype(np.int64)
        fits = need <= pool.num_free
        queue, rem, need = queue[fits], rem[fits], need[fits]
        ideal = need * rem
        order = np.lexsort((queue, ideal))
        head, tail = order[: self.lookahead], order[self.lookahead :]
        scored = []
        for i in head.tolist():
            j = int(queue[i])
            gpus = self.place(view, j, int(need[i]), pool)
            if gpus is None:  # no single GPU type holds it now (mixed clusters): it waits, scored last
                scored.append((np.inf, j))
                continue
            scored.append((ideal[i] / max(view.estimated_speed(j, gpus), 1e-12), j))
        scored.sort()
        first = np.array([j for _, j in scored], dtype=np.int64)
        return list(self.start_in_order(view, np.concatenate([first, queue[tail]]), pool, self.backfill))
