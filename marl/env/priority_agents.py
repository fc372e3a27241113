"""Priority agents: one agent per partition ranks all its jobs, running and waiting, and may preempt.

Each round (scheduling point) every agent scores the jobs of its partition: the jobs running on its
GPUs and the jobs queued at it. Jobs are admitted greedily in score order while the partition's GPUs
last; running jobs left out are preempted (their restart cost is the simulator's), admitted waiting jobs
start on the partition with the ``consolidate`` placement. This is Decima's "pick the next job, or stop;
what is left out does not run", taken in one shot per round: a score per job instead of one step per
pick, so a round is one forward pass whatever the queue. Tiresias, SRTF and QSSF are points of this
policy space (their rank keys as scores), so a warm start can copy the strongest of them exactly.

A waiting job's score is lowered by ``hysteresis`` before ranking, so a preemption needs a clear win:
scores are on a log-time scale (the warm start copies QSSF's ``-ln E[remaining s]``), and the default
``ln 31`` is QSSF's margin of 30. A trained policy runs with the margin ``marlsched tune-priority``
selected on its training windows (:mod:`marl.training.priority_tune`), stored in its metadata.

Cooperation: an arriving job goes to the partition with the least estimated outstanding work per GPU
(queued and running, from the tenants' history, :class:`~cluster_sim.policies.run_history.TenantHistory`;
not the job count), and after the agents have admitted, a partition with GPUs still free takes the best
scored waiting jobs that fit from the other agents' queues (hand-off). A job larger than every partition
is started by the coordinator over the whole cluster in arrival order (never preempted by agents).

What the agents see is :mod:`marl.env.priority_features`; what scores the jobs is any ``scorer`` callable
(a network, or the environment passing the actions of RLlib's agents through).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from cluster_sim.placement import FreePool, consolidate
from cluster_sim.policies.base import PolicyScheduler, admitted_by_budget
from cluster_sim.policies.run_history import TenantHistory
from cluster_sim.protocol import Decision, Preempt, SchedulerView, Start
from marl.env.candidates import partition_pool
from marl.env.priority_features import JobSetLayout, PriorityObservation, observe_partitions
from topology.partition import partition

HYSTERESIS = float(np.log(31.0))  # QSSF's margin of 30 on a log-time scale
Scorer = Callable[[dict[str, np.ndarray]], np.ndarray]  # (K, ...) observation batch -> (K, N) scores


def qssf_scores(obs: dict[str, np.ndarray]) -> np.ndarray:
    """QSSF's ranking as scores: ``-ln E[remaining s]`` from the history column (the warm-start target)."""
    return obs["jobs"][..., JobSetLayout.column("log_expected_remaining")] * -JobSetLayout.LOG_SCALE


