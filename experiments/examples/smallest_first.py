"""A complete scheduler of your own: smallest GPU request first, best-fit placement, with backfilling.

Run it beside the built-in ones, from the command line or in a run config's ``schedulers:``:

    marlsched simulate --cluster small --workload synthetic:2000,window_load=1.0 \
        --policy experiments/examples/smallest_first.py:SmallestRequestFirst,fifo,tiresias
"""

from __future__ import annotations

import numpy as np

from cluster_sim.placement import FreePool, get_placement
from cluster_sim.protocol import Decision, SchedulerView, Start


class SmallestRequestFirst:
    """At each scheduling point, start waiting jobs in order of GPU request (then arrival) while they fit."""

    def __init__(self, placement: str = "best-fit") -> None:
        self.name = "smallest-first"
        self.place = get_placement(placement)

    def reset(self, view: SchedulerView) -> None:
        """Nothing to forget between runs: the scheduler keeps no state."""

    def schedule(self, view: SchedulerView) -> list[Decision]:
        queue = np.asarray(view.queue, dtype=np.int64)  # waiting jobs, in arrival order
        order = queue[np.argsort(view.jobs.num_gpus[queue], kind="stable")]
        pool = FreePool(view)  # this round's free GPUs, so two starts never get the same GPU
        decisions: list[Decision] = []
        for job in order.tolist():
            need = int(view.jobs.num_gpus[job])
            if need > pool.num_free:
                break  # sorted by request: no later job fits either
            gpus = self.place(view, job, need, pool)
            pool.take(gpus, job)
            decisions.append(Start(job, gpus))
        return decisions
