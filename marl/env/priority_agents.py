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

import re
from collections.abc import Callable, Sequence

import numpy as np

from cluster_sim.placement import FreePool, consolidate
from cluster_sim.policies.base import PolicyScheduler, admitted_by_budget
from cluster_sim.policies.run_history import TenantHistory
from cluster_sim.protocol import Decision, Preempt, Resize, SchedulerView, Start
from cluster_sim.typed_placement import GPU_TYPE_ORDERS, one_type_placement, place_on_type
from marl.env.interference_obs import InterferenceInputs
from marl.env.partitions import partition_view
from marl.env.priority_features import JobSetLayout, PriorityObservation, RoundJobs, observe_partitions
from marl.env.topology_obs import LOG_SPEED_FLOOR, SpeedCache, cand_column, log_hours, observe_topology, partition_grid
from topology.partition import partition, partition_counts

HYSTERESIS = float(np.log(31.0))  # QSSF's margin of 30 on a log-time scale
Scorer = Callable[[dict[str, np.ndarray]], np.ndarray]  # (K, ...) observation batch -> (K, N) scores


def qssf_scores(obs: dict[str, np.ndarray]) -> np.ndarray:
    """QSSF's ranking as scores: ``-ln E[remaining s]`` from the history column (the warm-start target)."""
    return obs["jobs"][..., JobSetLayout.column("log_expected_remaining")] * -JobSetLayout.LOG_SCALE


def _admitted(need: np.ndarray, part: np.ndarray, budget: np.ndarray) -> np.ndarray:
    """:func:`~cluster_sim.policies.base.admitted_by_budget` of every agent at once: ``need`` in rank order
    agent by agent (``part``), ``budget`` GPUs per agent. The longest prefix that fits is one cumulative
    sum; only an agent with a later job that fits what its prefix leaves goes through its jobs."""
    admitted = np.zeros(len(need), dtype=bool)
    if not len(need):
        return admitted
    count = np.bincount(part, minlength=len(budget))
    first = np.concatenate([[0], np.cumsum(count)[:-1]])
    cs = np.cumsum(need)
    within = cs - np.concatenate([[0], cs])[first][part]  # GPUs of the agent's jobs up to each one
    admitted = within <= budget[part]  # needs are >= 1: a prefix
    left = budget - np.bincount(part, weights=need * admitted, minlength=len(budget)).astype(np.int64)
    later = ~admitted & (need <= left[part])
    for k in np.unique(part[later]).tolist():
        rows = slice(int(first[k]), int(first[k] + count[k]))
        admitted[rows] = admitted_by_budget(need[rows], int(budget[k]))
    return admitted


def _ok_ranks(ranks: tuple[np.ndarray, np.ndarray, np.ndarray], row: int) -> np.ndarray:
    """Row ``row`` of :meth:`PriorityAgents._type_ranks`: the types that can hold the job, best first."""
    rank, ok, _ = ranks
    return rank[row][ok[row]]