class PriorityAgents(PolicyScheduler):
    """``num_agents`` agents scoring their partitions' jobs; the scores come from ``scorer``.

    ``slots``: how many jobs one agent scores per round (padded; no network weight depends on it). When
    a partition has more jobs than slots, its running jobs come first, then the waiting jobs of smallest
    expected remaining time, with a quarter of the slots kept for the longest-waiting ones.
    """

    ordering = "marl-priority"
    preemptive = True
    default_backfill = True

    def __init__(
        self,
        scorer: Scorer | None = None,
        *,
        num_agents: int | None = 4,
        slots: int | None = None,
        hysteresis: float = HYSTERESIS,
        partition_unit: str = "rack",
        min_history: int = 3,
        **kw,
    ) -> None:
        super().__init__("consolidate", **kw)
        if num_agents is not None and num_agents < 1:
            raise ValueError(f"num_agents must be >= 1 (None: one per rack), got {num_agents}")
        if hysteresis < 0:
            raise ValueError(f"hysteresis must be >= 0 (log-time units), got {hysteresis}")
        self.scorer = scorer if scorer is not None else qssf_scores
        self.agents_wanted = num_agents
        self.num_agents = int(num_agents or 1)
        self.slots = slots
        self.hysteresis = float(hysteresis)
        self.partition_unit = partition_unit
        self.history = TenantHistory(min_history)
        self.name = kw.get("name") or "marl-priority"

    # ------------------------------------------------------------ lifecycle
    def reset(self, view: SchedulerView) -> None:
        super().reset(view)
        topo = view.topo
        self.num_agents = self.agents_wanted or topo.num_racks
        self.parts = partition(topo, self.num_agents, self.partition_unit)
        self.part_gpus = np.array([p.num_gpus for p in self.parts], dtype=np.int64)
        self.gpu_part = np.repeat(np.arange(self.num_agents), self.part_gpus)
        self.subs = [p.sub_view(topo) for p in self.parts]
        most = int(self.part_gpus.max())
        n_slots = self.slots if self.slots is not None else most + max(32, most // 2)
        if n_slots < 2:
            raise ValueError(f"slots must be >= 2, got {n_slots}")
        self.layout = JobSetLayout(N=int(n_slots), K=self.num_agents)
        self.history.reset(view)
        n = len(view.jobs)
        self.agent_of = np.full(n, -1, dtype=np.int64)  # queue owner of each waiting job (-2: spill)
        self.is_spill = np.zeros(n, dtype=bool)  # larger than every partition: started by the coordinator
        self._next_job = 0
        self.spill: list[int] = []
        self.last_obs: PriorityObservation | None = None
        self.rounds = 0

    # ------------------------------------------------------------ one-call interface
    def schedule(self, view: SchedulerView) -> list[Decision]:
        obs = self.observe(view)
        return self.apply(view, self.scorer(obs.arrays) if obs is not None else np.zeros(0))

    # ------------------------------------------------------------ observe, then apply scores
    def observe(self, view: SchedulerView) -> PriorityObservation | None:
        """Learn finished jobs, dispatch arrivals and return every agent's observation; None when no
        agent has a choice (nothing waits, or nothing waiting could start even by preemption)."""
        self.history.learn(view)
        self._dispatch(view)
        queue = np.asarray(view.queue, dtype=np.int64)
        queue = queue[self.agent_of[queue] >= 0]
        if not len(queue):
            self.last_obs = None
            return None
        self.last_obs = observe_partitions(self, view, queue)
        return self.last_obs

    def apply(self, view: SchedulerView, scores: np.ndarray) -> list[Decision]:
        """The round's decisions from per-slot scores ``(K, N)`` of the last observation (none: only jobs
        larger than a partition may start)."""
        obs = self.last_obs
        if obs is None:
            return self._start_spill(view, [])
        scores = np.asarray(scores, dtype=np.float64).reshape(self.num_agents, self.layout.N)
        need = view.jobs.num_gpus
        decisions: list[Decision] = []
        pools: list[FreePool] = []
        leftovers: list[tuple[float, int, int]] = []  # (score, job, owner) waiting jobs not admitted
        for k, part in enumerate(self.parts):
            ids = obs.job_ids[k]
            valid = ids >= 0
            ids_v = ids[valid]
            running = obs.running[k][valid]
            key = scores[k][valid] - self.hysteresis * ~running
            order = np.lexsort((ids_v, -key))
            ranked, is_run = ids_v[order], running[order]
            local, pool = partition_pool(view, part, self.subs[k])
            budget = int(self.part_gpus[k]) - int(obs.foreign_gpus[k])
            admitted = admitted_by_budget(need[ranked].astype(np.int64), budget)
            g0 = part.gpus.start
            for v in ranked[is_run & ~admitted].tolist():
                pool.release(view.placement(v) - g0, v)
                decisions.append(Preempt(v))
                self.agent_of[v] = k  # back to this agent's queue
            w = ~is_run
            for j, ok, s in zip(ranked[w].tolist(), admitted[w].tolist(), key[order][w].tolist(), strict=True):
                if ok and int(need[j]) <= pool.num_free:
                    gpus = consolidate(local, j, int(need[j]), pool)
                    if gpus is not None:
                        pool.take(gpus, j)
                        decisions.append(Start(j, (gpus + g0).astype(np.int32)))
                        self.agent_of[j] = -1
                        continue
                leftovers.append((s, j, k))
            pools.append(pool)
        decisions += self._hand_off(view, pools, leftovers)
        decisions += self._start_spill(view, decisions)
        self.rounds += 1
        return decisions

    # ------------------------------------------------------------ internals
    def _dispatch(self, view: SchedulerView) -> None:
        """Queue each new arrival at the partition with the least estimated outstanding work per GPU."""
        first, stop = self._next_job, view.num_arrived
        if stop <= first:
            return
        self._next_job = stop
        need = view.jobs.num_gpus
        new = np.arange(first, stop, dtype=np.int64)
        fits = need[new] <= self.part_gpus.max()
        for j in new[~fits].tolist():
            self.agent_of[j] = -2
            self.is_spill[j] = True
            self.spill.append(j)
        new = new[fits]
        if not len(new):
            return
        work = self.outstanding_work(view)
        est = self.history.expected_remaining(view, new) * need[new]
        for j, w in zip(new.tolist(), est.tolist(), strict=True):
            ok = self.part_gpus >= need[j]
            k = int(np.argmin(np.where(ok, work / self.part_gpus, np.inf)))
            self.agent_of[j] = k
            work[k] += w

    def outstanding_work(self, view: SchedulerView) -> np.ndarray:
        """Estimated GPU-seconds still to do per partition: its queue plus the jobs on its GPUs."""
        work = np.zeros(self.num_agents)
        queue = np.asarray(view.queue, dtype=np.int64)
        queue = queue[self.agent_of[queue] >= 0]
        running = np.asarray(view.running, dtype=np.int64)
        running = running[~self.is_spill[running]]
        jobs = np.concatenate([queue, running])
        if not len(jobs):
            return work
        rem = self.history.expected_remaining(view, jobs) * view.jobs.num_gpus[jobs]
        owner = np.concatenate(
            [self.agent_of[queue], self.gpu_part[[int(view.placement(j)[0]) for j in running.tolist()]]]
        ).astype(np.int64)
        np.add.at(work, owner, rem)
        return work

    def _hand_off(
        self, view: SchedulerView, pools: list[FreePool], left: list[tuple[float, int, int]]
    ) -> list[Decision]:
        """Partitions with GPUs still free take the best-scored waiting jobs of other agents that fit."""
        if not left or not any(p.num_free for p in pools):
            return []
        need = view.jobs.num_gpus
        out: list[Decision] = []
        for _, j, owner in sorted(left, key=lambda t: (-t[0], t[1])):
            n = int(need[j])
            cands = [k for k, p in enumerate(pools) if k != owner and p.num_free >= n]
            if not cands or pools[owner].num_free >= n:
                continue
            k = max(cands, key=lambda c: (pools[c].num_free, -c))
            part = self.parts[k]
            local, _ = partition_pool(view, part, self.subs[k])
            gpus = consolidate(local, j, n, pools[k])
            if gpus is None:
                continue
            pools[k].take(gpus, j)
            self.agent_of[j] = -1
            out.append(Start(j, (gpus + part.gpus.start).astype(np.int32)))
        return out

    def _start_spill(self, view: SchedulerView, decisions: Sequence[Decision]) -> list[Decision]:
        """Jobs larger than a partition, in arrival order, over the whole cluster while the head fits."""
        if not self.spill:
            return []
        pool = FreePool(view)
        for d in decisions:  # this round's decisions, as the agents' pools already hold them
            if isinstance(d, Preempt):
                pool.release(view.placement(d.job), d.job)
            else:
                pool.take(d.gpus, d.job)
        out: list[Decision] = []
        while self.spill and int(view.jobs.num_gpus[self.spill[0]]) <= pool.num_free:
            j = self.spill[0]
            gpus = consolidate(view, j, int(view.jobs.num_gpus[j]), pool)
            if gpus is None:
                break
            self.spill.pop(0)
            pool.take(gpus, j)
            out.append(Start(j, gpus))
        return out


class OracleKeyAgents(PriorityAgents):
    """A privileged reference, not a scheduler: the untrained agents (QSSF's scores) with each job's *true*
    remaining time in place of the history estimate in its observation, everything else unchanged. What it
    gains over :class:`PriorityAgents` with ``scorer=None`` is the room of the score: what any network that
    estimates remaining time could win (``experiments/benchmarks/priority_room.py``)."""

    def observe(self, view: SchedulerView) -> PriorityObservation | None:
        obs = super().observe(view)
        if obs is not None:
            ids = obs.job_ids
            ok = ids >= 0
            key = obs.arrays["jobs"][..., JobSetLayout.column("log_expected_remaining")]
            key[ok] = np.log(np.maximum(view.remaining_times(ids[ok]), 1.0)) / JobSetLayout.LOG_SCALE
        return obs
