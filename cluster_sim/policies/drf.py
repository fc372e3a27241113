"""Dominant resource fairness across tenants (Ghodsi et al., NSDI'11), non-preemptive."""

from __future__ import annotations

import heapq

import numpy as np

from cluster_sim.placement import FreePool
from cluster_sim.policies.base import PolicyScheduler
from cluster_sim.protocol import Decision, SchedulerView


class DRF(PolicyScheduler):
    """The next job comes from the tenant (``jobs.tenant``) with the smallest dominant share.

    GPUs are the only scheduled resource, so a tenant's dominant share is the GPUs it holds divided by
    the cluster's GPUs; ties go to the tenant whose next job arrived first. Within a tenant jobs go in
    arrival order; by default a tenant whose next job does not fit waits (``backfill=False``), while the
    other tenants go on. Running jobs are never preempted, so shares converge as jobs finish.
    """

    ordering = "drf"
    default_backfill = False

    def decide(self, view: SchedulerView, queue: np.ndarray, pool: FreePool) -> list[Decision]:
        jobs = view.jobs
        total = view.topo.num_gpus
        running = np.asarray(view.running, dtype=np.int64)
        held = np.bincount(jobs.tenant[running], weights=jobs.num_gpus[running], minlength=len(jobs.tenants))
        held = held.astype(np.int64)
        tenant = jobs.tenant[queue].astype(np.int64)
        grouped = np.lexsort((queue, tenant))  # by tenant, arrival order within
        by_tenant = queue[grouped]
        tenants, first = np.unique(tenant[grouped], return_index=True)
        ends = np.append(first[1:], len(by_tenant))
        nxt = dict(zip(tenants.tolist(), first.tolist(), strict=True))
        end = dict(zip(tenants.tolist(), ends.tolist(), strict=True))
        heap = [(held[t] / total, int(by_tenant[nxt[t]]), t) for t in nxt]
        heapq.heapify(heap)
        starts: list[Decision] = []
        while heap and pool.num_free > 0:
            _, head, t = heapq.heappop(heap)
            started = self.start_in_order(view, [head], pool, backfill=False)
            nxt[t] += 1
            if started:
                starts += started
                held[t] += int(jobs.num_gpus[head])
            elif not self.backfill:
                continue  # this tenant waits for its head job
            if nxt[t] < end[t]:
                heapq.heappush(heap, (held[t] / total, int(by_tenant[nxt[t]]), t))
        return starts
