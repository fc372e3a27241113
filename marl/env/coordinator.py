"""The multi-agent scheduling round shared by the RL environment and the deployed scheduler.

At each scheduling point (:meth:`Coordinator.begin`) the coordinator learns of completions (to update
its duration estimates) and arrivals (dispatched to agents, :mod:`marl.env.dispatch`), starts spill jobs,
and hands blocked queue heads to idle neighbours. Then agents act in steps: :meth:`observe` gives every
agent its observation (candidates from :mod:`marl.env.candidates`, features from :mod:`marl.env.features`),
:meth:`act` starts the chosen candidates on each agent's working :class:`~cluster_sim.placement.FreePool`,
and :meth:`end_round` hands back the round's Start decisions for the simulator to apply. Partitions are
disjoint, so the agents of one step never compete for a GPU.

An agent's observation only changes when its own partition or queue does, or when time moves, so within
a round it is rebuilt only for the agents that acted; its pool and candidates (the costly part) are kept
across scheduling points until its partition's occupancy or its queue head changes.

The coordinator reads the declared :class:`cluster_sim.protocol.ClusterStateView` (which the simulator
implements), never the simulator's internals. It starts every job itself and never preempts, so a job's
executed time is ``now - started_at``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from cluster_sim.job_descriptors import DescriptorCache
from cluster_sim.placement import FreePool, consolidate
from cluster_sim.protocol import DONE, ClusterStateView, Start
from interference.base import InterferenceModel, NoInterference
from interference.queries import KeyedFactors
from marl.env.candidates import DEFAULT_PLACEMENTS, LocalView, partition_pool, propose, strategies
from marl.env.dispatch import Dispatcher
from marl.env.features import (
    JobState,
    PartitionStatic,
    PartitionTables,
    SyncSensitivity,
    candidate_features,
    check_layout_columns,
    interference_key,
    occupancy_features,
    queue_features,
)
from marl.env.obs_layout import OBS_KEYS, ObsLayout
from topology.partition import partition
from topology.view import ClusterView, Level

# Which Q jobs of its queue an agent is shown (see Coordinator.shown).
QUEUE_ORDERS = ("arrival", "estimate")


class _Agent:
    """Working state of one agent. Its pool, candidates and candidate features persist across scheduling
    points while its partition's occupancy and queue head stay the same; features that depend on the
    time are rebuilt at every point."""

    __slots__ = (
        "cand_key", "cand_obs", "cands", "factors", "free", "index", "local", "obs", "occ", "pool", "static", "uplink",
    )  # fmt: skip

    def __init__(self, index: int, static: PartitionStatic) -> None:
        self.index = index
        self.static = static
        self.free = 0
        self.obs: dict[str, np.ndarray] | None = None
        self.drop_pool()

    def drop_pool(self) -> None:
        self.local: LocalView | None = None
        self.pool: FreePool | None = None
        self.occ: np.ndarray | None = None  # the pool's GPU -> job array (a slice of the coordinator's copy)
        self.uplink: np.ndarray | None = None
        self.cands: list[tuple[int, np.ndarray] | None] | None = None
        self.cand_key: tuple[int, ...] = ()
        self.cand_obs: dict[str, np.ndarray] = {}
        self.factors: np.ndarray | None = None


class Coordinator:
    """Dispatch, candidates, observations and decisions of ``num_agents`` agents on ``topo``.

    ``predictor`` is the interference model whose predictions the agents see (None: no prediction);
    it is independent of the simulator's ground truth.
    """

    def __init__(
        self,
        topo: ClusterView,
        *,
        num_agents: int = 4,
        queue_slots: int = 3,
        placements: Sequence[str] = DEFAULT_PLACEMENTS,
        predictor: InterferenceModel | None = None,
        partition_unit: str = "rack",
        queue_order: str = "arrival",
    ) -> None:
        if queue_order not in QUEUE_ORDERS:
            raise ValueError(f"queue_order={queue_order!r}; choose one of {QUEUE_ORDERS}")
        self.queue_order = queue_order
        self.topo = topo
        self.partitions = partition(topo, num_agents, partition_unit)
        shapes = {(p.num_gpus, len(p.servers), len(p.racks)) for p in self.partitions}
        if len(shapes) > 1:
            raise ValueError(
                f"the {num_agents} partitions of {topo.name!r} differ in shape (GPUs, servers, racks) "
                f"{sorted(shapes)}; one shared policy needs equal partitions: choose another num_agents or "
                "a homogeneous cluster"
            )
        if queue_slots < 1:
            raise ValueError(f"queue_slots must be >= 1, got {queue_slots}")
        self.placement_names = tuple(placements)
        self.places = strategies(self.placement_names)
        g, s, r = shapes.pop()
        self.layout = ObsLayout(G=g, S=s, R=r, Q=queue_slots, C=queue_slots * len(self.places))
        check_layout_columns(self.layout.feature_names())
        self.num_agents = num_agents
        self.agent_ids = [f"p{i}" for i in range(num_agents)]
        self.predictor = predictor if predictor is not None else NoInterference()
        self._predicts = not isinstance(self.predictor, NoInterference)
        self._keyed = KeyedFactors(self.predictor)  # its memo outlives episodes: answers depend on the query
        self._server_starts = np.array([p.servers.start for p in self.partitions])
        self._gpu_part = np.repeat(np.arange(num_agents), [p.num_gpus for p in self.partitions])
        self._statics = [
            PartitionStatic(p, sub := p.sub_view(topo), int(sub.server_gpu_type[0])) for p in self.partitions
        ]
        self._tables: PartitionTables | None = None
        self._tables_perf: object = None
        self._gpu_types = np.array([st.gpu_type for st in self._statics])
        self._first_gpus = np.array([p.gpus.start for p in self.partitions])
        self.view = None

    # ------------------------------------------------------------ lifecycle
    def reset(self, view: ClusterStateView) -> None:
        """Start a new run on ``view`` (its workload may differ from the last run's)."""
        if (view.topo.num_gpus, view.topo.num_servers) != (self.topo.num_gpus, self.topo.num_servers):
            raise ValueError(f"view's cluster {view.topo.name!r} is not the coordinator's {self.topo.name!r}")
        perf = getattr(view, "perf", None)
        if self._tables is None or perf is not self._tables_perf:
            self._tables = PartitionTables.build(self.topo, self._statics, perf)
            self._tables_perf = perf
        self.view = view
        self.jobs = JobState(view.jobs, len(self.topo.gpu_types))
        self.dispatch = Dispatcher([p.num_gpus for p in self.partitions], len(view.jobs.tenants), len(view.jobs))
        self.descriptors = DescriptorCache(view.jobs, self.topo, perf)
        self.sync = SyncSensitivity(self.topo)
        self.agents = [_Agent(i, st) for i, st in enumerate(self._statics)]
        self._shown: list[tuple[tuple[int, int], list[int], int] | None] = [None] * self.num_agents
        self._estimates: tuple[int, np.ndarray] | None = None
        self._next_job = 0
        self._running: set[int] = set()
        self._seen_done = 0
        self._decisions: list[Start] = []
        self._round_jobs: list[int] = []
        self._spill_starts: list[tuple[int, np.ndarray]] = []
        self._occ = np.full(self.topo.num_gpus, -1, dtype=np.int64)  # GPU -> job as the agents' pools see it

    def begin(self, view: ClusterStateView) -> None:
        """A new scheduling point: learn completions and arrivals, start spill jobs, hand off blocked heads."""
        self.view = view
        need = self.jobs.num_gpus
        if view.num_completed > self._seen_done:
            running = np.fromiter(self._running, dtype=np.int64, count=len(self._running))
            done = np.sort(running[view.job_states[running] == DONE])
            executed = np.array([view.executed_time(int(j)) for j in done])
            self.jobs.estimator.observe(self.jobs.model[done], executed, self.jobs.num_gpus[done])
            self._running.difference_update(done.tolist())
            self._seen_done = view.num_completed
        free = np.add.reduceat(np.asarray(view.server_free, dtype=np.int64), self._server_starts)
        tenant = view.jobs.tenant
        for j in range(self._next_job, view.num_arrived):
            self.dispatch.assign(j, int(need[j]), int(tenant[j]), free)
        self._next_job = view.num_arrived
        if self.dispatch.spill:
            self._start_spill(view, free)
        self.dispatch.hand_off(need, free)
        touched = set()
        for _, gpus in self._spill_starts:
            touched.update(np.unique(self._gpu_part[gpus]).tolist())
        # partitions whose occupancy changed since their pool was built (one pass over all GPUs)
        touched.update(np.unique(self._gpu_part[np.flatnonzero(view.gpu_job != self._occ)]).tolist())
        for a in self.agents:
            a.free = int(free[a.index])
            a.obs = None
            if a.pool is not None and a.index in touched:
                a.drop_pool()

    def _start_spill(self, view, free: np.ndarray) -> None:
        """Spill jobs in arrival order, consolidated over the whole cluster, while the head fits."""
        spill, need = self.dispatch.spill, self.jobs.num_gpus
        pool = None
        while spill:
            j = spill[0]
            n = int(need[j])
            if n > (view.num_free if pool is None else pool.num_free):
                break
            if pool is None:
                pool = FreePool(view)
            gpus = consolidate(view, j, n, pool)
            pool.take(gpus, j)
            spill.pop(0)
            self._start(j, gpus, 1.0)
            self._spill_starts.append((j, gpus))
            free -= np.bincount(self._gpu_part[gpus], minlength=self.num_agents)

    def end_round(self) -> list[Start]:
        """The decisions of this scheduling point, in the order taken; the next point starts afresh."""
        decisions, self._decisions = self._decisions, []
        self.jobs.in_round[self._round_jobs] = False
        self._round_jobs = []
        self._spill_starts = []
        for a in self.agents:
            a.obs = None  # in-round occupants now show the simulator's interference factor
        return decisions

    # ------------------------------------------------------------ agents
    def any_feasible(self) -> bool:
        """Whether some agent has a feasible candidate (one of its first Q jobs fits its free GPUs)."""
        queues = self.dispatch.queues  # a full partition fits nothing: every job needs a GPU
        return any(a.free and queues[a.index] and self._shown_need(a.index) <= a.free for a in self.agents)

    def _shown_need(self, agent: int) -> int:
        """The fewest GPUs any job shown to ``agent`` needs (cached with the shown jobs)."""
        self.shown(agent)
        return self._shown[agent][2]

    def shown(self, agent: int) -> list[int]:
        """The (at most Q) queued jobs agent ``agent`` chooses among, in slot order.

        ``arrival``: the first Q in arrival order. ``estimate``: the Q - 1 jobs of the smallest estimated
        GPU-time (the per-model mean of completed jobs' GPU-time, :class:`marl.env.features.DurationEstimator`,
        never the job's own duration; ties by arrival), then the oldest job if not already shown, so the
        agent can both run likely-short jobs first and keep long ones from starving.
        """
        key = (self.dispatch.version[agent], self.jobs.estimator.version)
        cached = self._shown[agent]
        if cached is not None and cached[0] == key:
            return cached[1]
        if cached is not None and cached[0][0] == key[0] and len(cached[1]) < self.layout.Q:
            self._shown[agent] = (key, *cached[1:])  # a short queue is shown whole, in arrival order
            return cached[1]
        queue = self.dispatch.queues[agent]
        q = self.layout.Q
        if self.queue_order == "arrival" or len(queue) <= q:
            shown = queue[:q]
        else:
            ids = np.asarray(queue, dtype=np.int64)
            est = self._model_estimates()[self.jobs.model[ids]]
            order = np.lexsort((np.arange(len(ids)), est))  # queue position breaks ties (arrival to the agent)
            first = order[: q - 1]
            last = 0 if 0 not in first else order[q - 1]
            shown = [*ids[first].tolist(), int(ids[last])]
        need = self.jobs.num_gpus
        self._shown[agent] = (key, shown, min((int(need[j]) for j in shown), default=0))  # never modified
        return shown

    def _model_estimates(self) -> np.ndarray:
        """Estimated GPU-time of a job of each model, recomputed when the estimates change (at completions),
        not at each agent's queue change."""
        estimator = self.jobs.estimator
        if self._estimates is None or self._estimates[0] != estimator.version:
            self._estimates = (estimator.version, estimator.estimate_gpu_time(np.arange(len(estimator.count))))
        return self._estimates[1]

    def observe(self) -> list[dict[str, np.ndarray]]:
        """Every agent's observation (a new dict whenever it changed; never mutated afterwards)."""
        dirty = [a for a in self.agents if a.obs is None]
        if dirty:
            stale = [a for a in dirty if self._refresh_candidates(a)]
            self._predict(stale)
            for a in stale:
                a.cand_obs = self._candidate_obs(a)
            self._fill(dirty)
        return [a.obs for a in self.agents]

    def batch(self) -> dict[str, np.ndarray]:
        """All agents' observations stacked along a leading agent axis (K, ...)."""
        obs = self.observe()
        return {key: np.stack([o[key] for o in obs]) for key in OBS_KEYS}

    def act(self, actions: Sequence[int]) -> int:
        """Start each agent's chosen candidate (action ``C`` waits); returns how many jobs started."""
        if len(actions) != self.num_agents:
            raise ValueError(f"need one action per agent ({self.num_agents}), got {len(actions)}")
        obs = self.observe()
        wait = self.layout.C
        started = 0
        for a, action, ob in zip(self.agents, actions, obs, strict=True):
            action = int(action)
            if not 0 <= action <= wait or ob["action_mask"][action] == 0:
                allowed = np.flatnonzero(ob["action_mask"]).tolist()
                raise ValueError(
                    f"agent {self.agent_ids[a.index]} chose action {action}, which its action_mask forbids "
                    f"(allowed: {allowed}; {wait} is wait); mask the policy's logits with the observation's mask"
                )
            if action == wait:
                continue
            job, gpus = a.cands[action]
            n = len(gpus)
            a.pool.take(gpus, job)
            a.occ[gpus] = job
            a.cands = None
            self.dispatch.remove(a.index, job, n)
            a.free -= n
            global_gpus = (gpus + a.static.part.gpus.start).astype(np.int32)
            self._start(job, global_gpus, float(a.factors[action]))
            if self.jobs.span[job] >= Level.POD:
                a.uplink[np.unique(a.static.sub.server_rack[a.static.sub.gpu_server[gpus]])] += 1
            a.obs = None
            started += 1
        return started

    def masks(self) -> np.ndarray:
        """(K, C + 1) action masks."""
        return np.stack([o["action_mask"] for o in self.observe()])

    # ------------------------------------------------------------ internals
    def _start(self, job: int, gpus: np.ndarray, factor: float) -> None:
        jobs = self.jobs
        jobs.started_at[job] = self.view.now
        jobs.span[job] = int(self.topo.span_level(gpus))
        jobs.code[job] = self._keyed.code(self.descriptors.get(job, int(gpus[0])))
        jobs.in_round[job] = True
        jobs.pred_factor[job] = factor
        self._round_jobs.append(job)
        self._running.add(job)
        self._decisions.append(Start(job, gpus))

    def _pool(self, a: _Agent) -> tuple[LocalView, FreePool]:
        if a.pool is None:
            part, sub = a.static.part, a.static.sub
            a.local, a.pool = partition_pool(self.view, part, sub)
            a.occ = self._occ[part.gpus.start : part.gpus.stop]  # a view: the agent's takes update both
            a.occ[:] = a.pool.gpu_job
            a.uplink = np.array([self.view.uplink_jobs(r) for r in part.racks], dtype=np.float64)
            g0, g1 = part.gpus.start, part.gpus.stop
            for job, gpus in self._spill_starts:
                inside = gpus[(gpus >= g0) & (gpus < g1)] - g0
                if len(inside):
                    a.pool.take(inside, job)
                    a.occ[inside] = job
                    if self.jobs.span[job] >= Level.POD:
                        a.uplink[np.unique(sub.server_rack[sub.gpu_server[inside]])] += 1
        return a.local, a.pool

    def _refresh_candidates(self, a: _Agent) -> bool:
        """Recompute the agent's candidates if its pool or queue head changed; True if it did."""
        local, pool = self._pool(a)
        shown = self.shown(a.index)
        key = tuple(shown)
        if a.cands is not None and a.cand_key == key:
            return False
        a.cands = propose(local, pool, shown, self.places, self.layout.Q)
        a.cand_key = key
        a.factors = np.ones(len(a.cands))
        return True

    def _predict(self, agents: list[_Agent]) -> None:
        """Predicted interference factors of all their feasible candidates, in one model call."""
        if not self._predicts:
            return
        keys, owners = [], []
        for a in agents:
            occ = a.occ.tolist()
            for i, cand in enumerate(a.cands):
                if cand is not None:
                    job, gpus = cand
                    keys.append(interference_key(job, gpus, occ, a.static, self.jobs, self.descriptors, self._keyed))
                    owners.append((a, i))
        if keys:
            for (a, i), f in zip(owners, self._keyed(keys).tolist(), strict=True):
                a.factors[i] = f

    def _candidate_obs(self, a: _Agent) -> dict[str, np.ndarray]:
        lay = self.layout
        cand, cand_gpus = candidate_features(self.view, a.cands, a.factors, lay.Q, a.static, a.free, lay.Fc)
        mask = np.zeros(lay.num_actions, dtype=np.float32)
        mask[: lay.C] = [c is not None for c in a.cands]
        # An idle partition with a feasible candidate must start something, or the run could stall.
        mask[lay.C] = 0.0 if (a.free == lay.G and mask[: lay.C].any()) else 1.0
        return {"cand_feats": cand, "cand_gpus": cand_gpus, "action_mask": mask}

    def _fill(self, agents: list[_Agent]) -> None:
        """Time-dependent features of ``agents``, computed together."""
        lay, view = self.layout, self.view
        parts = np.array([a.index for a in agents])
        queued = np.full((len(agents), lay.Q), -1, dtype=np.int64)
        for row, a in enumerate(agents):
            head = self.shown(a.index)
            queued[row, : len(head)] = head
        gpu, server, rack = occupancy_features(
            self._tables,
            parts,
            np.stack([a.occ for a in agents]),
            np.stack([a.pool.server_free[: lay.S] for a in agents]),
            np.stack([a.uplink for a in agents]),
            self.jobs,
            view.job_factor,
            view.now,
        )
        queue = queue_features(
            view,
            queued,
            self._gpu_types[parts],
            self._first_gpus[parts],
            lay.G,
            self.jobs,
            self.descriptors,
            self.sync,
        )
        for row, a in enumerate(agents):
            a.obs = {
                "gpu_feats": gpu[row],
                "server_feats": server[row],
                "rack_feats": rack[row],
                "queue_feats": queue[row],
                **a.cand_obs,
            }
