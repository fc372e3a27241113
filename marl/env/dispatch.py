"""Which agent queues an arriving job, which jobs bypass the agents, and when a blocked job changes agent.

Rules (one agent per partition, ``K`` partitions, ``T`` tenants in the workload):

- Ownership: with one tenant every agent is eligible. Otherwise tenant ``t`` owns the agents
  ``{a : a % T == t}`` when ``K >= T`` and agent ``t % K`` when ``K < T``, the trace's virtual clusters
  mapped onto partitions.
- Load balance: among the eligible agents whose partition has at least the job's GPUs, the least loaded
  (queued GPU demand + GPUs in use, over the partition's GPUs; ties go to the lowest index). If no owned
  agent is large enough, any agent large enough is eligible.
- Spill: a job asking for more GPUs than any partition has goes to no agent. The coordinator starts
  such jobs itself, in arrival order, with :func:`cluster_sim.placement.consolidate` over the whole
  cluster when enough GPUs are free: a documented fallback, since no single agent can place them.
- Hand-off: a job at the head of an agent's queue that does not fit in its partition right now moves to
  a neighbouring partition (index +-1) whose queue is empty and which has enough free GPUs (the one with
  more free GPUs first, then the lower index). Ownership is a dispatch preference, not a quota, so a
  hand-off may cross tenants: an idle neighbour is better used than left empty.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

SPILL = -2  # agent_of value of a job that no partition can hold
UNASSIGNED = -1


def owned_agents(num_agents: int, num_tenants: int) -> list[np.ndarray]:
    """Per tenant, the agents it owns (all agents when there is one tenant)."""
    if num_agents < 1 or num_tenants < 1:
        raise ValueError(f"need >= 1 agent and >= 1 tenant, got {num_agents} agents and {num_tenants} tenants")
    every = np.arange(num_agents)
    if num_tenants == 1:
        return [every]
    if num_agents >= num_tenants:
        return [every[every % num_tenants == t] for t in range(num_tenants)]
    return [np.array([t % num_agents]) for t in range(num_tenants)]


class Dispatcher:
    """Per-agent queues (job ids in order of arrival to the agent), their GPU demand, and the spill queue."""

    def __init__(self, partition_gpus: Sequence[int], num_tenants: int, num_jobs: int) -> None:
        self.capacity = np.asarray(partition_gpus, dtype=np.int64)
        self.num_agents = len(self.capacity)
        self.owned = owned_agents(self.num_agents, num_tenants)
        self.queues: list[list[int]] = [[] for _ in range(self.num_agents)]
        self.version = [0] * self.num_agents  # bumped whenever an agent's queue changes
        self.demand = np.zeros(self.num_agents, dtype=np.int64)  # queued GPUs per agent
        self.spill: list[int] = []
        self.agent_of = np.full(num_jobs, UNASSIGNED, dtype=np.int32)
        self.handoffs = 0

    def assign(self, job: int, gpus: int, tenant: int, free: np.ndarray) -> int:
        """Queue ``job`` at an agent (returned) or on the spill queue (returns :data:`SPILL`).

        ``free``: free GPUs per partition now; GPUs in use are the partition's GPUs minus those.
        """
        cap = self.capacity
        eligible = self.owned[tenant % len(self.owned)]
        eligible = eligible[cap[eligible] >= gpus]
        if len(eligible) == 0:
            eligible = np.flatnonzero(cap >= gpus)
        if len(eligible) == 0:
            self.spill.append(job)
            self.agent_of[job] = SPILL
            return SPILL
        load = (self.demand[eligible] + cap[eligible] - free[eligible]) / cap[eligible]
        agent = int(eligible[int(np.argmin(load))])  # argmin returns the first minimum: lowest index
        self.queues[agent].append(job)
        self.version[agent] += 1
        self.demand[agent] += gpus
        self.agent_of[job] = agent
        return agent

    def remove(self, agent: int, job: int, gpus: int) -> None:
        """Take a job that starts off its agent's queue."""
        self.queues[agent].remove(job)
        self.version[agent] += 1
        self.demand[agent] -= gpus

    def hand_off(self, need: np.ndarray, free: np.ndarray) -> list[tuple[int, int, int]]:
        """Move blocked queue heads to idle neighbours; returns ``(job, from, to)`` per move.

        ``need``: GPUs per job (the workload column); ``free``: free GPUs per partition now.
        """
        moves = []
        k = self.num_agents
        for a in range(k):
            queue = self.queues[a]
            if not queue:
                continue
            job = queue[0]
            n = int(need[job])
            if n <= free[a]:
                continue
            targets = [b for b in (a - 1, a + 1) if 0 <= b < k and not self.queues[b] and free[b] >= n]
            if not targets:
                continue
            b = min(targets, key=lambda x: (-int(free[x]), x))
            self.remove(a, job, n)
            self.queues[b].append(job)
            self.version[b] += 1
            self.demand[b] += n
            self.agent_of[job] = b
            self.handoffs += 1
            moves.append((job, a, b))
        return moves
