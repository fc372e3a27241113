"""What a scheduler learns from the jobs it saw finish: run times per tenant and GPU count.

No job's own duration is read. A job that leaves the GPUs without being preempted has finished; its
wall time on the GPUs is what a cluster's logs record, grouped by tenant and GPU count as a scheduler
keeps per-user history. A job that has run ``x`` seconds so far is expected to need ``E[D - x | D > x]``
more over the finished jobs of its group that ran longer than ``x`` (the conditional mean residual
life). A trace window starts with the history of the jobs that finished before it
(``workload.meta["history"]``, see :func:`cluster_sim.traces.window.window`), as a deployed scheduler has
its logs. Groups without history back off to the tenant, then to the GPU count, then to everything; a
job older than every finished job of its group is expected to need as long again as it has run.

Used by :class:`~cluster_sim.policies.qssf.QSSF`, the elastic Optimus and the learned priority agents.
"""

from __future__ import annotations

import numpy as np

from cluster_sim.protocol import ClusterStateView, SchedulerView

PRIOR_S = 3600.0  # expected run time before any job has finished
_MAX_KEYS = 1 << 20  # keys up to which History keeps where each key's run times end


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
        self._end = np.zeros(1, dtype=np.int64)  # per key, where its run times end in _value
        self._buf_key: list[int] = []
        self._buf_time: list[float] = []
        self._buf_index: tuple[np.ndarray, np.ndarray] | None = None  # the buffer sorted, with suffix sums

    def add(self, keys: np.ndarray, times: np.ndarray) -> None:
        times = np.minimum(np.asarray(times, dtype=np.float64), self.SPAN * 0.999)
        self._buf_key.extend(keys.tolist())
        self._buf_time.extend(times.tolist())
        self._buf_index = None
        if len(self._buf_key) >= self.BUFFER:
            self._merge()

    def residual(self, keys: np.ndarray, x: np.ndarray) -> np.ndarray:
        """E[D - x | D > x] per row (``x`` itself where no run time of the key exceeds ``x``)."""
        keys = np.asarray(keys, dtype=np.int64)
        base = keys * self.SPAN
        lo = np.searchsorted(self._value, base + x, side="right")
        if len(self._end) > 1:  # keys past the last one end where the history ends, as lo does
            hi = self._end[np.minimum(keys, len(self._end) - 1)]
        else:
            hi = np.searchsorted(self._value, base + self.SPAN, side="left")
        above = (hi - lo).astype(np.float64)
        total = self._suffix[lo] - self._suffix[hi]
        if self._buf_key:
            value, suffix = self._buffer()
            blo = np.searchsorted(value, base + x, side="right")
            bhi = np.searchsorted(value, base + self.SPAN, side="left")
            above += bhi - blo
            total += suffix[blo] - suffix[bhi]
        mean_above = np.divide(total, above, out=np.zeros(len(keys)), where=above > 0)
        return np.where(above > 0, mean_above - x, x)  # older than all: as long again

    def _buffer(self) -> tuple[np.ndarray, np.ndarray]:
        """The buffer searched like the history (sorted composite values, suffix sums of the times),
        rebuilt only after an :meth:`add`: rounds query far more often than jobs finish."""
        if self._buf_index is None:
            bk, bt = np.asarray(self._buf_key, dtype=np.int64), np.asarray(self._buf_time)
            new = bk * self.SPAN + bt
            order = np.argsort(new, kind="stable")
            self._buf_index = new[order], np.concatenate([np.cumsum(bt[order][::-1])[::-1], [0.0]])
        return self._buf_index

    def _merge(self) -> None:
        bk, bt = np.asarray(self._buf_key, dtype=np.int64), np.asarray(self._buf_time)
        new = bk * self.SPAN + bt
        order = np.argsort(new, kind="stable")
        at = np.searchsorted(self._value, new[order])
        self._value = np.insert(self._value, at, new[order])
        self._time = np.insert(self._time, at, bt[order])
        self._suffix = np.concatenate([np.cumsum(self._time[::-1])[::-1], [0.0]])
        keys = int(self._value[-1] // self.SPAN) + 1
        self._end = np.zeros(1, dtype=np.int64)
        if keys <= _MAX_KEYS:
            self._end = np.searchsorted(self._value, np.arange(1, keys + 1) * self.SPAN, side="left")
        self._buf_key, self._buf_time, self._buf_index = [], [], None


class TenantHistory:
    """Finished run times at four back-off levels, learned from the jobs that finish.

    Call :meth:`learn` at the start of every round; :meth:`expected_remaining` then answers for any jobs.
    The four levels' groups share one :class:`History` under disjoint keys, and each job's answering
    group (the first level whose group holds ``min_history`` runs) is kept up to date as groups fill, so
    a query for any jobs is one search however their groups back off.
    """

    def __init__(self, min_history: int = 3) -> None:
        if min_history < 1:
            raise ValueError(f"min_history must be >= 1, got {min_history}")
        self.min_history = int(min_history)
        self._seen = 0

    def reset(self, view: SchedulerView) -> None:
        self._seen = 0  # completions taken in so far
        self._history = History()
        self._most_gpus = int(view.jobs.num_gpus.max(initial=1))
        self._keys = self._group_keys(view.jobs.tenant, view.jobs.num_gpus)
        sizes = [int(k.max(initial=0)) + 1 for k in self._keys]
        sizes[0] = max(sizes[0], len(view.jobs.tenants) * (self._most_gpus + 1))
        sizes[1] = max(sizes[1], len(view.jobs.tenants))
        self._counts = [np.zeros(size, dtype=np.int64) for size in sizes]
        # the levels' keys in the shared history, coarsest first so that the values stay small
        self._offset = np.cumsum([0, *sizes[:0:-1]])[::-1].tolist()
        self._shared = np.stack([k + off for k, off in zip(self._keys, self._offset, strict=True)], axis=1)
        self._answer = np.full(len(view.jobs), -1, dtype=np.int64)  # each job's key in the history; -1: none
        self._answer_level = np.full(len(view.jobs), len(sizes), dtype=np.int64)
        past = view.jobs.meta.get("history")
        if past is not None and len(past["duration"]):
            pt, pg = np.asarray(past["tenant"]), np.asarray(past["num_gpus"])
            known = (pt < len(view.jobs.tenants)) & (pg <= self._most_gpus)  # groups this workload can have
            self._record(self._group_keys(pt[known], pg[known]), np.asarray(past["duration"])[known])

    @property
    def learned(self) -> int:
        """Completions taken in so far: every estimate stays the same until it changes (callers may keep them)."""
        return self._seen

    def _group_keys(self, tenant: np.ndarray, num_gpus: np.ndarray) -> list[np.ndarray]:
        """Keys at each back-off level: (tenant, GPUs), tenant, GPUs, everything."""
        t, g = np.asarray(tenant, dtype=np.int64), np.asarray(num_gpus, dtype=np.int64)
        return [t * (self._most_gpus + 1) + g, t, g, np.zeros(len(t), dtype=np.int64)]

    def learn(self, view: ClusterStateView) -> None:
        """Take in the jobs that finished since the last call (the view's completion log)."""
        if view.num_completed == self._seen:
            return
        done = np.asarray(view.completed_since(self._seen), dtype=np.int64)
        self._seen += len(done)
        ran = view.executed_times(done)
        self._record([keys[done] for keys in self._keys], ran, self._shared[done].T.ravel())

    def _record(self, keys: list[np.ndarray], times: np.ndarray, shared: np.ndarray | None = None) -> None:
        """Finished run times under their key at every back-off level (``shared``: those keys in the
        shared history, level by level); jobs whose group at a finer level than their present one now
        holds enough runs answer from it from now on."""
        times = np.asarray(times, dtype=np.float64)
        if shared is None:
            shared = np.concatenate([k + off for k, off in zip(keys, self._offset, strict=True)])
        self._history.add(shared, np.tile(times, len(keys)))
        for level, (k, counts) in enumerate(zip(keys, self._counts, strict=True)):  # sized for every group
            if len(k) > 8:
                before = counts[k] < self.min_history
                np.add.at(counts, k, 1)
                filled = np.unique(k[before & (counts[k] >= self.min_history)]).tolist()
            else:  # a round's few completions
                filled = []
                for key in k.tolist():
                    counts[key] += 1
                    if counts[key] == self.min_history:
                        filled.append(key)
            if filled:
                jobs = np.flatnonzero(np.isin(self._keys[level], filled) & (self._answer_level > level))
                self._answer_level[jobs] = level
                self._answer[jobs] = self._keys[level][jobs] + self._offset[level]

    def group_size(self, jobs: np.ndarray) -> np.ndarray:
        """Finished jobs of each job's (tenant, GPU count) group so far."""
        k = self._keys[0][jobs]
        counts = self._counts[0]
        return np.where(k < len(counts), counts[np.minimum(k, len(counts) - 1)], 0)

    def expected_remaining(self, view: SchedulerView, jobs: np.ndarray) -> np.ndarray:
        """E[D - x | D > x] per job from the history of finished jobs (x = wall seconds run so far)."""
        return self.residual(jobs, view.executed_times(jobs))

    def residual(self, jobs: np.ndarray, x: np.ndarray) -> np.ndarray:
        """E[D - x | D > x] per job for given run times ``x`` (``x = 0``: the group's mean run time)."""
        x = np.asarray(x, dtype=np.float64)
        key = self._answer[jobs]
        known = key >= 0
        if known.all():
            return self._history.residual(key, x)
        est = np.maximum(PRIOR_S - x, x)  # no group of the job holds enough runs yet
        if known.any():
            est[known] = self._history.residual(key[known], x[known])
        return est
