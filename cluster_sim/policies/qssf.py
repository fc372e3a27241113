"""Quasi-shortest-service-first from the history of finished jobs (after Helios' QSSF, Hu et al., SC'21).

No job's own duration is read. The scheduler learns how long jobs ran from the ones it sees finish (a
job that leaves the GPUs without being preempted has finished; its wall time on the GPUs is what a
cluster's logs record), grouped by tenant and GPU count, as a scheduler keeps per-user history. A job
that has run ``x`` seconds so far is expected to need ``E[D - x | D > x]`` more, over the finished jobs
of its group that ran longer than ``x`` (the conditional mean residual life): long-running jobs of a
heavy-tailed group look long, fresh ones look like the group's typical job. A trace window starts with
the history of the jobs that finished before it (``workload.meta["history"]``, see
:func:`cluster_sim.traces.window.window`), as a deployed scheduler has its logs. Groups without history back
off to the tenant, then to the GPU count, then to everything; a job older than every finished job of its
group is expected to need as long again as it has run.

Ranking and preemption follow :class:`~cluster_sim.policies.srtf.SRTF` with the estimate in place of the
oracle: every round ranks running and waiting jobs by expected remaining time, a waiting job counting as
``(1 + margin)`` times its estimate plus ``min_gain`` seconds, and admits them greedily
(:func:`~cluster_sim.policies.base.admit_by_rank`). ``preempt=False`` only orders the queue.

The estimates are noisy (heavy-tailed groups), so a preemption must promise a large gain: by default a
waiting job displaces a running one only if the running job is expected to need more than 31 times as
long (``margin=30``). On the Philly jobs of 2017-11-01..14 at load 0.9 on ``small`` (oracle interference)
margins of 0.1 / 3 / 30 / 100 gave average JCTs of 22,379 / 17,949 / 16,311 / 16,639 s (Tiresias
21,942); on the two weeks before, 33,088 / 28,734 / 28,827 / 28,837 s (Tiresias 28,990).
"""

from __future__ import annotations

import numpy as np

from cluster_sim.placement import FreePool
from cluster_sim.policies.base import PolicyScheduler, admit_by_rank
from cluster_sim.protocol import Decision, Preempt, SchedulerView, Start

PRIOR_S = 3600.0  # expected run time before any job has finished


class History:
    """Finished run times per key, with the conditional mean residual life answered vectorised.

    All keys share one array sorted by (key, time), searched through the composite value
    ``key * SPAN + time``, with suffix sums of the times, so a query for any number of jobs of any keys is
    one binary search. The latest run times wait in a small unsorted buffer that queries compare against
    directly; a full buffer is inserted into the sorted array in one pass, never re-sorting the history.
    """

    SPAN = 1e9  # seconds: larger than any run time (about 31 years), so keys never overlap
    BUFFER = 256

    def __init__(self) -> None:
        self._value = np.zeros(0)  # key * SPAN + time, sorted
        self._time = np.zeros(0)
        self._suffix = np.zeros(1)  # suffix[i] = sum of _time[i:]
        self._buf_key: list[int] = []
        self._buf_time: list[float] = []

    def add(self, keys: np.ndarray, times: np.ndarray) -> None:
        times = np.minimum(np.asarray(times, dtype=np.float64), self.SPAN * 0.999)
        self._buf_key.extend(keys.tolist())
        self._buf_time.extend(times.tolist())
        if len(self._buf_key) >= self.BUFFER:
            self._merge()

    def residual(self, keys: np.ndarray, x: np.ndarray) -> np.ndarray:
        """E[D - x | D > x] per row (``x`` itself where no run time of the key exceeds ``x``)."""
        keys = np.asarray(keys, dtype=np.int64)
        base = keys * self.SPAN
        lo = np.searchsorted(self._value, base + x, side="right")
        hi = np.searchsorted(self._value, base + self.SPAN, side="left")
        above = (hi - lo).astype(np.float64)
        total = self._suffix[lo] - self._suffix[hi]
        if self._buf_key:
            bk, bt = np.asarray(self._buf_key), np.asarray(self._buf_time)
            longer = (bk[None, :] == keys[:, None]) & (bt[None, :] > x[:, None])
            above += longer.sum(axis=1)
            total += (longer * bt[None, :]).sum(axis=1)
        mean_above = np.divide(total, above, out=np.zeros(len(keys)), where=above > 0)
        return np.where(above > 0, mean_above - x, x)  # older than all: as long again

    def _merge(self) -> None:
        bk, bt = np.asarray(self._buf_key, dtype=np.int64), np.asarray(self._buf_time)
        new = bk * self.SPAN + bt
        order = np.argsort(new, kind="stable")
        at = np.searchsorted(self._value, new[order])
        self._value = np.insert(self._value, at, new[order])
        self._time = np.insert(self._time, at, bt[order])
        self._suffix = np.concatenate([np.cumsum(self._time[::-1])[::-1], [0.0]])
        self._buf_key, self._buf_time = [], []


