"""Rigid jobs re-assigned to GPU types every round: the frame of ``gavel`` and of the scored schedulers.

Every ``interval`` each running or waiting job is given a (GPU type, its own GPU count) or nothing, by
walking (job, type) pairs in decreasing priority: a job runs at most once, on a type with its count left.
A job that keeps its type keeps its GPUs; a job moved or resumed pays the simulator's restart cost. What
differs between schedulers is only the priority of each pair:

- ``gavel``: its LP's time share divided by the share received (:mod:`cluster_sim.policies.gavel`);
- :class:`ScoredRounds`: any score of (job, type), e.g. ``rounds-las`` (least attained service first, each
  job on its fastest type with room), ``rounds-oracle`` (privileged: least time to finish on that type,
  from the true remaining work) or a learned network's score (``marl``).

Speeds per type are the jobs' own (measured step times, or the performance model's speed on the type's
GPUs), the same a scheduler that profiles each job on each type has.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from cluster_sim.policies.elastic import ElasticPolicy
from cluster_sim.pollux_apps import consolidated
from cluster_sim.protocol import SchedulerView
from cluster_sim.simulator import RUNNING, check_rigid_jobs_fit


def type_capacity(topo) -> np.ndarray:
    """GPUs of each GPU type of the cluster (indexed like ``topo.gpu_types``)."""
    stype = np.asarray(topo.server_gpu_type)
    return np.array([int(topo.server_num_gpus[stype == t].sum()) for t in range(len(topo.gpu_types))], dtype=np.int64)


def attained_hours(view: SchedulerView, jobs: np.ndarray) -> np.ndarray:
    """GPU-hours each job has received so far (what every LAS-like score reads)."""
    return np.array([view.attained_service(int(j)) for j in jobs.tolist()], dtype=np.float64) / 3600.0


def ran_types(types: np.ndarray, placement: list) -> np.ndarray:
    """The GPU type each job runs on after a round: its assigned type where it was placed, else -1."""
    out = [t if g is not None else -1 for t, g in zip(types.tolist(), placement, strict=True)]
    return np.array(out, dtype=np.int64)


class RigidRounds(ElasticPolicy):
    """Jobs keep the GPU count and batch they asked for; each round chooses which run and on which type."""

    honours_cap = False  # counts are the jobs' own; fragmentation cannot be searched around
    resizes = False

    def batch_for(self, view: SchedulerView, job: int, gpus: np.ndarray, plan) -> int:
        return int(view.jobs.batch_size[job])  # rigid: the batch it asked for

    def reset(self, view: SchedulerView) -> None:
        super().reset(view)
        # elastic as a frame, but no job ever shrinks here: one larger than every type would wait for ever
        keeps = f"{self.name} keeps each job's GPU count"
        check_rigid_jobs_fit(view.topo, view.jobs, np.ones(len(view.jobs), dtype=bool), lambda _: keeps)
        self._speeds: dict[tuple[int, int, int, int], float] = {}  # a duration job's speed per (type, count, batch)

    def throughputs(self, view: SchedulerView, jobs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(steps per second on each GPU type (0: it does not fit there), GPUs each job asks for, GPUs per type)."""
        topo = view.topo
        stype = np.asarray(topo.server_gpu_type)
        capacity = type_capacity(topo)
        gpn = [int(topo.server_num_gpus[stype == t].max()) if (stype == t).any() else 0 for t in range(len(capacity))]
        first = [np.flatnonzero(stype[topo.gpu_server] == t) for t in range(len(capacity))]
        asked = np.asarray(view.jobs.num_gpus[jobs], dtype=np.int64)
        slowdown = getattr(view, "calibration_slowdown", None)
        out = np.zeros((len(jobs), len(capacity)))
        for i, j in enumerate(jobs.tolist()):
            n, batch = int(asked[i]), int(view.jobs.batch_size[j])
            for t, name in enumerate(topo.gpu_types):
                if n > capacity[t]:
                    continue
                app = view.app_on_type(j, name)
                if app is None:  # a job with a duration: its model's speed on the type's first n GPUs (kept)
                    key = (j, t, n, view.batch_size(j))
                    speed = self._speeds.get(key)
                    if speed is None:
                        speed = self._speeds[key] = view.estimated_speed(j, first[t][:n])
                    out[i, t] = speed
                    continue
                key = ("gavel", name, n, batch)
                hit = app._cache.get(key)
                if hit is None:
                    hit = app._cache[key] = 1.0 / app.iteration_time(consolidated(n, gpn[t]), batch)
                out[i, t] = hit / (slowdown(j) if slowdown is not None else 1.0)
        return out, asked, capacity

    def current_types(self, view: SchedulerView, jobs: np.ndarray) -> np.ndarray:
        """GPU type index each job runs on now (-1: waiting)."""
        topo = view.topo
        out = np.full(len(jobs), -1, dtype=np.int64)
        for i, j in enumerate(jobs.tolist()):
            if view.job_state(j) == RUNNING:
                out[i] = int(topo.server_gpu_type[int(topo.gpu_server[int(view.placement(j)[0])])])
        return out

    @staticmethod
    def assign(order: np.ndarray, pair_job: np.ndarray, pair_type: np.ndarray, asked: np.ndarray, capacity: np.ndarray):
        """Walk the (job, type) pairs in ``order``: each job takes the first of its pairs whose type still has
        its count. Returns (type per job, -1: none; GPU count per job)."""
        left = capacity.astype(np.int64).copy()
        types = np.full(len(asked), -1, dtype=np.int64)
        counts = np.zeros(len(asked), dtype=np.int64)
        for k in order.tolist():
            i, t = int(pair_job[k]), int(pair_type[k])
            if types[i] >= 0 or asked[i] > left[t]:
                continue
            left[t] -= asked[i]
            types[i], counts[i] = t, asked[i]
        return types, counts


