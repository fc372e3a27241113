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


def observe_partitions(agents: Any, view: SchedulerView, queue: np.ndarray) -> PriorityObservation:
    """Every agent's observation at this scheduling point; ``queue`` holds the waiting jobs agents own.
    ``agents`` is the :class:`~marl.env.priority_agents.PriorityAgents` asking (its partitions, dispatch and
    history)."""
    lay = agents.layout
    K, N = lay.K, lay.N
    jobs = view.jobs
    need = jobs.num_gpus.astype(np.int64)
    running = np.asarray(view.running, dtype=np.int64)
    spill_run = running[agents.is_spill[running]]
    running = running[~agents.is_spill[running]]
    first_gpu = np.array([int(view.placement(j)[0]) for j in running.tolist()], dtype=np.int64)
    run_part = agents.gpu_part[first_gpu] if len(running) else np.zeros(0, dtype=np.int64)
    owner = agents.agent_of[queue]
    ids = np.concatenate([running, queue])
    part_of = np.concatenate([run_part, owner]).astype(np.int64)
    rem = agents.history.expected_remaining(view, ids)
    executed = view.executed_times(ids)
    attained = view.attained_services(ids)
    arrival = jobs.arrival[ids]
    is_run = np.zeros(len(ids), dtype=bool)
    is_run[: len(running)] = True

    foreign = np.zeros(K, dtype=np.int64)
    for j in spill_run.tolist():
        foreign += np.bincount(agents.gpu_part[view.placement(j)], minlength=K)

    job_ids = np.full((K, N), -1, dtype=np.int64)
    rows = np.full((K, N), -1, dtype=np.int64)  # index into ids
    for k in range(K):
        r = np.flatnonzero(part_of == k)
        run_r, wait_r = r[is_run[r]], r[~is_run[r]]
        pick = _slots(run_r, wait_r, rem[wait_r], arrival[wait_r], N)
        rows[k, : len(pick)] = pick
        job_ids[k, : len(pick)] = ids[pick]

    valid = rows >= 0
    r = np.where(valid, rows, 0)
    j = ids[r] if len(ids) else np.zeros_like(r)
    g = need[j].astype(np.float64)
    now = view.now
    feats = np.zeros((K, N, len(JOB_FEATURES)), dtype=np.float64)
    feats[..., 0] = 1.0
    feats[..., 1] = is_run[r]
    feats[..., 2] = np.log2(g) / 7.0
    feats[..., 3] = g / agents.part_gpus[:, None]
    feats[..., 4] = log_hours(now - arrival[r] - executed[r])
    feats[..., 5] = log_hours(executed[r])
    feats[..., 6] = log_hours(attained[r])
    feats[..., 7] = np.log(np.maximum(rem[r], 1.0)) / lay.LOG_SCALE
    feats[..., 8] = log_hours(agents.history.residual(j.reshape(-1), np.zeros(j.size)).reshape(j.shape))
    feats[..., 9] = np.log1p(agents.history.group_size(j.reshape(-1)).reshape(j.shape)) / 8.0
    feats[..., 10] = (executed[r] > 0) & ~is_run[r]
    day = 2 * np.pi * (now % 86400.0) / 86400.0
    feats[..., 11] = np.sin(day)
    feats[..., 12] = np.cos(day)
    feats[~valid] = 0.0

    work = np.zeros(K)
    np.add.at(work, part_of, rem * need[ids])
    q_jobs = np.bincount(owner, minlength=K)
    q_demand = np.bincount(owner, weights=need[queue], minlength=K)
    n_run = np.bincount(run_part, minlength=K)
    gk = agents.part_gpus.astype(np.float64)
    free = np.add.reduceat(np.asarray(view.server_free, dtype=np.int64), [p.servers.start for p in agents.parts])
    part = np.stack(
        [
            free / gk,
            np.log1p(q_jobs) / 8.0,
            np.log1p(q_demand / gk),
            n_run / gk,
            log_hours(work / gk),
            gk / gk.sum(),
        ],
        axis=-1,
    )
    parts = np.stack([np.roll(part, -k, axis=0) for k in range(K)])
    arrays = {"jobs": feats.astype(np.float32), "parts": parts.astype(np.float32)}
    return PriorityObservation(arrays, job_ids, is_run[r] & valid, foreign)
