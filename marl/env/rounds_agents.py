"""Priority agents whose decision layer is Gavel's rounds: the agents lean a cluster-wide ``gavel-las``.

On mixed GPUs the best heuristic, ``gavel-las``, solves one LP over the whole cluster every round (the time
share of each job on each GPU type) and walks the (job, type) pairs by priority. A partition's agent cannot
express that LP on its own GPUs: it would lose the jobs that are worth more on another partition's types.
So here the agents keep what they see and score (each partition's jobs and topology, through the shared
network with the topology encoder and the interference predictor's inputs), and the rounds stage stays
cluster-wide: each (job, type) pair is leaned by the residual of the job's agent, its order score less
QSSF's key (what the untrained order head outputs) plus its type score less the job's log speed on the type
(the untrained type head), which weighs the pair in the LP and moves it in the round's order
(:class:`LeanedScore`). Untrained, the residuals are zero and the agents *are*
``gavel-las``, decision for decision; training moves the pairs they own, cooperatively, through one LP.

Residuals smaller than :data:`DEAD_ZONE` are zero: the network runs in float32, and QSSF's key it adds to
carries float32's rounding, which alone would reorder pairs that ``gavel-las`` ties.
"""

from __future__ import annotations

import numpy as np

from cluster_sim.policies.gavel import LAS_WEIGHT, GavelPriorityScore
from cluster_sim.policies.rigid_rounds import ScoredRounds
from cluster_sim.protocol import Decision, Preempt, SchedulerView
from marl.env.priority_agents import PriorityAgents, qssf_scores
from marl.env.priority_features import PriorityObservation
from marl.env.topology_obs import cand_column

DEAD_ZONE = 1e-4  # log units: float32 noise on QSSF's key, far below any learned lean (0.01 ~ 1%)
INTERVAL = 360.0  # Gavel's round


class LeanedScore:
    """``gavel-las``'s pair score leaned by a residual per job and per (job, type) pair (zero unless leaned).

    A lean ``r`` weighs the pair in Gavel's LP (its throughput times ``exp(r)``: the LP decides which jobs get
    time at all, and a pair it gives no share ranks below every pair it does) and is added to the pair's
    round priority (which of the jobs it gives shares run first)."""

    def __init__(self, las: float = LAS_WEIGHT, interval: float = INTERVAL) -> None:
        self.prior = GavelPriorityScore(las, interval)
        self.job = np.zeros(0)
        self.pair = np.zeros((0, 0))

    def reset(self, view: SchedulerView) -> None:
        self.prior.reset(view)
        self.job = np.zeros(len(view.jobs))
        self.pair = np.zeros((len(view.jobs), len(view.topo.gpu_types)))

    def ran(self, jobs: np.ndarray, types: np.ndarray) -> None:
        self.prior.ran(jobs, types)

    def __call__(self, view: SchedulerView, jobs: np.ndarray, rates: np.ndarray, current: np.ndarray) -> np.ndarray:
        lean = self.job[jobs][:, None] + self.pair[jobs]
        if not lean.any():
            return self.prior(view, jobs, rates, current)
        return self.prior(view, jobs, rates * np.exp(lean), current) + lean


