"""An elastic scheduler of your own: every minute, each active job gets an equal share of the GPUs.

Elastic schedulers share one frame (:class:`cluster_sim.policies.elastic.ElasticPolicy`): every ``interval``
seconds it lists the running and waiting jobs (least attained service first, then arrival) and asks the
subclass for one GPU count per job (:meth:`allocate`); the frame places the counts (a job whose count stays
keeps its GPUs, one type per job, at most one multi-node job per node), lowers a count that cannot be placed
and asks again, moves and resizes the jobs, and sets each one's batch (:meth:`batch_for`, by default the
job's own). Pollux, Sia, Optimus, AFS and ONES are such subclasses; this one is the simplest
rule that resizes jobs, a baseline for goodput-aware ones:

    marlsched simulate --cluster pollux-testbed --preset pollux \
        --workload "pollux:../shared/traces/pollux-osdi21/workloads/workload-1.csv" \
        --policy experiments/examples/equal_share.py:EqualShare,pollux,tiresias-pollux

Run from the repository root (``../shared`` holds the traces). The frame declares ``elastic``,
``wants_all_points`` and ``one_gpu_type``, so a subclass needs none of its own.
"""

from __future__ import annotations

import numpy as np

from cluster_sim.policies.elastic import ElasticPolicy, count_limits
from cluster_sim.protocol import SchedulerView


class EqualShare(ElasticPolicy):
    """Equal GPU shares, re-divided every ``interval`` seconds; jobs with the least attained service are
    served first when there are more jobs than GPUs."""

    def __init__(self, *, interval: float = 60.0, name: str = "equal-share", **options) -> None:
        super().__init__(interval=interval, name=name, **options)

    def allocate(self, view: SchedulerView, jobs: np.ndarray, cur: np.ndarray) -> tuple[np.ndarray, list]:
        """``jobs`` come least attained service first; each gets the fair share clipped to the counts it may
        use (:func:`count_limits`: its range, and at most twice what it has run on, since its speed-up is
        unknown beyond that), and at most its cap where fragmentation lowered it last try (``self.cap``)."""
        free = int(view.topo.num_gpus)
        share = max(1, free // len(jobs))
        counts = np.zeros(len(jobs), dtype=np.int64)
        for i, job in enumerate(jobs.tolist()):
            lo, hi = count_limits(view, job, view.job_report(job), self.pinned)
            if self.cap is not None:
                hi = min(hi, int(self.cap[i]))
            n = min(max(share, lo), hi, free)
            if n >= lo and n > 0:
                counts[i] = n
                free -= n
        return counts, [None] * len(jobs)  # no per-job plan: batch_for keeps each job's own batch