Scorer = Callable[[SchedulerView, np.ndarray, np.ndarray, np.ndarray], np.ndarray]


def las_score(view: SchedulerView, jobs: np.ndarray, rates: np.ndarray, current: np.ndarray) -> np.ndarray:
    """Least attained service (GPU-seconds) first, each job on its fastest type with room (Tiresias'
    order, type-aware): the type only breaks ties within a job."""
    att = np.array([view.attained_service(int(j)) for j in jobs.tolist()])
    best = np.maximum(rates.max(axis=1, keepdims=True), 1e-300)
    return -np.log1p(att)[:, None] + 1e-3 * rates / best


def blind_score(view: SchedulerView, jobs: np.ndarray, rates: np.ndarray, current: np.ndarray) -> np.ndarray:
    """Least attained service (GPU-hours) first, type-blind: a job takes the first type with room, in the
    cluster's order of types, whatever its speed there (what a scheduler without speeds per type does)."""
    return np.repeat(-np.log1p(attained_hours(view, jobs))[:, None], rates.shape[1], axis=1)


def remaining_steps(view: SchedulerView, jobs: np.ndarray, rates: np.ndarray, current: np.ndarray) -> np.ndarray:
    """Privileged: each job's true remaining work in the units of ``rates`` (seconds at speed 1 for a job
    with a duration; steps for an application, whose remaining time is at its speed now)."""
    work = np.asarray(view.remaining_times(jobs), dtype=np.float64)
    apps = np.array([view.application(int(j)) is not None for j in jobs.tolist()], dtype=bool)
    if apps.any():
        now_rate = np.where(current >= 0, rates[np.arange(len(jobs)), np.maximum(current, 0)], rates.max(axis=1))
        work = np.where(apps, work * now_rate, work)
    return work


def oracle_score(view: SchedulerView, jobs: np.ndarray, rates: np.ndarray, current: np.ndarray) -> np.ndarray:
    """Privileged: least time to finish on the type first, from the true remaining work (a reference for
    what knowing durations buys, and a teacher; no deployable scheduler has it)."""
    work = remaining_steps(view, jobs, rates, current)
    return -np.log(np.maximum(work, 1e-9)[:, None] / np.maximum(rates, 1e-300))


def oracle_area_score(view: SchedulerView, jobs: np.ndarray, rates: np.ndarray, current: np.ndarray) -> np.ndarray:
    """Privileged: least remaining GPU-time (true remaining work x GPUs asked, at the job's best speed) first,
    each job leaning to the type where it is comparatively fastest. Ranking by the GPUs a job will hold, not
    its time alone, is what shortest-remaining-first needs when jobs ask for different GPU counts: on the
    ``hetero`` regime it finishes jobs 3.5% sooner than ``oracle`` on average."""
    work = remaining_steps(view, jobs, rates, current)
    gpus = np.asarray(view.jobs.num_gpus[jobs], dtype=np.float64)
    best = np.maximum(rates.max(axis=1, keepdims=True), 1e-300)
    area = np.log(np.maximum(work * gpus, 1e-9))[:, None] - np.log(best)
    return -area + 0.5 * np.log(np.maximum(rates, 1e-300) / best)


