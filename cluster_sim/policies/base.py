"""What every heuristic scheduler shares: an ordering of the waiting jobs and a greedy placement pass.

A heuristic is "ordering + placement": the subclass decides which waiting jobs come first (and, if it
preempts, which running jobs give way); the placement strategy decides which GPUs each job gets. Starts
are decided against a :class:`~cluster_sim.placement.FreePool`, so several jobs can start in one round
without being given the same GPU.

The view answers per-job questions (remaining time, attained service) one call at a time. With a
thousand jobs running, asking every job at every scheduling point would dominate a large simulation,
so :class:`StayCache` asks once per stay in the queue (or on the GPUs) and the schedulers derive the
rest: a waiting job's remaining time and attained service do not change, a running job's attained
service grows by exactly its GPU count per second, and its remaining time can only shrink.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from cluster_sim.placement import FreePool, Placement, get_placement
from cluster_sim.protocol import Decision, Preempt, SchedulerView, Start
from cluster_sim.typed_placement import GPU_TYPE_ORDERS, one_type_placement

_FIRST_CHUNK, _CHUNK = 8, 64  # jobs converted to Python ints at a time by start_in_order
_FEW_NEEDS = 96  # jobs up to which admitted_by_budget goes through them in Python


class StayCache:
    """A per-job number fetched from the view once each time a job enters a set (queue or running).

    A job leaves a set by completing (it never comes back) or by the scheduler's own decision, which
    must call :meth:`forget` so that the job is fetched afresh when it comes back; :meth:`update` also
    notices any job missing from the set since its previous call.
    """

    def __init__(self) -> None:
        self.value = np.zeros(0)
        self._member = np.zeros(0, dtype=bool)
        self._last = np.zeros(0, dtype=np.int64)

    def reset(self, num_jobs: int) -> None:
        self.value = np.zeros(num_jobs)
        self._member = np.zeros(num_jobs, dtype=bool)
        self._last = np.zeros(0, dtype=np.int64)

    def update(self, members: np.ndarray, fetch: Callable[[int], float]) -> np.ndarray:
        """Values of ``members`` (the whole set now), fetching those that just entered it."""
        for j in members[~self._member[members]].tolist():
            self.value[j] = fetch(j)
        self._member[self._last] = False
        self._member[members] = True
        self._last = members
        return self.value[members]

    def forget(self, jobs: np.ndarray | list[int]) -> None:
        """``jobs`` leave the set by this round's decisions: fetch them again when they come back."""
        self._member[np.asarray(jobs, dtype=np.int64)] = False


class PolicyScheduler:
    """Base of the heuristic schedulers.

    ``backfill``: when a job cannot start, try the jobs behind it (True) or stop there (False: strict
    order, no job overtakes a blocked one). ``seed`` seeds the generator used by random choices, so one
    seed gives one result bit for bit. ``interval``: decide only every so many seconds (0: at every
    event), see :meth:`on_tick`. ``gpu_type``: on a cluster of several GPU types each job gets GPUs of
    one type, tried in this order: ``any`` (type-blind, most free first), ``fastest`` (the job's
    fastest type first), ``slowest`` (see :mod:`cluster_sim.typed_placement`).
    """

    ordering = "base"
    preemptive = False
    default_backfill = True
    one_gpu_type = True  # its placements keep each job on one GPU type (cluster_sim.typed_placement)

    def __init__(
        self,
        placement: str = "consolidate",
        *,
        seed: int = 0,
        backfill: bool | None = None,
        name: str | None = None,
        interval: float = 0.0,
        gpu_type: str = "any",
    ) -> None:
        get_placement(placement, np.random.default_rng(0))  # fail now on an unknown name
        if gpu_type not in GPU_TYPE_ORDERS:
            raise ValueError(f"gpu_type must be one of {', '.join(GPU_TYPE_ORDERS)}, got {gpu_type!r}")
        self.gpu_type = gpu_type
        if interval < 0:
            raise ValueError(f"scheduling interval must be >= 0 seconds (0: at every event), got {interval}")
        self.interval = float(interval)
        self.placement_name = placement
        self.seed = int(seed)
        self.backfill = self.default_backfill if backfill is None else bool(backfill)
        self.name = name or f"{self.ordering}+{placement}" + ("" if gpu_type == "any" else f"@{gpu_type}")
        self.rng = np.random.Generator(np.random.PCG64(self.seed))
        self.place: Placement = get_placement(placement, self.rng)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, placement={self.placement_name!r}, seed={self.seed})"

    def reset(self, view: SchedulerView) -> None:
        self.rng = np.random.Generator(np.random.PCG64(self.seed))
        self.place = one_type_placement(get_placement(self.placement_name, self.rng), view.topo, self.gpu_type)

    def schedule(self, view: SchedulerView) -> list[Decision]:
        queue = np.asarray(view.queue, dtype=np.int64)
        if not len(queue) or not self.on_tick(view):
            return []
        # Nothing can start and nobody is preempted: skip building the pool. Non-preemptive schedulers
        # may skip their caches' update here, since a job that started never returns to their queue.
        if not self.preemptive and self.blocked(view, queue):
            return []
        return self.decide(view, queue, FreePool(view))

    def on_tick(self, view: SchedulerView) -> bool:
        """With a scheduling ``interval``, decide only at its multiples (as a periodic scheduler such as
        Pollux's does), asking for a wake-up at the next one; without, at every event."""
        if self.interval <= 0:
            return True
        tick = math.ceil(view.now / self.interval - 1e-9) * self.interval
        if tick > view.now + 1e-9:
            view.wake_at(tick)
            return False
        return True

    def blocked(self, view: SchedulerView, queue: np.ndarray) -> bool:
        """Whether no waiting job can start now (checked before a non-preemptive round): none fits."""
        return view.num_free < int(view.jobs.num_gpus[queue].min())

    def decide(self, view: SchedulerView, queue: np.ndarray, pool: FreePool) -> list[Decision]:
        """Default round: start waiting jobs in :meth:`order` while they fit."""
        return list(self.start_in_order(view, self.order(view, queue), pool, self.backfill))

    def order(self, view: SchedulerView, queue: np.ndarray) -> Sequence[int]:
        raise NotImplementedError

    def start_in_order(
        self, view: SchedulerView, order: Sequence[int] | np.ndarray, pool: FreePool, backfill: bool
    ) -> list[Start]:
        """Place jobs in ``order``; a job that does not fit is skipped (backfill) or ends the pass.

        Placement fails only when too few GPUs are free, so with backfilling the jobs larger than the
        free count are dropped up front and the pass ends once no remaining job fits.
        """
        order = np.asarray(order, dtype=np.int64)
        num_gpus = view.jobs.num_gpus
        smallest_after = None
        if backfill:
            need = num_gpus[order].astype(np.int64)
            keep = need <= pool.num_free
            order = order[keep]
            smallest_after = np.minimum.accumulate(need[keep][::-1])[::-1].tolist() if len(order) else []
        starts: list[Start] = []
        # In chunks, the first one short: a pass usually ends within the first few jobs of a queue of
        # thousands, so only what it reaches becomes Python ints.
        lo, size = 0, _FIRST_CHUNK
        while lo < len(order):
            chunk = order[lo : lo + size]
            first, lo, size = lo, lo + size, _CHUNK
            for i, (j, n) in enumerate(zip(chunk.tolist(), num_gpus[chunk].tolist(), strict=True), first):
                if backfill and pool.num_free < smallest_after[i]:
                    return starts
                gpus = self.place(view, j, n, pool) if n <= pool.num_free else None
                if gpus is None:
                    if not backfill:
                        return starts
                    continue
                pool.take(gpus, j)
                starts.append(Start(j, gpus))
        return starts


