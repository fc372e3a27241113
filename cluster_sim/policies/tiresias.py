"""Tiresias' discretised two-dimensional least-attained-service (2D-LAS) scheduler (Gu et al., NSDI'19).

A job's priority is its attained service in GPU-seconds (GPUs held × time held), which needs no
knowledge of durations. Priorities are discretised into queues by thresholds; within a queue jobs go in
arrival order, and jobs of a higher-priority queue preempt running jobs of lower queues.

Values taken: two queues with one threshold at 3600 GPU-seconds, the ``queue_limit`` of the simulator
released with the paper (SymbioticLab/Tiresias). The starvation knob is off by default (``starve_limit
= None``); set it to promote a waiting job back to the first queue once it has waited ``starve_limit``
times its executed time, the paper's PROMOTE/STARVELIMIT rule (checked at scheduling points only).

Within a queue, ``queue_order`` says who goes first. ``"arrival"`` (default): jobs already on the GPUs,
then arrival order, so a job only preempts jobs of a lower queue. ``"entry"``: the time the job entered
its queue (arrival for the first, the threshold crossing for the others), running or not, as Pollux's
Tiresias baseline keeps its queues (a job demoted joins the back of the next queue, and an earlier job
of the same queue waiting for GPUs preempts a later one).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from cluster_sim.placement import FreePool
from cluster_sim.policies.base import PolicyScheduler, StayCache, admit_by_rank, admitted_by_budget, preempt_then_start
from cluster_sim.policies.level_sets import LevelSets, queue_levels
from cluster_sim.protocol import ClusterStateView, Decision, SchedulerView


class Tiresias(PolicyScheduler):
    """Discretised 2D-LAS with preemption and wake-ups at queue crossings.

    Each round ranks every job, running or waiting, by (queue, running before waiting, arrival) and
    admits them greedily while GPUs last (see :func:`~cluster_sim.policies.base.admit_by_rank`):
    running jobs left out are preempted. Ranking running jobs first within a queue means a job only
    ever preempts jobs of a strictly lower queue, so equal jobs never swap back and forth. While some
    job waits, the scheduler asks to be woken when the next running job will cross a threshold, the
    only moment priorities change between arrivals and completions.

    Attained service is read from the view once per stay in the queue or on the GPUs; while a job runs
    it grows by exactly its GPU count per second, so it is extrapolated in between. In arrival order
    without promotions the jobs are kept by queue level across rounds (:class:`LevelSets`), so that a
    round costs O(jobs changed) rather than a sort of every job.
    """

    ordering = "tiresias"
    preemptive = True
    default_backfill = True
    keep_levels = True  # False: rank every job afresh at each round, as in "entry" order (for tests)

    def __init__(
        self,
        placement: str = "consolidate",
        *,
        thresholds: Sequence[float] = (3600.0,),
        starve_limit: float | None = None,
        queue_order: str = "arrival",
        **kw,
    ) -> None:
        th = [float(t) for t in thresholds]
        if any(t <= 0 for t in th) or th != sorted(set(th)):
            raise ValueError(f"Tiresias thresholds must be positive and strictly increasing, got {list(thresholds)}")
        if starve_limit is not None and starve_limit <= 0:
            raise ValueError(f"Tiresias starve_limit must be > 0 or None, got {starve_limit}")
        if queue_order not in ("arrival", "entry"):
            raise ValueError(f"Tiresias queue_order must be 'arrival' or 'entry', got {queue_order!r}")
        super().__init__(placement, **kw)
        self.thresholds = np.array([*th, np.inf])
        self.starve_limit = starve_limit
        self.queue_order = queue_order
        self._wait_service = StayCache()  # attained GPU-seconds, constant while waiting
        self._run_service = StayCache()  # attained GPU-seconds minus GPUs x time of first sight on the GPUs
        self._wait_since = StayCache()
        self._executed = StayCache()
        self._offset = np.zeros(0)  # attained service at the last promotion
        self._pos = np.zeros(0, dtype=np.int64)
        self._level = np.zeros(0, dtype=np.int64)  # queue ("entry" order): the last one seen
        self._entered = np.zeros(0)  # when the job entered that queue
        self._sets: LevelSets | None = None

    def _left_queue(self, started: list[int]) -> None:
        if not started:
            return
        self._wait_service.forget(started)
        if self.starve_limit is not None:
            self._wait_since.forget(started)
            self._executed.forget(started)

    def reset(self, view: SchedulerView) -> None:
        super().reset(view)
        n = len(view.jobs)
        for cache in (self._wait_service, self._run_service, self._wait_since, self._executed):
            cache.reset(n)
        self._offset = np.zeros(n)
        self._pos = np.zeros(n, dtype=np.int64)  # scratch: position of each job in this round's running array
        self._level = np.zeros(n, dtype=np.int64)
        self._entered = np.asarray(view.jobs.arrival, dtype=float).copy()
        kept = self.keep_levels and self.queue_order == "arrival" and self.starve_limit is None
        kept = kept and isinstance(view, ClusterStateView)  # it tells arrivals and completions
        self._sets = LevelSets(self.thresholds, view.jobs.num_gpus) if kept else None

    def _entry(self, jobs: np.ndarray, level: np.ndarray, svc: np.ndarray, now: float, gpus: np.ndarray) -> np.ndarray:
        """When each job entered its present queue. A job changes queue only on the GPUs (its service
        grows) or by a starvation promotion while waiting: a running job crossed its queue's lower
        threshold ``(svc - threshold) / gpus`` seconds ago (it ran without a break since, since every
        preemption happens in a round that looks at it), a promoted one entered now. Jobs noticed at the
        same decision enter in arrival order."""
        moved = level != self._level[jobs]
        if moved.any():
            j, lv = jobs[moved], level[moved]
            lower = np.where(lv > 0, self.thresholds[np.maximum(lv - 1, 0)], 0.0)
            crossed = now - (svc[moved] - lower) / gpus[j]
            if self.interval > 0:  # a periodic scheduler notices the crossing at its next decision
                crossed = np.ceil(crossed / self.interval - 1e-9) * self.interval
            self._entered[j] = np.where(lv > self._level[j], np.minimum(crossed, now), now)
            self._level[j] = lv
        return self._entered[jobs]

    def _levels(self, svc: np.ndarray) -> np.ndarray:
        return queue_levels(self.thresholds, svc)

    def decide(self, view: SchedulerView, queue: np.ndarray, pool: FreePool) -> list[Decision]:
        sets = self._sets
        if sets is not None:
            sets.catch_up(view)
            if not sets.consistent(view, len(queue)):  # someone else started or preempted jobs
                sets.rebuild(view, queue)
                if not sets.consistent(view, len(queue)):  # (GPUs shared with guests): rank afresh
                    self._sets = None
            if self._sets is not None:
                return self._decide_kept(view, queue, pool, sets)
        return self._decide_sorted(view, queue, pool)

    def _decide_kept(self, view: SchedulerView, queue: np.ndarray, pool: FreePool, sets: LevelSets) -> list[Decision]:
        """A round from the kept level sets: per queue level, its running jobs then its waiting ones, in
        arrival order, admitted while GPUs last (as :func:`admit_by_rank` over the whole ranking).
        A level's running jobs all stay when the GPUs left cover them, so they are only looked at one by
        one in rounds that preempt."""
        now = view.now
        if sum(sets.wait_need) <= pool.num_free:  # everyone fits: nobody waits, nobody is preempted
            starts = self.start_in_order(view, sets.waiting.ids(), pool, backfill=True)
            sets.start([s.job for s in starts], now)
            return list(starts)
        sets.cross(now)
        gpus = sets.gpus
        budget = view.topo.num_gpus
        victims, entering = [], []
        for lv in range(len(self.thresholds)):
            if sets.run_need[lv] <= budget:
                budget -= sets.run_need[lv]
            else:
                ids = sets.running.block(lv)
                admitted = admitted_by_budget(gpus[ids], budget)
                victims.append(ids[~admitted])
                budget -= int(gpus[ids[admitted]].sum())
            if sets.wait_need[lv] and sets.wait_need[lv] <= budget:  # the level's waiting jobs all start
                entering.append(sets.waiting.block(lv))
                budget -= sets.wait_need[lv]
            elif budget > 0 and sets.wait_need[lv]:
                ids = sets.waiting.block(lv)
                admitted = admitted_by_budget(gpus[ids], budget)
                entering.append(ids[admitted])
                budget -= int(gpus[ids[admitted]].sum())
        out = np.concatenate(victims) if victims else np.zeros(0, dtype=np.int64)
        into = np.concatenate(entering) if entering else np.zeros(0, dtype=np.int64)
        decisions, starts = preempt_then_start(self, view, pool, out, into)
        sets.preempt(out.tolist())
        sets.start([s.job for s in starts], now)
        if len(starts) < len(queue) or len(out):
            view.wake_at(sets.next_crossing())
        return decisions

    def _decide_sorted(self, view: SchedulerView, queue: np.ndarray, pool: FreePool) -> list[Decision]:
        """A round that ranks every job afresh: entry order, starvation promotions, or a view this
        scheduler does not alone act on."""
        now = view.now
        gpus = view.jobs.num_gpus
        n = len(gpus)
        svc_q = self._wait_service.update(queue, view.attained_service)
        if self.starve_limit is not None:
            since = self._wait_since.update(queue, lambda j: now)
            ran = self._executed.update(queue, view.executed_time)
            starved = (ran > 0) & (now - since >= self.starve_limit * ran)
            self._offset[queue[starved]] = svc_q[starved]
        svc_q = svc_q - self._offset[queue]
        level_q = self._levels(svc_q)
        entry = self.queue_order == "entry"
        if entry:
            self._entry(queue, level_q, svc_q, now, gpus)
        if int(gpus[queue].sum()) <= pool.num_free:  # everyone fits: nobody waits, nobody is preempted
            if entry:
                order = queue[np.lexsort((queue, self._entered[queue], level_q))]
            else:
                order = np.sort(level_q * n + queue) % n
            starts = self.start_in_order(view, order, pool, backfill=True)
            self._left_queue([s.job for s in starts])
            return list(starts)
        running = np.asarray(view.running, dtype=np.int64)
        svc_r = self._run_service.update(running, lambda j: view.attained_service(j) - int(gpus[j]) * now)
        svc_r = svc_r + gpus[running] * now - self._offset[running]
        level_r = self._levels(svc_r)
        ids = np.concatenate([running, queue])
        waits = np.concatenate([np.zeros(len(running), dtype=np.int8), np.ones(len(queue), dtype=np.int8)])
        levels = np.concatenate([level_r, level_q])
        if entry:
            self._entry(running, level_r, svc_r, now, gpus)
            order = np.lexsort((ids, self._entered[ids], levels))
            ranked, is_running = ids[order], waits[order] == 0
        else:  # (queue, waiting, id) packed into one integer: one sort instead of a three-key lexsort
            key = np.sort((levels * 2 + waits) * n + ids)
            ranked, is_running = key % n, (key // n) % 2 == 0
        decisions, victims, starts = admit_by_rank(self, view, pool, ranked, is_running)
        self._run_service.forget(victims)
        self._left_queue([s.job for s in starts])
        if len(starts) < len(queue) or len(victims):
            # the next threshold crossing among the jobs on the GPUs after this round: the running jobs
            # left in place and the started ones
            stay = np.ones(len(running), dtype=bool)
            if len(victims):
                self._pos[running] = np.arange(len(running))
                stay[self._pos[victims]] = False
            started = np.fromiter((s.job for s in starts), dtype=np.int64, count=len(starts))
            on = np.concatenate([running[stay], started])
            svc_s = self._wait_service.value[started] - self._offset[started]
            svc = np.concatenate([svc_r[stay], svc_s])
            nxt = self.thresholds[np.concatenate([level_r[stay], self._levels(svc_s)])]
            dt = (nxt - svc) / gpus[on]
            if len(dt) and np.isfinite(dt.min()):
                view.wake_at(now + float(dt.min()))
        return decisions