class RoundsAgents(PriorityAgents):
    """:class:`PriorityAgents` that observe and score as ever, with ``gavel-las``'s rounds as the decision.

    Every ``interval`` (a round) the agents observe their partitions; :meth:`apply` turns their scores into
    residuals of the jobs in their slots and runs one round of :class:`ScoredRounds` on ``gavel-las`` plus
    them. Jobs the round stops go back to the queue of the partition they ran on."""

    ordering = "marl-rounds"
    # the rounds stage's traits: jobs keep their counts but move between types (Resize), on one type each,
    # and it decides every round whether or not anyone waits
    elastic = ScoredRounds.elastic
    one_gpu_type = ScoredRounds.one_gpu_type
    wants_all_points = ScoredRounds.wants_all_points

    def __init__(self, scorer=None, *, interval: float = INTERVAL, las: float = LAS_WEIGHT, **kw) -> None:
        if kw.get("migrate") is not None:
            raise ValueError("migrate: on the gavel-las rounds every round may move a job; leave migrate unset")
        super().__init__(scorer, **kw)
        self.lean = LeanedScore(las, interval)
        self.stage = ScoredRounds(self.lean, interval=interval, stay=0.0, name=self.name)
        self.interval = float(interval)
        self._due = False

    def reset(self, view: SchedulerView) -> None:
        super().reset(view)
        self.stage.reset(view)
        self._due = False

    @property
    def round_seconds(self) -> list[float]:
        return self.stage.round_seconds

    def observe(self, view: SchedulerView) -> PriorityObservation | None:
        """The agents' observation at a round (None between rounds, or when no job waits: the round then
        runs on ``gavel-las`` alone)."""
        self._due = self.stage.on_tick(view)
        if not self._due:
            self.last_obs = None
            return None
        queue = np.asarray(view.queue, dtype=np.int64)
        back = queue[(self.agent_of[queue] == -1) & (self.placed_on[queue] >= 0)]
        self.agent_of[back] = self.gpu_part[self.placed_on[back]]  # stopped by a round: its partition's queue
        return super().observe(view)

    def apply(self, view: SchedulerView, scores: np.ndarray) -> list[Decision]:
        """One round of ``gavel-las`` leaned by the agents' scores of the last observation (none: unleaned)."""
        if not self._due:
            return []
        self._due = False
        self.lean.job[:] = 0.0
        self.lean.pair[:] = 0.0
        obs = self.last_obs
        if obs is not None and np.size(scores):
            self._lean(obs, np.asarray(scores, dtype=np.float64).reshape(self.num_agents, -1))
        decisions = self.stage.schedule(view)
        for d in decisions:
            gpus = getattr(d, "gpus", None)
            if isinstance(d, Preempt):
                self.agent_of[d.job] = self.gpu_part[self.placed_on[d.job]] if self.placed_on[d.job] >= 0 else 0
            elif gpus is not None:
                self.placed_on[d.job] = int(gpus[0])
                self.agent_of[d.job] = -1
        self.rounds += 1
        return decisions

    def _lean(self, obs: PriorityObservation, scores: np.ndarray) -> None:
        """Each slot's residuals over the untrained heads, written to its job's rows of the lean."""
        lay = self.layout
        part, slot = np.nonzero(obs.job_ids >= 0)
        ids = obs.job_ids[part, slot]
        job = scores[:, : lay.N] - qssf_scores(obs.arrays)
        r = job[part, slot]
        self.lean.job[ids] = np.where(np.abs(r) < DEAD_ZONE, 0.0, r)
        if scores.shape[1] > lay.N:  # placing agents: type scores over the job's log speed on each type
            cands = obs.arrays["cands"]
            prior = cands[..., cand_column("log_speed")] * cands[..., 0]
            pair = scores[:, lay.N :].reshape(self.num_agents, lay.N, lay.T) - prior
            p = pair[part, slot]  # (jobs, T): the type columns are the cluster's types
            self.lean.pair[ids] = np.where(np.abs(p) < DEAD_ZONE, 0.0, p) * (cands[part, slot, :, 0] > 0)


DECISIONS: dict[str, type[PriorityAgents]] = {"partitions": PriorityAgents, "gavel-las": RoundsAgents}


def agents_class(decision: str) -> type[PriorityAgents]:
    """The agents of a decision layer: ``partitions`` (each agent admits, preempts and places on its own
    GPUs), ``gavel-las`` (the agents lean one cluster-wide ``gavel-las`` round) or ``MODULE:Class``, a
    :class:`PriorityAgents` subclass of one's own (an agent spec's ``decision``, trained by the same PPO)."""
    if decision in DECISIONS:
        return DECISIONS[decision]
    if ":" not in decision:
        raise ValueError(
            f"decision {decision!r}: choose one of {', '.join(DECISIONS)}, or MODULE:Class (a subclass of "
            "marl.env.priority_agents.PriorityAgents)"
        )
    from marl.agents.spec import resolve

    try:
        cls = resolve(decision)
    except (ImportError, AttributeError) as err:
        raise ValueError(f"decision {decision!r} cannot be imported ({type(err).__name__}: {err})") from None
    if not (isinstance(cls, type) and issubclass(cls, PriorityAgents)):
        raise ValueError(f"decision {decision!r} is not a subclass of marl.env.priority_agents.PriorityAgents")
    return cls


__all__ = ["DEAD_ZONE", "DECISIONS", "LeanedScore", "RoundsAgents", "agents_class"]