def admitted_by_budget(need: np.ndarray, budget: int) -> np.ndarray:
    """Which of the jobs (GPU counts ``need``, in rank order) a greedy pass admits within ``budget`` GPUs:
    the longest prefix that fits, then every later job that still fits (backfilling)."""
    if len(need) <= _FEW_NEEDS:  # a few jobs: one Python pass beats the dozen array calls below
        admitted_l = []
        for n in need.tolist():
            fits = n <= budget
            admitted_l.append(fits)
            budget -= n if fits else 0
        return np.array(admitted_l, dtype=bool)
    cs = np.cumsum(need)
    k = int(np.searchsorted(cs, budget, side="right"))  # this prefix fits as a whole
    admitted = np.zeros(len(need), dtype=bool)
    admitted[:k] = True
    if k < len(need):
        budget -= int(cs[k - 1]) if k else 0
        # only jobs that fit the budget left now can ever be admitted (it only shrinks); they are visited
        # in chunks, the first one short, until the budget is below every need still ahead
        cand = np.flatnonzero(need[k:] <= budget) + k
        cand_need = need[cand]
        smallest_after = np.minimum.accumulate(cand_need[::-1])[::-1]
        lo, size = 0, _FIRST_CHUNK
        while lo < len(cand):
            part = slice(lo, lo + size)
            lo, size = lo + size, _CHUNK
            rows = zip(cand[part].tolist(), cand_need[part].tolist(), smallest_after[part].tolist(), strict=True)
            for i, n, least in rows:
                if budget < least:
                    return admitted
                if n <= budget:
                    admitted[i] = True
                    budget -= n
    return admitted


def admit_by_rank(
    sched: PolicyScheduler,
    view: SchedulerView,
    pool: FreePool,
    ranked: np.ndarray,
    is_running: np.ndarray,
    stay: np.ndarray | None = None,
) -> tuple[list[Decision], np.ndarray, list[Start]]:
    """One preemptive round: admit jobs (running or waiting) in ``ranked`` order while GPUs last.

    Running jobs left out are preempted, admitted waiting jobs start. Counting GPUs is enough because a
    placement always succeeds when enough GPUs are free, so nobody is preempted unless a higher-ranked
    job needs the GPUs, and a lower-ranked job never takes GPUs that a higher-ranked one was denied.
    ``stay``: running jobs ranked ahead of all of ``ranked``; they all fit (they run now), so they are
    only counted. Returns the decisions (preemptions first), the victims and the starts.
    """
    budget = view.topo.num_gpus
    if stay is not None:
        budget -= int(view.jobs.num_gpus[stay].sum())
    admitted = admitted_by_budget(view.jobs.num_gpus[ranked].astype(np.int64), budget)
    victims = ranked[is_running & ~admitted]
    decisions, starts = preempt_then_start(sched, view, pool, victims, ranked[~is_running & admitted])
    return decisions, victims, starts


def preempt_then_start(
    sched: PolicyScheduler, view: SchedulerView, pool: FreePool, victims: np.ndarray, entering: np.ndarray
) -> tuple[list[Decision], list[Start]]:
    """Preempt ``victims``, then place the ``entering`` jobs in order. Every entering job fits by count
    once the victims are gone, so the pass needs none of start_in_order's backfill bookkeeping.
    Returns the decisions (preemptions first) and the starts."""
    for v in victims.tolist():
        pool.release(view.placement(v), v)
    starts: list[Start] = []
    for j, n in zip(entering.tolist(), view.jobs.num_gpus[entering].tolist(), strict=True):
        gpus = sched.place(view, j, n, pool)
        if gpus is not None:
            pool.take(gpus, j)
            starts.append(Start(j, gpus))
    return [*(Preempt(v) for v in victims.tolist()), *starts], starts
