"""What a priority agent sees: the jobs of its partition (a padded set) and a summary of every partition.

Nothing here reads a job's duration or remaining work: a job's length enters only through the history
of finished jobs of its tenant and GPU count (:class:`~cluster_sim.policies.run_history.TenantHistory`),
its wait and its attained service, as a deployed scheduler has them.

Observation of agent ``k`` (arrays of one agent; the scheduler stacks all agents on a leading axis):

- ``jobs`` ``(N, Fj)``: one row per job slot, columns :data:`JOB_FEATURES`; column 0 is ``valid``;
- ``parts`` ``(K, Fp)``: every partition's summary, columns :data:`PART_FEATURES`, rolled so that the
  agent's own partition is row 0 (the top level of the encoder reads them; the critic sees all);
- in training only, ``critic`` ``(Fc,)``: :data:`CRITIC_FEATURES`, what the reference schedule of the
  same window is doing now. Only the value function reads them (an asymmetric critic); the scores, and
  so the exported policy, never do.

Times enter as ``log1p(hours) / 5`` (:func:`marl.env.topology_obs.log_hours`), the expected remaining time also
as ``ln(seconds) / LOG_SCALE``, the scale of the scores (QSSF's rank key is ``-LOG_SCALE`` times it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from cluster_sim.protocol import SchedulerView
from marl.env.topology_obs import log_hours, topology_features

JOB_FEATURES: tuple[str, ...] = (
    "valid",  # structural: 1 for a job, 0 for padding
    "running",  # 1 if it holds GPUs of the partition now
    "log_gpus",  # log2(GPUs) / 7
    "gpus_frac",  # GPUs / the partition's GPUs
    "wait",  # time in the system not running (log hours)
    "executed",  # wall time run so far (log hours)
    "attained",  # GPU-time run so far (log hours)
    "log_expected_remaining",  # ln(E[D - x | D > x] seconds) / LOG_SCALE from the tenant's history
    "group_mean",  # mean run time of the finished jobs of its tenant and GPU count (log hours)
    "group_size",  # how many such jobs finished, log1p / 8
    "preempted",  # 1 if it ran before and waits now
    "day_sin",  # time of day
    "day_cos",
)
PART_FEATURES: tuple[str, ...] = (
    "free_frac",  # free GPUs / GPUs
    "queued_jobs",  # log1p(jobs queued at the agent) / 8
    "queued_demand",  # log1p(queued GPUs / GPUs)
    "running_frac",  # running jobs / GPUs
    "work_per_gpu",  # estimated outstanding GPU-time per GPU (log hours)
    "size",  # GPUs / the cluster's GPUs
)

CRITIC_FEATURES: tuple[str, ...] = (
    "in_system",  # jobs in the system now / 100
    "reference_in_system",  # jobs in the reference schedule's system at the same time / 100
    "deficit",  # (in_system - reference_in_system) / 10: the gap the return-to-go mostly depends on
)


@dataclass(frozen=True)
class JobSetLayout:
    """Shapes of one agent's observation: ``N`` job slots, ``K`` partitions; for agents that also place
    (``T`` > 0), the partition's grid of ``R`` racks x ``S`` servers x ``G`` GPUs and ``T`` GPU types
    (:mod:`marl.env.topology_obs`); ``interference``: the placing arrays carry an interference predictor's
    estimates (:mod:`marl.env.interference_obs`)."""

    N: int
    K: int
    R: int = 0
    S: int = 0
    G: int = 0
    T: int = 0
    interference: bool = False
    LOG_SCALE = 10.0  # ln(seconds) / 10: ln(1 s) = 0, ln(1 day) = 11.4

    @property
    def placing(self) -> bool:
        return self.T > 0

    @staticmethod
    def column(name: str) -> int:
        return JOB_FEATURES.index(name)

    def shapes(self) -> dict[str, tuple[int, ...]]:
        out = {"jobs": (self.N, len(JOB_FEATURES)), "parts": (self.K, len(PART_FEATURES))}
        if self.placing:
            cols = topology_features(self.interference)
            out |= {
                "gpus": (self.R, self.S, self.G, len(cols["gpu_features"])),
                "servers": (self.R, self.S, len(cols["server_features"])),
                "racks": (self.R, len(cols["rack_features"])),
                "server_type": (self.R, self.S, self.T),
                "cands": (self.N, self.T, len(cols["cand_features"])),
            }
        return out

    def space(self, critic: bool = False) -> gym.spaces.Dict:
        """The observation space; ``critic`` adds the training-only ``critic`` key."""
        shapes = self.shapes() | ({"critic": (len(CRITIC_FEATURES),)} if critic else {})
        return gym.spaces.Dict(
            {k: gym.spaces.Box(-np.inf, np.inf, shape=s, dtype=np.float32) for k, s in shapes.items()}
        )

    def action_space(self) -> gym.spaces.Box:
        """One score per job slot (higher runs first); padded slots' scores are ignored. Placing agents
        add one score per (slot, GPU type), flattened after them: a started job takes its best-scored
        type that holds it."""
        return gym.spaces.Box(-np.inf, np.inf, shape=(self.N * (1 + self.T),), dtype=np.float32)


@dataclass(frozen=True, eq=False)
class PriorityObservation:
    """All agents' observation arrays ``(K, ...)`` and which job sits in each slot."""

    arrays: dict[str, np.ndarray]
    job_ids: np.ndarray  # (K, N) int64, -1 for padding
    running: np.ndarray  # (K, N) bool
    foreign_gpus: np.ndarray  # (K,) GPUs of the partition held by jobs no agent scores (spill jobs)


