"""A complete scheduler of your own: smallest GPU request first, best-fit placement, with backfilling.

The rule is one function of what the scheduler sees (``smallest_first(view)``, the one-call form); the class
adds an option, the placement. Run either beside the built-in ones, from the command line or in a run
config's ``schedulers:``:

    marlsched simulate --cluster small --workload synthetic:2000,window_load=1.0 \
        --policy experiments/examples/smallest_first.py:SmallestRequestFirst,fifo,tiresias
    marlsched simulate --cluster small --workload synthetic:2000,window_load=1.0 \
        --policy experiments/examples/smallest_first.py:smallest_first,fifo

or from Python: ``sim.run(SmallestRequestFirst())``, ``sim.run(FunctionScheduler(smallest_first))``.
"""

from __future__ import annotations

import numpy as np

from cluster_sim.placement import FreePool, Placement, get_placement
from cluster_sim.protocol import Decision, SchedulerView, Start


def smallest_first(view: SchedulerView, place: Placement | None = None) -> list[Decision]:
    """Start waiting jobs in order of GPU request (then arrival) while they fit, each placed by ``place``
    (default best-fit)."""
    place = place or get_placement("best-fit")
    queue = np.asarray(view.queue, dtype=np.int64)  # waiting jobs, in arrival order
    order = queue[np.argsort(view.jobs.num_gpus[queue], kind="stable")]
    pool = FreePool(view)  # this round's free GPUs, so two starts never get the same GPU
    decisions: list[Decision] = []
    for job in order.tolist():
        need = int(view.jobs.num_gpus[job])
        if need > pool.num_free:
            break  # sorted by request: no later job fits either
        gpus = place(view, job, need, pool)
        pool.take(gpus, job)
        decisions.append(Start(job, gpus))
    return decisions


class SmallestRequestFirst:
    """:func:`smallest_first` with its placement as an option (``placement=consolidate`` on the command line)."""

    def __init__(self, placement: str = "best-fit") -> None:
        self.name = "smallest-first"
        self.place = get_placement(placement)

    def reset(self, view: SchedulerView) -> None:
        """Nothing to forget between runs: the scheduler keeps no state."""

    def schedule(self, view: SchedulerView) -> list[Decision]:
        return smallest_first(view, self.place)
