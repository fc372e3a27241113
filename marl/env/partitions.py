"""A partition of the cluster as a stand-alone cluster, for the placement code.

A partition is a contiguous block of racks, so :meth:`topology.Partition.sub_view` re-indexes it as a
stand-alone cluster; a :class:`~cluster_sim.placement.FreePool` over that sub-view sees exactly the
partition's GPUs, in the same relative order, and a placement on it equals the placement on the whole
cluster with every GPU outside the partition taken (tie-breaks by lowest id are preserved by the shift).
It also costs O(partition) per placement instead of O(cluster), which matters with 32 agents on a thousand
servers. GPU ids are local; add ``partition.gpus.start``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cluster_sim.workload import Workload
from topology.partition import Partition
from topology.view import ClusterView


@dataclass(frozen=True, eq=False)
class LocalView:
    """The part of a :class:`~cluster_sim.protocol.SchedulerView` that the placement code reads, for one
    partition in local indices (``gpu_job`` still holds global job ids)."""

    topo: ClusterView
    jobs: Workload
    gpu_job: np.ndarray
    server_free: np.ndarray
    num_free: int


def partition_view(view, part: Partition, sub: ClusterView) -> LocalView:
    """``part`` of the live state of ``view`` (a Simulator or any SchedulerView), in local indices: a
    :class:`~cluster_sim.placement.FreePool` of it is the partition's pool."""
    g0, g1 = part.gpus.start, part.gpus.stop
    s0, s1 = part.servers.start, part.servers.stop
    server_free = view.server_free[s0:s1]
    return LocalView(sub, view.jobs, view.gpu_job[g0:g1], server_free, int(server_free.sum()))