SCORERS: dict[str, Scorer] = {
    "blind": blind_score,
    "las": las_score,
    "oracle": oracle_score,
    "oracle-area": oracle_area_score,
}


class ScoredRounds(RigidRounds):
    """Rigid jobs placed every ``interval`` by a score per (job, GPU type), higher first: three stages, the
    ordering (:meth:`pair_order`, from the scorer), the admission (:meth:`assign`: each job takes its first pair
    whose type still has its GPU count) and the placement (the elastic frame's best fit on the type).

    ``stay`` (>= 0) is added to a running job's score on the type it runs on, so a job is moved or
    preempted only for a pair that beats it by that much (the scores are log-scale: 0.1 ~ 10%).
    A scorer that keeps state across rounds may have ``reset(view)`` (called at the start of each run) and
    ``ran(jobs, types)`` (after each round: the type each job runs on, -1 for none).
    """

    ordering = "score"

    def __init__(
        self,
        scorer: Scorer | str = "las",
        *,
        interval: float = 360.0,
        stay: float = 0.1,
        max_nodes: int = 16,
        seed: int = 0,
        name: str | None = None,
    ) -> None:
        if isinstance(scorer, str):
            if scorer not in SCORERS:
                raise ValueError(f"unknown score {scorer!r}; choose one of {sorted(SCORERS)}")
            name = name or f"rounds-{scorer}"
            scorer = SCORERS[scorer]
        if stay < 0:
            raise ValueError(f"stay must be >= 0, got {stay}")
        super().__init__(interval=interval, max_nodes=max_nodes, pinned={}, seed=seed, name=name or "rounds")
        self.scorer, self.stay = scorer, float(stay)

    def reset(self, view: SchedulerView) -> None:
        super().reset(view)
        hook = getattr(self.scorer, "reset", None)
        if hook is not None:
            hook(view)

    def pair_order(self, view: SchedulerView, jobs: np.ndarray, rates: np.ndarray, current: np.ndarray):
        """The ordering stage: (order, job index, type index) of the (job, type) pairs the round walks, best
        first. The scorer gives one score per pair, or a stack of keys ``(k, jobs, types)`` (the first decides,
        the next break its ties); a pair whose first key is -inf, or whose type cannot hold the job, is left
        out; the job's index breaks the last ties. ``stay`` is added to the first key of the pair a job runs on."""
        score = np.array(self.scorer(view, jobs, rates, current), dtype=np.float64)  # a copy: stay is added below
        keys = score if score.ndim == 3 else score[None]
        if keys.ndim != 3 or keys.shape[1:] != rates.shape:
            raise ValueError(
                f"{self.name}: its score must be one number per (job, GPU type), shape (jobs, types) = {rates.shape}, "
                f"or a stack of keys (k, jobs, types); got shape {score.shape}"
            )
        on = current >= 0
        keys[0][np.flatnonzero(on), current[on]] += self.stay
        i_idx, t_idx = np.nonzero((rates > 0) & (keys[0] > -np.inf))
        order = np.lexsort((i_idx, *(-k[i_idx, t_idx] for k in keys[::-1])))
        return order, i_idx, t_idx

    def _allocate_placed(self, view: SchedulerView, jobs: np.ndarray, cur: np.ndarray, least: np.ndarray):
        rates, asked, capacity = self.throughputs(view, jobs)
        current = self.current_types(view, jobs)
        order, i_idx, t_idx = self.pair_order(view, jobs, rates, current)
        types, counts = self.assign(order, i_idx, t_idx, asked, capacity)
        placement = self._place(view, jobs, cur, counts, np.where(counts > 0, counts, least), job_types=types)
        hook = getattr(self.scorer, "ran", None)
        if hook is not None:
            hook(jobs, ran_types(types, placement))
        return placement, [None] * len(jobs)


__all__ = [
    "SCORERS",
    "RigidRounds",
    "ScoredRounds",
    "attained_hours",
    "blind_score",
    "las_score",
    "oracle_score",
    "ran_types",
    "remaining_steps",
    "type_capacity",
]
