"""Shortest remaining time first, preemptive, with the oracle remaining time."""

from __future__ import annotations

import numpy as np

from cluster_sim.placement import FreePool
from cluster_sim.policies.base import PolicyScheduler, StayCache, admit_by_rank
from cluster_sim.protocol import Decision, SchedulerView


class SRTF(PolicyScheduler):
    """Shortest remaining time (``view.remaining_time``, an oracle) first, over running and waiting jobs.

    Every round ranks all jobs by remaining time and admits them greedily while GPUs last (see
    :func:`~cluster_sim.policies.base.admit_by_rank`): running jobs left out are preempted. To avoid
    thrashing, a waiting job ranks as if its remaining time were ``(1 + margin) * r + min_gain``, so it
    preempts a running job only when that job has more than 10 % (default ``margin``) longer to go;
    ``min_gain`` (seconds, default 0) can cover a known restart cost. Jobs that cannot start are skipped
    (backfilling), but never with GPUs that a better-ranked job was denied.

    A running job's remaining time only shrinks, so the last value seen bounds it: only running jobs
    whose bound exceeds the best waiting job's rank are asked for their exact remaining time; the
    others outrank every waiting job whatever their exact value. When every waiting job fits in the free
    GPUs nobody needs to be asked.
    """

    ordering = "srtf"
    preemptive = True
    default_backfill = True

    def __init__(self, placement: str = "consolidate", *, margin: float = 0.1, min_gain: float = 0.0, **kw) -> None:
        if margin < 0 or min_gain < 0:
            raise ValueError(f"SRTF margin and min_gain must be >= 0, got margin={margin}, min_gain={min_gain}")
        super().__init__(placement, **kw)
        self.margin = float(margin)
        self.min_gain = float(min_gain)
        self._waiting = StayCache()
        self._bound = np.zeros(0)  # last remaining time seen per job: an upper bound from then on

    def reset(self, view: SchedulerView) -> None:
        super().reset(view)
        self._waiting.reset(len(view.jobs))
        self._bound = np.full(len(view.jobs), np.inf)

    def decide(self, view: SchedulerView, queue: np.ndarray, pool: FreePool) -> list[Decision]:
        rem_q = self._waiting.update(queue, view.remaining_time)
        self._bound[queue] = rem_q
        key_q = (1.0 + self.margin) * rem_q + self.min_gain
        if int(view.jobs.num_gpus[queue].sum()) <= pool.num_free:  # everyone fits: nobody is preempted
            starts = self.start_in_order(view, queue[np.lexsort((queue, key_q))], pool, backfill=True)
            self._waiting.forget([s.job for s in starts])
            return list(starts)
        running = np.asarray(view.running, dtype=np.int64)
        doubt = self._bound[running] > key_q.min()
        safe, cand = running[~doubt], running[doubt]
        rem_c = view.remaining_times(cand)
        self._bound[cand] = rem_c
        ids = np.concatenate([cand, queue])
        keys = np.concatenate([rem_c, key_q])
        waits = np.concatenate([np.zeros(len(cand), dtype=np.int8), np.ones(len(queue), dtype=np.int8)])
        order = np.lexsort((ids, waits, keys))
        decisions, _, starts = admit_by_rank(self, view, pool, ids[order], waits[order] == 0, stay=safe)
        self._waiting.forget([s.job for s in starts])
        return decisions
