"""Quasi-shortest-service-first from the history of finished jobs (after Helios' QSSF, Hu et al., SC'21).

No job's own duration is read: the expected remaining time of a job that has run ``x`` seconds is
``E[D - x | D > x]`` over the finished jobs of its tenant and GPU count
(:class:`~cluster_sim.policies.run_history.TenantHistory`): long-running jobs of a heavy-tailed group look
long, fresh ones look like the group's typical job.

Ranking and preemption follow :class:`~cluster_sim.policies.srtf.SRTF` with the estimate in place of the
oracle: every round ranks running and waiting jobs by expected remaining time, a waiting job counting as
``(1 + margin)`` times its estimate plus ``min_gain`` seconds, and admits them greedily
(:func:`~cluster_sim.policies.base.admit_by_rank`). ``preempt=False`` only orders the queue.

The estimates are noisy (heavy-tailed groups), so a preemption must promise a large gain: by default a
waiting job displaces a running one only if the running job is expected to need more than 31 times as
long (``margin=30``). On the Philly jobs of 2017-11-01..14 at load 0.9 on ``small`` (oracle interference)
margins of 0.1 / 3 / 30 / 100 gave average JCTs of 22,379 / 17,949 / 16,311 / 16,639 s (Tiresias
21,942); on the two weeks before, 33,088 / 28,734 / 28,827 / 28,837 s (Tiresias 28,990).
"""

from __future__ import annotations

import numpy as np

from cluster_sim.placement import FreePool
from cluster_sim.policies.base import PolicyScheduler, admit_by_rank
from cluster_sim.policies.run_history import TenantHistory
from cluster_sim.protocol import Decision, SchedulerView


class QSSF(PolicyScheduler):
    """Expected remaining time from the history of finished jobs (tenant x GPU count), ranked like SRTF."""

    ordering = "qssf"
    preemptive = True
    default_backfill = True

    def __init__(
        self,
        placement: str = "consolidate",
        *,
        preempt: bool = True,
        margin: float = 30.0,
        min_gain: float = 0.0,
        min_history: int = 3,
        **kw,
    ) -> None:
        if margin < 0 or min_gain < 0 or min_history < 1:
            raise ValueError(
                f"QSSF needs margin >= 0, min_gain >= 0, min_history >= 1; got {margin}, {min_gain}, {min_history}"
            )
        super().__init__(placement, **kw)
        self.preemptive = bool(preempt)
        self.margin = float(margin)
        self.min_gain = float(min_gain)
        self.history = TenantHistory(min_history)

    def reset(self, view: SchedulerView) -> None:
        super().reset(view)
        self.history.reset(view)

    def schedule(self, view: SchedulerView) -> list[Decision]:
        self.history.learn(view)
        return super().schedule(view)

    def expected_remaining(self, view: SchedulerView, jobs: np.ndarray) -> np.ndarray:
        """E[D - x | D > x] per job from the history of finished jobs (x = wall seconds run so far)."""
        return self.history.expected_remaining(view, jobs)

    def decide(self, view: SchedulerView, queue: np.ndarray, pool: FreePool) -> list[Decision]:
        gpus = view.jobs.num_gpus
        if not self.preemptive or int(gpus[queue].sum()) <= pool.num_free:
            key_q = (1.0 + self.margin) * self.expected_remaining(view, queue) + self.min_gain
            return list(self.start_in_order(view, queue[np.lexsort((queue, key_q))], pool, backfill=True))
        running = np.asarray(view.running, dtype=np.int64)
        ids = np.concatenate([running, queue])
        est = self.expected_remaining(view, ids)
        key_r, key_q = est[: len(running)], (1.0 + self.margin) * est[len(running) :] + self.min_gain
        waits = np.concatenate([np.zeros(len(running), dtype=np.int8), np.ones(len(queue), dtype=np.int8)])
        order = np.lexsort((ids, waits, np.concatenate([key_r, key_q])))
        decisions, _, _ = admit_by_rank(self, view, pool, ids[order], waits[order] == 0)
        return decisions
