"""AFS-style elastic sharing (Hwang et al., NSDI'21): each further GPU to the job it speeds up most.

AFS' insight is that a GPU should go to the job whose throughput it raises most relative to what the job
already has, weighed against job lengths; its AFS-P variant assumes no knowledge of lengths. This policy
follows AFS-P, with no length known: every ``interval`` (60 s) jobs are admitted with their smallest GPU
count in least-attained-service order while GPUs last, then every further GPU goes, greedily, to the job
with the largest marginal throughput per GPU relative to its throughput on its smallest count
(``(thr(n + k) − thr(n)) / (k · thr(min))``), as long as that is positive. Throughput comes from the job's
own step-time measurements (Pollux's model, :func:`~cluster_sim.policies.elastic.goodput_function`) at the
job's own batch (:func:`~cluster_sim.policies.elastic.kept_batch`): AFS does not tune batch sizes. Jobs
that have not run yet, or have no application (duration traces), keep their smallest count; counts are
capped as in Pollux.
"""

from __future__ import annotations

import numpy as np

from cluster_sim.policies.elastic import (
    ElasticPolicy,
    count_limits,
    fixed_batch_goodput,
    goodput_function,
    greedy_counts,
)
from cluster_sim.protocol import SchedulerView


class AFS(ElasticPolicy):
    """Least attained service admission, then GPUs by marginal relative throughput."""

    ordering = "afs"

    def __init__(self, *, interval: float = 60.0, seed: int = 0, name: str = "afs", **kw) -> None:
        super().__init__(interval=interval, seed=seed, name=name, **kw)

    def allocate(self, view: SchedulerView, jobs: np.ndarray, cur: np.ndarray) -> tuple[np.ndarray, list]:
        cost, valid, counts, free = self.per_round(view, jobs, lambda: self._tables(view, jobs))
        return greedy_counts(cost, valid, counts, free, self.cap), [None] * len(jobs)

    def _tables(self, view: SchedulerView, jobs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        """(cost, valid) per job and GPU count, the admitted counts and the GPUs left."""
        reports = [view.job_report(int(j)) if view.is_elastic(int(j)) else None for j in jobs]
        limits = [count_limits(view, int(j), r, self.pinned) for j, r in zip(jobs, reports, strict=True)]
        width = max(top for _, top in limits) + 1
        cost = np.zeros((len(jobs), width))  # minus the speedup over the smallest count
        valid = np.zeros((len(jobs), width), dtype=bool)
        counts = np.zeros(len(jobs), dtype=np.int64)
        free = int(view.topo.num_gpus)
        for i, (j, r) in enumerate(zip(jobs.tolist(), reports, strict=True)):
            lo, top = limits[i]
            if lo > free:  # jobs come in least-attained-service order
                continue
            counts[i] = lo
            free -= lo
            if r is None:
                valid[i, lo] = True
                continue
            n = np.arange(lo, top + 1)
            thr = self.cached(
                j,
                (self.report_key(r), lo, top),
                lambda r=r, j=j, n=n: fixed_batch_goodput(goodput_function(r), r.app, view, j, n),
            )
            cost[i, lo : top + 1] = -thr / max(thr[0], 1e-12)
            valid[i, lo : top + 1] = True
        return cost, valid, counts, free