def _slots(run: np.ndarray, wait: np.ndarray, rem: np.ndarray, since: np.ndarray, n: int) -> np.ndarray:
    """Job ids for ``n`` slots: all running, then waiting by smallest expected remaining time with a
    quarter of the free slots for the longest waiting."""
    room = n - len(run)
    if len(wait) <= room:
        return np.concatenate([run, wait])
    old = max(1, room // 4)
    oldest = np.argsort(since, kind="stable")[:old]
    rest = np.ones(len(wait), dtype=bool)
    rest[oldest] = False
    idx = np.flatnonzero(rest)
    short = idx[np.argsort(rem[idx], kind="stable")[: room - old]]
    return np.concatenate([run, wait[np.sort(short)], wait[np.sort(oldest)]])


@dataclass(frozen=True, eq=False)
class RoundJobs:
    """The jobs the agents score at one scheduling point: ``n_run`` running on their partitions, then the
    ones queued at them. ``part``: each job's partition (where it runs, or whose queue it waits in); ``rem``:
    the history estimate of its remaining time (seconds); ``executed``: its wall time run so far."""

    ids: np.ndarray
    part: np.ndarray
    n_run: int
    rem: np.ndarray
    executed: np.ndarray
    foreign: np.ndarray  # (K,) GPUs of each partition held by jobs no agent scores (spill jobs)

    @property
    def is_run(self) -> np.ndarray:
        return np.arange(len(self.ids)) < self.n_run


def slot_rows(part: np.ndarray, is_run: np.ndarray, rem: np.ndarray, since: np.ndarray, k_n: int, n: int) -> np.ndarray:
    """``(K, N)`` rows of the round's jobs in each agent's slots (-1: padding), as :func:`_slots` picks them: a
    partition whose jobs all fit keeps them in order (running, then queued); only a partition with more
    jobs than slots chooses among its waiting jobs."""
    rows = np.full((k_n, n), -1, dtype=np.int64)
    if not len(part):
        return rows
    order = np.argsort(part, kind="stable")  # by partition, each in its running-then-queue order
    count = np.bincount(part, minlength=k_n)
    sorted_part = part[order]
    at = np.arange(len(order)) - (np.cumsum(count) - count)[sorted_part]  # place within its partition
    fits = at < n
    rows[sorted_part[fits], at[fits]] = order[fits]
    for k in np.flatnonzero(count > n).tolist():
        first = int(np.searchsorted(sorted_part, k))
        r = order[first : first + count[k]]
        run_r, wait_r = r[is_run[r]], r[~is_run[r]]
        pick = _slots(run_r, wait_r, rem[wait_r], since[wait_r], n)
        rows[k] = -1
        rows[k, : len(pick)] = pick
    return rows


def observe_partitions(
    agents: Any, view: SchedulerView, jobs: RoundJobs, order_only: bool = False
) -> PriorityObservation:
    """Every agent's observation at this scheduling point of the round's ``jobs``. ``agents`` is the
    :class:`~marl.env.priority_agents.PriorityAgents` asking (its partitions and history).

    Features are computed once per job and scattered into the padded slots, so a round costs what its jobs
    do, not ``K x N`` slots; the history's group statistics of a job (``group_mean``, ``group_size``) change only
    when jobs finish and are kept until then (:meth:`PriorityAgents.group_stats`). ``order_only``: only the
    columns QSSF's order reads (``valid``, ``running``, ``log_expected_remaining``; no ``parts``), for a
    reference that never shows them to a network."""
    lay = agents.layout
    K, N = lay.K, lay.N
    ids, part_of, rem, n_run = jobs.ids, jobs.part, jobs.rem, jobs.n_run
    is_run = jobs.is_run
    arrival = view.jobs.arrival[ids]
    rows = slot_rows(part_of, is_run, rem, arrival, K, N)
    valid = rows >= 0
    at = rows[valid]
    job_ids = np.full((K, N), -1, dtype=np.int64)
    job_ids[valid] = ids[at]
    running = np.zeros((K, N), dtype=bool)
    running[valid] = at < n_run
    slots = np.zeros((K, N, len(JOB_FEATURES)), dtype=np.float32)
    if order_only:
        slots[..., 0] = valid
        slots[..., 1] = running
        slots[valid, 7] = (np.log(np.maximum(rem, 1.0)) / lay.LOG_SCALE).astype(np.float32)[at]
        return PriorityObservation({"jobs": slots}, job_ids, running, jobs.foreign)

    now, executed = view.now, jobs.executed
    need = view.jobs.num_gpus[ids]
    g = need.astype(np.float64)
    feats = np.empty((len(JOB_FEATURES), len(ids)))  # a row per feature, then one row per job
    feats[0] = 1.0
    feats[1] = is_run
    feats[2] = np.log2(g) / 7.0
    feats[3] = g / agents.part_gpus[part_of]
    feats[4] = now - arrival - executed
    feats[5] = executed
    feats[6] = view.attained_services(ids)
    feats[4:7] = log_hours(feats[4:7])
    feats[7] = np.log(np.maximum(rem, 1.0)) / lay.LOG_SCALE
    feats[8], feats[9] = agents.group_stats(ids)
    feats[10] = (executed > 0) & ~is_run
    day = 2 * np.pi * (now % 86400.0) / 86400.0
    feats[11] = np.sin(day)
    feats[12] = np.cos(day)
    slots[valid] = feats.T.astype(np.float32)[at]

    gk = agents.part_gpus.astype(np.float64)
    q_part = part_of[n_run:]
    part = np.empty((6, K))
    part[0] = np.add.reduceat(np.asarray(view.server_free, dtype=np.int64), agents.part_first_server) / gk
    part[1] = np.log1p(np.bincount(q_part, minlength=K)) / 8.0
    part[2] = np.log1p(np.bincount(q_part, weights=need[n_run:], minlength=K) / gk)
    part[3] = np.bincount(part_of[:n_run], minlength=K) / gk
    part[4] = log_hours(np.bincount(part_of, weights=rem * need, minlength=K) / gk)
    part[5] = gk / gk.sum()
    arrays = {"jobs": slots, "parts": part.T[agents.roll].astype(np.float32)}
    return PriorityObservation(arrays, job_ids, running, jobs.foreign)
