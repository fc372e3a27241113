"""Priority agents: one agent per partition ranks all its jobs, running and waiting, and may preempt.

Each round (scheduling point) every agent scores the jobs of its partition: the jobs running on its
GPUs and the jobs queued at it. Jobs are admitted greedily in score order while the partition's GPUs
last; running jobs left out are preempted (their restart cost is the simulator's), admitted waiting jobs
start on the partition with the ``consolidate`` placement (the most compact GPUs), on one GPU type. Where a
partition holds several types, placing agents (``placing=True``) also score every (job, type) pair, and a
job takes its best-scored type that holds it; other agents take the job's fastest type (``gpu_type``:
``any`` and ``slowest`` are references). Within a type the server choice is the compact rule's: over
oversubscribed uplinks any compact placement is as good as the best measured and scattering costs 13%
(README, regime ``uplinks``), so the learned choice is where the room is, the type.

This is Decima's "pick the next job, or stop; what is left out does not run", taken in one shot per round: a
score per job instead of one step per pick, so a round is one forward pass whatever the queue. Tiresias,
SRTF and QSSF are points of this policy space (their rank keys as scores), so a warm start can copy the
strongest of them exactly.

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
from cluster_sim.protocol import Decision, Preempt, Resize, SchedulerView, Start
from cluster_sim.typed_placement import GPU_TYPE_ORDERS, one_type_placement, place_on_type
from marl.env.interference_obs import InterferenceInputs
from marl.env.partitions import partition_pool
from marl.env.priority_features import JobSetLayout, PriorityObservation, observe_partitions
from marl.env.topology_obs import LOG_SPEED_FLOOR, SpeedCache, cand_column, observe_topology, partition_grid
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
        placing: bool = False,
        gpu_type: str = "fastest",
        migrate: float | None = None,
        interference_inputs: str | None = None,
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
        self.placing = bool(placing)
        if gpu_type not in GPU_TYPE_ORDERS:
            raise ValueError(f"gpu_type {gpu_type!r} is not one of: {', '.join(GPU_TYPE_ORDERS)}")
        self.gpu_type = gpu_type
        if migrate is not None and (migrate < 0 or gpu_type != "fastest"):
            raise ValueError(f"migrate: a margin >= 0 with gpu_type fastest (or None: never move), got {migrate}")
        self.migrate = migrate
        self.speeds = SpeedCache()
        if interference_inputs is not None and not self.placing:
            raise ValueError("interference_inputs are columns of the placing agents' topology: set placing too")
        self.inputs = InterferenceInputs(interference_inputs) if interference_inputs is not None else None
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
        self.grid = partition_grid(topo, self.parts) if self.placing else None
        r, s, g, t = self.grid.shape if self.grid is not None else (0, 0, 0, 0)
        self.layout = JobSetLayout(N=int(n_slots), K=self.num_agents, R=r, S=s, G=g, T=t,
                                   interference=self.inputs is not None)  # fmt: skip
        if self.inputs is not None:
            self.inputs.reset(view)
        stype = np.asarray(topo.server_gpu_type)
        self.mixed = [bool(np.ptp(stype[p.servers.start : p.servers.stop]) > 0) for p in self.parts]
        self.spill_place = one_type_placement(consolidate, topo, "fastest")
        self.speeds.reset()
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
        obs = observe_partitions(self, view, queue)
        if self.grid is not None:
            topo = observe_topology(self.grid, view, obs.job_ids, obs.running, self.speeds,
                                    self.history.expected_remaining, self.layout.LOG_SCALE, self.inputs)  # fmt: skip
            obs.arrays.update(topo)
        self.last_obs = obs
        return obs

    def apply(self, view: SchedulerView, scores: np.ndarray) -> list[Decision]:
        """The round's decisions from per-slot scores ``(K, N)`` of the last observation (none: only jobs
        larger than a partition may start); placing agents' ``(K, N * (1 + T))`` add each slot's GPU-type
        scores (without them a job takes its fastest type that holds it)."""
        obs = self.last_obs
        if obs is None:
            return self._start_spill(view, [])
        lay = self.layout
        scores = np.asarray(scores, dtype=np.float64).reshape(self.num_agents, -1)
        if scores.shape[1] not in (lay.N, lay.N * (1 + lay.T)):
            raise ValueError(f"scores: {scores.shape[1]} per agent, expected {lay.N} or {lay.N * (1 + lay.T)}")
        type_scores = scores[:, lay.N :].reshape(self.num_agents, lay.N, lay.T) if scores.shape[1] > lay.N else None
        scores = scores[:, : lay.N]
        self._type_rows: dict[int, np.ndarray] = {}
        self._type_key_of: dict[int, np.ndarray] = {}
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
            if self.mixed[k]:
                self._type_keys(view, obs, k, order[w], ids_v[order][w], type_scores)
            kept = is_run & admitted
            if self.migrate is not None and self.mixed[k] and kept.any():
                self._type_keys(view, obs, k, order[kept], ids_v[order][kept], type_scores)
            for j, ok, s in zip(ranked[w].tolist(), admitted[w].tolist(), key[order][w].tolist(), strict=True):
                if ok and int(need[j]) <= pool.num_free:
                    gpus = self._place(view, k, local, pool, j, int(need[j]))
                    if gpus is not None:
                        pool.take(gpus, j)
                        decisions.append(Start(j, (gpus + g0).astype(np.int32)))
                        self.agent_of[j] = -1
                        continue
                leftovers.append((s, j, k))
            if self.migrate is not None and self.mixed[k]:
                decisions += self._moves(view, k, local, pool, ranked[kept].tolist())
            pools.append(pool)
        decisions += self._hand_off(view, pools, leftovers)
        decisions += self._start_spill(view, decisions)
        self.rounds += 1
        return decisions

    # ------------------------------------------------------------ internals
    def _type_keys(
        self, view: SchedulerView, obs: PriorityObservation, k: int, slots: np.ndarray, jobs: np.ndarray,
        type_scores: np.ndarray | None,
    ) -> None:  # fmt: skip
        """Each waiting job's GPU types from best to worst (types that cannot hold it left out), kept for
        this round's placements: the placing scores of its slot, else the job's speeds (fastest first)."""
        valid_slots = np.flatnonzero(obs.job_ids[k] >= 0)
        if type_scores is not None:
            keys = type_scores[k, valid_slots[slots]]
            ok = obs.arrays["cands"][k, valid_slots[slots], :, cand_column("valid")] > 0
        else:
            keys, ok = self._type_prior(view, jobs, k)
        t_n = keys.shape[1]
        for j, key, fine in zip(jobs.tolist(), keys, ok, strict=True):
            rank = np.lexsort((np.arange(t_n), -key))
            self._type_rows[j] = rank[fine[rank]]
            self._type_key_of[j] = key

    def _moves(self, view: SchedulerView, k: int, local, pool: FreePool, jobs: list[int]) -> list[Decision]:
        """Running jobs (in score order) moved to a better type with room, after this round's starts: a move
        costs a restart, so the type's key must beat the current one's by more than ``migrate``."""
        out: list[Decision] = []
        g0 = self.parts[k].gpus.start
        stype = np.asarray(local.topo.server_gpu_type)[np.asarray(local.topo.gpu_server)]
        for j in jobs:
            rank = self._type_rows.get(j)
            if rank is None or not len(rank):
                continue
            held = np.asarray(view.placement(j)) - g0
            cur, best = int(stype[held[0]]), int(rank[0])
            key = self._type_key_of[j]
            if best == cur or key[best] - key[cur] <= self.migrate:
                continue
            gpus = place_on_type(local, j, len(held), pool, best, consolidate)
            if gpus is None:
                continue
            pool.release(held, j)
            pool.take(gpus, j)
            out.append(Resize(j, (gpus + g0).astype(np.int32)))
        return out

    def _type_prior(self, view: SchedulerView, jobs: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Type keys (higher first) and which types can hold each job, without type scores: by the jobs'
        speeds (``gpu_type`` fastest or slowest), or by the partition's free GPUs of each type (``any``, the
        type-blind order of :func:`cluster_sim.typed_placement.one_type_placement`)."""
        rel = self.speeds.relative(view, jobs)
        ok = rel > 0
        if self.gpu_type == "fastest":  # the network's log_speed input (floored, float32): the untrained
            # placing network's type scores, so that near-equal speeds tie (and break) the same way
            key = np.maximum(np.log(np.maximum(rel, 1e-12)), LOG_SPEED_FLOOR)
            return key.astype(np.float32).astype(np.float64), ok
        if self.gpu_type == "slowest":
            return -rel, ok
        part = self.parts[k]
        stype = np.asarray(view.topo.server_gpu_type)[part.servers.start : part.servers.stop]
        free = np.bincount(stype, weights=np.asarray(view.server_free)[part.servers.start : part.servers.stop],
                           minlength=rel.shape[1])  # fmt: skip
        return np.broadcast_to(free, rel.shape).astype(np.float64), ok

    def _place(
        self, view: SchedulerView, k: int, local, pool: FreePool, job: int, n: int, handed: bool = False
    ) -> np.ndarray | None:
        """GPUs of partition ``k`` (local ids) for ``job``: the compact placement (``consolidate``) on one GPU
        type, trying the types in the round's order for the job; a job ``handed`` over from another agent
        tries them fastest first (its type scores are its owner's, over the types its owner's partition
        can hold it on)."""
        if not self.mixed[k]:
            return consolidate(local, job, n, pool)
        rank = None if handed else self._type_rows.get(job)
        if rank is None:
            key, ok = self._type_prior(view, np.array([job]), k)
            rank = np.lexsort((np.arange(key.shape[1]), -key[0]))
            rank = rank[ok[0][rank]]
        for t in rank:
            gpus = place_on_type(local, job, n, pool, int(t), consolidate)
            if gpus is not None:
                return gpus
        return None

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
            gpus = self._place(view, k, local, pools[k], j, n, handed=True)
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
            gpus = self.spill_place(view, j, int(view.jobs.num_gpus[j]), pool)
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
