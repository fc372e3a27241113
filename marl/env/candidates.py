"""Candidate placements of one agent: ``Q`` queued jobs x ``P`` placement strategies, restricted to its partition.

The strategies are :mod:`cluster_sim.placement`'s own functions, run unchanged on a
:class:`~cluster_sim.placement.FreePool` of the partition alone. A partition is a contiguous block of
racks, so :meth:`topology.Partition.sub_view` re-indexes it as a stand-alone cluster; a pool over that
sub-view sees exactly the partition's GPUs, in the same relative order, and a placement on it equals
the placement on the whole cluster with every GPU outside the partition taken (tie-breaks by lowest id
are preserved by the shift). It also costs O(partition) per placement instead of O(cluster), which
matters with 32 agents on a thousand servers. GPU ids are local; add ``partition.gpus.start``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from cluster_sim.placement import FreePool, Placement, get_placement
from cluster_sim.typed_placement import one_type_placement
from cluster_sim.workload import Workload
from topology.partition import Partition
from topology.view import ClusterView

DEFAULT_PLACEMENTS: tuple[str, ...] = ("consolidate", "closest-gpus", "spread")


@dataclass(frozen=True, eq=False)
class LocalView:
    """The part of a :class:`~cluster_sim.protocol.SchedulerView` that the placement code reads, for one
    partition in local indices (``gpu_job`` still holds global job ids)."""

    topo: ClusterView
    jobs: Workload
    gpu_job: np.ndarray
    server_free: np.ndarray
    num_free: int


def partition_pool(view, part: Partition, sub: ClusterView) -> tuple[LocalView, FreePool]:
    """A FreePool of ``part`` built from the live state of ``view`` (a Simulator or any SchedulerView)."""
    g0, g1 = part.gpus.start, part.gpus.stop
    s0, s1 = part.servers.start, part.servers.stop
    server_free = view.server_free[s0:s1]
    local = LocalView(sub, view.jobs, view.gpu_job[g0:g1], server_free, int(server_free.sum()))
    return local, FreePool(local)


def strategies(names: Sequence[str]) -> list[Placement]:
    """Placement functions by name, each keeping a job on one GPU type; "random" is refused because
    candidates must be reproducible."""
    if not names:
        raise ValueError("placements must name at least one strategy of cluster_sim.placement.PLACEMENTS")
    if "random" in names:
        raise ValueError("placement 'random' cannot propose candidates (it would draw new GPUs at every look)")
    return [one_type_placement(get_placement(n)) for n in names]  # one GPU type per job, as the heuristics


def propose(
    local: LocalView, pool: FreePool, jobs: Sequence[int], places: Sequence[Placement], slots: int
) -> list[tuple[int, np.ndarray] | None]:
    """``slots * len(places)`` candidates (slot ``q * P + p``: job ``jobs[q]``, strategy ``p``), None when
    infeasible. A strategy only fails when too few GPUs are free, so that is checked once per job."""
    need = local.jobs.num_gpus
    out: list[tuple[int, np.ndarray] | None] = [None] * (slots * len(places))
    for q, job in enumerate(jobs[:slots]):
        n = int(need[job])
        if n > pool.num_free:
            continue
        for p, place in enumerate(places):
            gpus = place(local, job, n, pool)
            if gpus is not None:
                out[q * len(places) + p] = (job, gpus)
    return out