class QSSF(PolicyScheduler):
    """Expected remaining time from the history of finished jobs (tenant x GPU count), ranked like SRTF."""

    ordering = "qssf"
    preemptive = True
    default_backfill = True

    def __init__(
        self,
        placement: str = "consolidate",
        *,
        preempt: bool = True,
        margin: float = 30.0,
        min_gain: float = 0.0,
        min_history: int = 3,
        **kw,
    ) -> None:
        if margin < 0 or min_gain < 0 or min_history < 1:
            raise ValueError(
                f"QSSF needs margin >= 0, min_gain >= 0, min_history >= 1; got {margin}, {min_gain}, {min_history}"
            )
        super().__init__(placement, **kw)
        self.preemptive = bool(preempt)
        self.margin = float(margin)
        self.min_gain = float(min_gain)
        self.min_history = int(min_history)
        self._on_gpus = np.zeros(0, dtype=np.int64)  # jobs holding GPUs once the last round was applied

    def reset(self, view: SchedulerView) -> None:
        super().reset(view)
        self._on_gpus = np.zeros(0, dtype=np.int64)  # jobs holding GPUs once the last round was applied
        self._levels = [History() for _ in range(4)]
        self._most_gpus = int(view.jobs.num_gpus.max(initial=1))
        self._keys = self._group_keys(view.jobs.tenant, view.jobs.num_gpus)
        self._counts = [np.zeros(int(k.max(initial=0)) + 1, dtype=np.int64) for k in self._keys]
        past = view.jobs.meta.get("history")
        if past is not None and len(past["duration"]):
            pt, pg = np.asarray(past["tenant"]), np.asarray(past["num_gpus"])
            known = (pt < len(view.jobs.tenants)) & (pg <= self._most_gpus)  # groups this workload can have
            self._record(self._group_keys(pt[known], pg[known]), np.asarray(past["duration"])[known])

    def _group_keys(self, tenant: np.ndarray, num_gpus: np.ndarray) -> list[np.ndarray]:
        """Keys at each back-off level: (tenant, GPUs), tenant, GPUs, everything."""
        t, g = np.asarray(tenant, dtype=np.int64), np.asarray(num_gpus, dtype=np.int64)
        return [t * (self._most_gpus + 1) + g, t, g, np.zeros(len(t), dtype=np.int64)]

    def schedule(self, view: SchedulerView) -> list[Decision]:
        self._learn(view)
        decisions = super().schedule(view)
        running = np.asarray(view.running, dtype=np.int64)
        preempted = [d.job for d in decisions if isinstance(d, Preempt)]
        started = [d.job for d in decisions if isinstance(d, Start)]
        if preempted:
            running = np.setdiff1d(running, preempted)
        self._on_gpus = np.concatenate([running, np.asarray(started, dtype=np.int64)])
        return decisions

    def _learn(self, view: SchedulerView) -> None:
        """Jobs that left the GPUs since the last round without being preempted have finished."""
        prev = self._on_gpus
        if not len(prev):
            return
        here = np.zeros(len(view.jobs), dtype=bool)
        here[np.asarray(view.running, dtype=np.int64)] = True
        here[np.asarray(view.queue, dtype=np.int64)] = True
        gone = prev[~here[prev]]
        if len(gone):
            self._record([keys[gone] for keys in self._keys], view.executed_times(gone))

    def _record(self, keys: list[np.ndarray], times: np.ndarray) -> None:
        """Finished run times under their key at every back-off level."""
        for level, (hist, k) in enumerate(zip(self._levels, keys, strict=True)):
            hist.add(k, times)
            if len(k) and int(k.max()) >= len(self._counts[level]):
                grown = np.zeros(int(k.max()) + 1, dtype=np.int64)
                grown[: len(self._counts[level])] = self._counts[level]
                self._counts[level] = grown
            np.add.at(self._counts[level], k, 1)

    def expected_remaining(self, view: SchedulerView, jobs: np.ndarray) -> np.ndarray:
        """E[D - x | D > x] per job from the history of finished jobs (x = wall seconds run so far)."""
        x = view.executed_times(jobs)
        est = np.full(len(jobs), np.nan)
        for hist, keys, counts in zip(self._levels, self._keys, self._counts, strict=True):
            todo = np.flatnonzero(np.isnan(est))
            if not len(todo):
                break
            k = keys[jobs[todo]]
            enough = counts[k] >= self.min_history
            if enough.any():
                est[todo[enough]] = hist.residual(k[enough], x[todo[enough]])
        missing = np.isnan(est)
        est[missing] = np.maximum(PRIOR_S - x[missing], x[missing])
        return est

    def decide(self, view: SchedulerView, queue: np.ndarray, pool: FreePool) -> list[Decision]:
        gpus = view.jobs.num_gpus
        if not self.preemptive or int(gpus[queue].sum()) <= pool.num_free:
            key_q = (1.0 + self.margin) * self.expected_remaining(view, queue) + self.min_gain
            return list(self.start_in_order(view, queue[np.lexsort((queue, key_q))], pool, backfill=True))
        running = np.asarray(view.running, dtype=np.int64)
        ids = np.concatenate([running, queue])
        est = self.expected_remaining(view, ids)
        key_r, key_q = est[: len(running)], (1.0 + self.margin) * est[len(running) :] + self.min_gain
        waits = np.concatenate([np.zeros(len(running), dtype=np.int8), np.ones(len(queue), dtype=np.int8)])
        order = np.lexsort((ids, waits, np.concatenate([key_r, key_q])))
        decisions, _, _ = admit_by_rank(self, view, pool, ids[order], waits[order] == 0)
        return decisions