class PriorityAgents(PolicyScheduler):
    """``num_agents`` agents scoring their partitions' jobs; the scores come from ``scorer``.

    ``slots``: how many jobs one agent scores per round (padded; no network weight depends on it). When
    a partition has more jobs than slots, its running jobs come first, then the waiting jobs of smallest
    expected remaining time, with a quarter of the slots kept for the longest-waiting ones. ``order_only``:
    observations carry only what :func:`qssf_scores` reads (a reference's rounds cost half as much).
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
        interference_online: bool = False,
        order_only: bool = False,
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
        if interference_inputs == "none" and not self.placing:
            interference_inputs = None  # no topology, so no interference columns to leave blank: the same agents
        if interference_inputs is not None and not self.placing:
            raise ValueError(
                "interference_inputs are columns of the placing agents' topology: set placing too, or leave "
                "interference_inputs out (null or none) for agents without the topology"
            )
        if interference_online and interference_inputs is None:
            raise ValueError("interference_online corrects the interference inputs: set interference_inputs too")
        self.inputs = (
            InterferenceInputs(interference_inputs, online=interference_online)
            if interference_inputs is not None
            else None
        )
        if order_only and self.placing:
            raise ValueError("order_only observations have no placing inputs: a reference does not place by scores")
        self.order_only = bool(order_only)
        self.name = kw.get("name") or "marl-priority"

    # ------------------------------------------------------------ lifecycle
    def check_cluster(self, topo) -> None:
        """Refuse a cluster whose racks (pods) do not split into this policy's agents' partitions, naming the
        agent counts that fit and how to give one (a trait: ``simulate`` and ``run`` ask before anything runs)."""
        wanted = self.agents_wanted or topo.num_racks
        try:
            partition(topo, wanted, self.partition_unit)
        except ValueError as err:
            fits = max(partition_counts(topo, self.partition_unit, at_most=wanted))
            named = re.sub(r",num_agents=[^,]*", "", self.name)  # the suggestion replaces a count already given
            raise ValueError(
                f"{self.name}: its {wanted} agents, one per partition: {err}; run it with fewer agents, e.g. "
                f"`{named},num_agents={fits}` in --policy or a run config's schedulers (`num_agents: {fits}` in "
                "its scheduler_options); its figures hold for the cluster it was trained on"
            ) from None

    def reset(self, view: SchedulerView) -> None:
        super().reset(view)
        topo = view.topo
        self.check_cluster(topo)
        self.num_agents = self.agents_wanted or topo.num_racks
        self.parts = partition(topo, self.num_agents, self.partition_unit)
        self.part_gpus = np.array([p.num_gpus for p in self.parts], dtype=np.int64)
        self.part_first_server = np.array([p.servers.start for p in self.parts], dtype=np.int64)
        k_n = self.num_agents
        self.roll = (np.arange(k_n)[:, None] + np.arange(k_n)[None, :]) % k_n  # agent k's partitions from its own
        self.gpu_part = np.repeat(np.arange(self.num_agents), self.part_gpus)
        self.gpu_type_of = np.asarray(topo.server_gpu_type)[np.asarray(topo.gpu_server)].astype(np.int64)
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
        self.mixed_part = np.array(self.mixed, dtype=bool)
        self.local_server_type = [stype[p.servers.start : p.servers.stop].astype(np.int64) for p in self.parts]
        self.any_mixed = bool(self.mixed_part.any())
        self.spill_place = one_type_placement(consolidate, topo, "fastest")
        self.speeds.reset()
        self.history.reset(view)
        n = len(view.jobs)
        self.agent_of = np.full(n, -1, dtype=np.int64)  # queue owner of each waiting job (-2: spill)
        self.is_spill = np.zeros(n, dtype=bool)  # larger than every partition: started by the coordinator
        # first GPU of each job's last start or move (-1: never): where a running job is, without a lookup
        # per job per round (a job runs on one partition and, placed by the agents, on one GPU type)
        self.placed_on = np.full(n, -1, dtype=np.int64)
        self._group_learned = -1  # the history's completions when the group statistics below were kept
        self._group_known = np.zeros(n, dtype=bool)
        self._group_mean = np.zeros(n)
        self._group_size = np.zeros(n)
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
        if self.inputs is not None:
            self.inputs.learn(view)  # online inputs: the co-locations seen so far correct the predictor
        queue = np.asarray(view.queue, dtype=np.int64)
        owned = self.agent_of[queue] >= 0
        arrived = view.num_arrived > self._next_job
        if not arrived and not owned.any():
            self.last_obs = None
            return None
        queue = queue[~self.is_spill[queue]]
        running = np.asarray(view.running, dtype=np.int64)
        spill = self.is_spill[running]
        spill_run = running[spill]
        running = running[~spill]
        # one history search for every job this round reads: dispatch and the observation share it
        ids = np.concatenate([running, queue])
        executed = view.executed_times(ids)
        rem = self.history.residual(ids, executed)
        n_run = len(running)
        run_part = self.gpu_part[self.first_gpus(view, running)]
        if arrived:
            self._dispatch(view, queue, rem[n_run:], running, rem[:n_run], run_part)
        owned = np.concatenate([np.ones(n_run, dtype=bool), self.agent_of[queue] >= 0])
        if owned.all():
            owned = slice(None)
        elif owned[n_run:].any():
            ids, executed, rem = ids[owned], executed[owned], rem[owned]
        else:
            self.last_obs = None
            return None
        foreign = np.zeros(self.num_agents, dtype=np.int64)
        for j in spill_run.tolist():
            foreign += np.bincount(self.gpu_part[view.placement(j)], minlength=self.num_agents)
        jobs = RoundJobs(
            ids=ids,
            part=np.concatenate([run_part, self.agent_of[ids[n_run:]]]),
            n_run=n_run,
            rem=rem,
            executed=executed,
            foreign=foreign,
        )
        obs = observe_partitions(self, view, jobs, self.order_only)
        if self.grid is not None:
            topo = observe_topology(self.grid, view, obs.job_ids, obs.running, self.speeds,
                                    self.history.expected_remaining, self.layout.LOG_SCALE, self.inputs,
                                    self.placed_on)  # fmt: skip
            obs.arrays.update(topo)
        self.last_obs = obs
        return obs

    def first_gpus(self, view: SchedulerView, running: np.ndarray) -> np.ndarray:
        """A GPU of each running job: where the agents put it, else (a job they did not place) the view's."""
        first = self.placed_on[running]
        unknown = np.flatnonzero(first < 0)
        for i in unknown.tolist():
            first[i] = self.placed_on[running[i]] = int(view.placement(int(running[i]))[0])
        return first

    def group_stats(self, jobs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The ``group_mean`` and ``group_size`` features of ``jobs``: they change only when jobs finish, so
        each job's are kept until the history learns the next completion."""
        if self.history.learned != self._group_learned:
            self._group_learned = self.history.learned
            self._group_known[:] = False
        new = jobs[~self._group_known[jobs]]
        if len(new):
            self._group_mean[new] = log_hours(self.history.residual(new, np.zeros(len(new))))
            self._group_size[new] = np.log1p(self.history.group_size(new)) / 8.0
            self._group_known[new] = True
        return self._group_mean[jobs], self._group_size[jobs]

    def apply(self, view: SchedulerView, scores: np.ndarray) -> list[Decision]:
        """The round's decisions from per-slot scores ``(K, N)`` of the last observation (none: only jobs
        larger than a partition may start); placing agents' ``(K, N * (1 + T))`` add each slot's GPU-type
        scores (without them a job takes its fastest type that holds it).

        All agents rank and admit at once (array code over every slot); only partitions where something
        happens (a preemption, a start, a move) build their pool of free GPUs and go through their jobs."""
        obs = self.last_obs
        if obs is None:
            return self._start_spill(view, [])
        lay = self.layout
        scores = np.asarray(scores, dtype=np.float64).reshape(self.num_agents, -1)
        if scores.shape[1] not in (lay.N, lay.N * (1 + lay.T)):
            raise ValueError(f"scores: {scores.shape[1]} per agent, expected {lay.N} or {lay.N * (1 + lay.T)}")
        type_scores = scores[:, lay.N :].reshape(self.num_agents, lay.N, lay.T) if scores.shape[1] > lay.N else None
        need = view.jobs.num_gpus
        part, slot = np.nonzero(obs.job_ids >= 0)  # every agent's jobs, agent by agent
        ids, running = obs.job_ids[part, slot], obs.running[part, slot]
        key = scores[part, slot] - self.hysteresis * ~running
        order = np.lexsort((ids, -key, part))  # each agent's jobs by score (ties: lower id first)
        part, slot, ids, running, key = part[order], slot[order], ids[order], running[order], key[order]
        admitted = _admitted(need[ids].astype(np.int64), part, self.part_gpus - obs.foreign_gpus)
        victim, start = running & ~admitted, ~running & admitted
        act = victim | start
        ranks, row_of, mixed, moving = None, None, None, None
        if self.any_mixed:  # each job's GPU types, for the jobs that start or may move
            mixed = self.mixed_part[part]
            kept = running & admitted
            typed = mixed & (start | (kept if self.migrate is not None else False))
            row_of = np.full(len(ids), -1, dtype=np.int64)
            row_of[typed] = np.arange(int(typed.sum()))
            if typed.any():
                ranks = self._type_ranks(view, obs, part[typed], slot[typed], ids[typed], type_scores)
            if ranks is not None and self.migrate is not None:
                moving = np.zeros(len(ids), dtype=bool)
                moving[typed & kept] = self._worth_moving(ids[typed & kept], *(a[kept[typed]] for a in ranks))
                act |= moving
        decisions: list[Decision] = []
        pools: list[FreePool | None] = [None] * self.num_agents
        left = ~running & ~admitted  # waiting jobs not admitted: others may take them (hand-off)
        for k in np.unique(part[act]).tolist() if act.any() else ():
            mine = part == k
            g0 = self.parts[k].gpus.start
            local = partition_view(view, self.parts[k], self.subs[k])
            for v in ids[mine & victim].tolist():
                pool = self._pool(pools, k, local)
                pool.release(view.placement(v) - g0, v)
                decisions.append(Preempt(v))
                self.agent_of[v] = k  # back to this agent's queue
            for i in np.flatnonzero(mine & start).tolist():
                j, n = int(ids[i]), int(need[ids[i]])
                if n <= (pools[k].num_free if pools[k] is not None else local.num_free):
                    pool = self._pool(pools, k, local)
                    rank = _ok_ranks(ranks, row_of[i]) if mixed is not None and mixed[i] else None
                    gpus = self._place(view, k, local, pool, j, n, rank)
                    if gpus is not None:
                        pool.take(gpus, j)
                        decisions.append(Start(j, (gpus + g0).astype(np.int32)))
                        self.agent_of[j] = -1
                        self.placed_on[j] = int(gpus[0]) + g0
                        continue
                left[i] = True
            if moving is not None and (mine & moving).any():
                rows = np.flatnonzero(mine & moving)
                best = [int(_ok_ranks(ranks, row_of[i])[0]) for i in rows.tolist()]
                decisions += self._moves(view, k, local, pools, ids[rows].tolist(), best)
        if left.any() and (view.num_free or any(p is not None for p in pools)):
            decisions += self._hand_off(view, pools, key[left], ids[left], part[left])
        decisions += self._start_spill(view, decisions)
        self.rounds += 1
        return decisions

    # ------------------------------------------------------------ internals
    def _type_ranks(
        self, view: SchedulerView, obs: PriorityObservation, part: np.ndarray, slot: np.ndarray, jobs: np.ndarray,
        type_scores: np.ndarray | None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
        """Each job's GPU types from best to worst, whether each can hold it (in that order) and its type keys:
        the placing scores of its slot, else the job's speeds (fastest first)."""
        if type_scores is not None:
            keys = type_scores[part, slot]
            ok = obs.arrays["cands"][part, slot, :, cand_column("valid")] > 0
        else:
            keys, ok = self._type_prior(view, jobs, part)
        rank = np.argsort(-keys, axis=1, kind="stable")  # ties: the lower type index first
        return rank, np.take_along_axis(ok, rank, axis=1), keys

    def _worth_moving(self, jobs: np.ndarray, rank: np.ndarray, ok: np.ndarray, keys: np.ndarray) -> np.ndarray:
        """Which running jobs would move: their best type that holds them beats the current one's key by more
        than ``migrate`` (a move costs a restart)."""
        has = ok.any(axis=1)
        rows = np.arange(len(jobs))
        best = rank[rows, np.argmax(ok, axis=1)]
        cur = self.gpu_type_of[self.placed_on[jobs]]
        return has & (best != cur) & ~(keys[rows, best] - keys[rows, cur] <= self.migrate)

    def _pool(self, pools: list[FreePool | None], k: int, local) -> FreePool:
        """Partition ``k``'s pool of free GPUs this round, made at its first change (``local``: its view)."""
        if pools[k] is None:
            pools[k] = FreePool(local)
        return pools[k]

    def _moves(
        self, view: SchedulerView, k: int, local, pools: list[FreePool | None], jobs: list[int], best: list[int]
    ) -> list[Decision]:
        """Move running jobs (in score order) to their best type (``best``) where it has room for them, after
        this round's starts. A type without enough free GPUs is passed over before any placement is tried."""
        out: list[Decision] = []
        g0 = self.parts[k].gpus.start
        stype = self.local_server_type[k]
        pool = pools[k]
        free = np.bincount(stype, weights=(pool.server_free if pool is not None else local.server_free)[: len(stype)],
                           minlength=len(view.topo.gpu_types))  # fmt: skip
        for j, b in zip(jobs, best, strict=True):
            held = np.asarray(view.placement(j)) - g0
            n = len(held)
            if free[b] < n:
                continue
            pool = self._pool(pools, k, local)
            gpus = place_on_type(local, j, n, pool, b, consolidate)
            if gpus is None:
                continue
            pool.release(held, j)
            pool.take(gpus, j)
            free[stype[local.topo.gpu_server[held[0]]]] += n
            free[b] -= n
            self.placed_on[j] = int(gpus[0]) + g0
            out.append(Resize(j, (gpus + g0).astype(np.int32)))
        return out

    def _type_prior(self, view: SchedulerView, jobs: np.ndarray, part: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Type keys (higher first) and which types can hold each job, without type scores: by the jobs'
        speeds (``gpu_type`` fastest or slowest), or by the free GPUs of each type of the job's partition
        (``any``, the type-blind order of :func:`cluster_sim.typed_placement.one_type_placement`)."""
        rel = self.speeds.relative(view, jobs)
        ok = rel > 0
        if self.gpu_type == "fastest":  # the network's log_speed input (floored, float32): the untrained
            # placing network's type scores, so that near-equal speeds tie (and break) the same way
            key = np.maximum(np.log(np.maximum(rel, 1e-12)), LOG_SPEED_FLOOR)
            return key.astype(np.float32).astype(np.float64), ok
        if self.gpu_type == "slowest":
            return -rel, ok
        stype = np.asarray(view.topo.server_gpu_type)
        free = np.asarray(view.server_free)
        by_type = np.stack([
            np.bincount(stype[p.servers.start : p.servers.stop], weights=free[p.servers.start : p.servers.stop],
                        minlength=rel.shape[1])
            for p in self.parts
        ])  # fmt: skip
        return by_type[part].astype(np.float64), ok

    def _place(
        self, view: SchedulerView, k: int, local, pool: FreePool, job: int, n: int, rank: np.ndarray | None = None
    ) -> np.ndarray | None:
        """GPUs of partition ``k`` (local ids) for ``job``: the compact placement (``consolidate``) on one GPU
        type, trying the types in ``rank`` (the round's order for the job); without one (a job handed over
        from another agent, whose type scores are over its owner's partition) fastest first."""
        if not self.mixed[k]:
            return consolidate(local, job, n, pool)
        if rank is None:
            key, ok = self._type_prior(view, np.array([job]), np.array([k]))
            rank = np.lexsort((np.arange(key.shape[1]), -key[0]))
            rank = rank[ok[0][rank]]
        for t in rank.tolist():
            gpus = place_on_type(local, job, n, pool, int(t), consolidate)
            if gpus is not None:
                return gpus
        return None

    def _dispatch(
        self, view: SchedulerView, queue: np.ndarray, rem_queue: np.ndarray, running: np.ndarray,
        rem_run: np.ndarray, run_part: np.ndarray,
    ) -> None:  # fmt: skip
        """Queue each new arrival at the partition with the least estimated outstanding work per GPU: its
        queue plus the jobs on its GPUs (``rem_*``: the history estimates of ``queue`` and ``running``)."""
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
        owned = self.agent_of[queue] >= 0
        work = np.bincount(
            np.concatenate([self.agent_of[queue[owned]], run_part]),
            weights=np.concatenate([rem_queue[owned] * need[queue[owned]], rem_run * need[running]]),
            minlength=self.num_agents,
        )
        arrived = queue >= first  # the arrivals, queued in arrival order after every earlier job
        if np.array_equal(queue[arrived], np.arange(first, stop)):
            rem = rem_queue[arrived][fits]
        else:  # some started already (by another scheduler): estimated on their own
            rem = self.history.expected_remaining(view, new)
        est = rem * need[new]
        for j, w in zip(new.tolist(), est.tolist(), strict=True):
            ok = self.part_gpus >= need[j]
            k = int(np.argmin(np.where(ok, work / self.part_gpus, np.inf)))
            self.agent_of[j] = k
            work[k] += w

    def _hand_off(
        self, view: SchedulerView, pools: list[FreePool | None], score: np.ndarray, jobs: np.ndarray,
        owner: np.ndarray,
    ) -> list[Decision]:  # fmt: skip
        """Partitions with GPUs still free take the best-scored waiting jobs of other agents that fit
        (``pools``: this round's, None where nothing changed)."""
        if not len(jobs):
            return []
        free = np.add.reduceat(np.asarray(view.server_free, dtype=np.int64), self.part_first_server)
        for k, p in enumerate(pools):
            if p is not None:
                free[k] = p.num_free
        need = view.jobs.num_gpus
        fit = need[jobs] <= free.max()  # free GPUs only shrink here: a job larger than all never fits
        if not fit.any():
            return []
        score, jobs, owner = score[fit], jobs[fit], owner[fit]
        out: list[Decision] = []
        for i in np.lexsort((jobs, -score)).tolist():
            j, o = int(jobs[i]), int(owner[i])
            n = int(need[j])
            cands = free >= n
            cands[o] = False
            if not cands.any() or free[o] >= n:
                continue
            k = int(np.flatnonzero(cands)[np.argmax(free[cands])])  # the most free GPUs; ties: lowest index
            part = self.parts[k]
            local = partition_view(view, part, self.subs[k])
            if pools[k] is None:
                pools[k] = FreePool(local)
            gpus = self._place(view, k, local, pools[k], j, n)
            if gpus is None:
                continue
            pools[k].take(gpus, j)
            free[k] = pools[k].num_free
            self.agent_of[j] = -1
            self.placed_on[j] = int(gpus[0]) + part.gpus.start
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
