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
``(1 + margin)`` times its estimate plus ``min_gain`` seconds so that near-ties do not thrash, and
admits them greedily (:func:`~cluster_sim.policies.base.admit_by_rank`). ``preempt=False`` only orders
the queue.
"""

from __future__ import annotations

import numpy as np

from cluster_sim.placement import FreePool
from cluster_sim.policies.base import PolicyScheduler, admit_by_rank
from cluster_sim.protocol import Decision, Preempt, SchedulerView, Start

PRIOR_S = 3600.0  # expected run time before any job has finished


class _History:
    """Finished run times per key, with the conditional mean residual life answered vectorised."""

    def __init__(self) -> None:
        self._new: dict[int, list[float]] = {}
        self._sorted: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # key -> (sorted times, suffix sums)

    def add(self, keys: np.ndarray, times: np.ndarray) -> None:
        for k, t in zip(keys.tolist(), times.tolist(), strict=True):
            self._new.setdefault(k, []).append(t)

    def residual(self, keys: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(E[D - x | D > x], whether the key has any history) per row."""
        self._merge()
        out = np.full(len(keys), np.nan)
        known = np.zeros(len(keys), dtype=bool)
        for k in np.unique(keys).tolist():
            hit = self._sorted.get(k)
            if hit is None:
                continue
            rows = np.flatnonzero(keys == k)
            times, suffix = hit
            i = np.searchsorted(times, x[rows], side="right")
            above = len(times) - i
            mean_above = np.divide(suffix[i], above, out=np.zeros(len(rows)), where=above > 0)
            out[rows] = np.where(above > 0, mean_above - x[rows], x[rows])  # older than all: as long again
            known[rows] = True
        return out, known

    def _merge(self) -> None:
        for k, new in self._new.items():
            old = self._sorted.get(k)
            times = np.sort(np.concatenate([old[0], new]) if old is not None else np.asarray(new))
            suffix = np.concatenate([np.cumsum(times[::-1])[::-1], [0.0]])  # suffix[i] = sum of times[i:]
            self._sorted[k] = (times, suffix)
        self._new.clear()


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
        margin: float = 0.1,
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
        n = len(view.jobs)
        self._on_gpus = np.zeros(0, dtype=np.int64)  # jobs holding GPUs once the last round was applied
        self._levels = [_History() for _ in range(4)]  # (tenant, GPUs), tenant, GPUs, everything
        self._counts = [np.zeros(0, dtype=np.int64) for _ in range(4)]
        g = view.jobs.num_gpus.astype(np.int64)
        t = view.jobs.tenant.astype(np.int64)
        self._keys = [t * (int(g.max(initial=1)) + 1) + g, t, g, np.zeros(n, dtype=np.int64)]
        self._counts = [np.zeros(int(k.max(initial=0)) + 1, dtype=np.int64) for k in self._keys]
        past = view.jobs.meta.get("history")
        if past is not None and len(past["duration"]):
            pg = np.asarray(past["num_gpus"], dtype=np.int64)
            pt = np.asarray(past["tenant"], dtype=np.int64)
            known = (pt < len(view.jobs.tenants)) & (pg <= int(g.max(initial=1)))  # keys of this workload
            self._record([pt[known] * (int(g.max(initial=1)) + 1) + pg[known], pt[known], pg[known],
                          np.zeros(int(known.sum()), dtype=np.int64)], np.asarray(past["duration"])[known])  # fmt: skip

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
                r, _ = hist.residual(k[enough], x[todo[enough]])
                est[todo[enough]] = r
        missing = np.isnan(est)
        est[missing] = np.maximum(PRIOR_S - x[missing], x[missing])
        return est

    def decide(self, view: SchedulerView, queue: np.ndarray, pool: FreePool) -> list[Decision]:
        key_q = (1.0 + self.margin) * self.expected_remaining(view, queue) + self.min_gain
        gpus = view.jobs.num_gpus
        if not self.preemptive or int(gpus[queue].sum()) <= pool.num_free:
            return list(self.start_in_order(view, queue[np.lexsort((queue, key_q))], pool, backfill=True))
        running = np.asarray(view.running, dtype=np.int64)
        key_r = self.expected_remaining(view, running)
        ids = np.concatenate([running, queue])
        waits = np.concatenate([np.zeros(len(running), dtype=np.int8), np.ones(len(queue), dtype=np.int8)])
        order = np.lexsort((ids, waits, np.concatenate([key_r, key_q])))
        decisions, _, _ = admit_by_rank(self, view, pool, ids[order], waits[order] == 0)
        return decisions
