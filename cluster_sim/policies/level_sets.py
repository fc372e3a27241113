"""Tiresias' waiting and running jobs by queue level, kept across scheduling rounds.

Between two rounds the jobs of a least-attained-service scheduler change only by arrivals, completions,
the scheduler's own starts and preemptions, and threshold crossings of running jobs. A waiting job's
attained service is constant and a running job's grows by exactly its GPU count per second, so each
running job's next crossing time is fixed for its whole stay on the GPUs and crossings come off a heap.
Kept this way a round costs O(jobs changed) plus vectorised passes over the blocks it admits from,
instead of recomputing every job's service and level and sorting them all at each event (at dc-10k,
ten thousand jobs running and thousands waiting).
"""

from __future__ import annotations

import bisect
import heapq

import numpy as np

from cluster_sim.protocol import ClusterStateView

_TOL = 1e-3  # GPU-seconds: a job woken at its threshold crossing counts as having crossed it
_OUT, WAITING, RUNNING = 0, 1, 2
_FEW = 16  # changes up to which LevelKeys.sync goes through them in Python


def queue_levels(thresholds: np.ndarray, service: np.ndarray) -> np.ndarray:
    """The queue of each attained service (0: the first); ``thresholds`` end with ``inf``."""
    return np.searchsorted(thresholds, service + _TOL, side="right")


def _splice(keys: np.ndarray, drop_at: list[int], add: list[int], add_at: list[int]) -> np.ndarray:
    """``keys`` without the entries at positions ``drop_at``, with the sorted values ``add`` inserted
    before positions ``add_at`` (all positions in ``keys`` as given): one copy, where ``np.delete``
    then ``np.insert`` make two and cost more in call overhead than in copying."""
    cuts = sorted([(p, 0, i) for i, p in enumerate(add_at)] + [(p, 1, 0) for p in drop_at])
    new = np.array(add, dtype=np.int64)
    parts, start = [], 0
    for p, dropped, i in cuts:  # at one position, insertions before the deletion
        parts.append(keys[start:p])
        if dropped:
            start = p + 1
        else:
            parts.append(new[i : i + 1])
            start = p
    parts.append(keys[start:])
    return np.concatenate(parts)


class LevelKeys:
    """The keys ``level * n + id`` of the jobs with ``state == code``, kept sorted: one queue level is one
    slice, in id (arrival) order. Changes are noted as they happen and applied together when the keys
    are next read, one deletion and one insertion for all of them: a round that reads no block (nobody
    preempted, nothing to admit) pays nothing for them."""

    def __init__(self, state: np.ndarray, code: int, level: np.ndarray) -> None:
        self.n, self.state, self.code, self.level = len(state), state, code, level  # shared, updated in place
        self.keys = np.zeros(0, dtype=np.int64)
        self._at = np.full(self.n, -1, dtype=np.int64)  # the level each job's key holds; -1: no key
        self._touched: list[int] = []

    def note(self, jobs: list[int]) -> None:
        """``jobs`` may have entered, left or changed level since the keys were last read."""
        self._touched += jobs

    def ids(self) -> np.ndarray:
        """Every member's id, by (level, id)."""
        return self.sync() % self.n

    def block(self, level: int) -> np.ndarray:
        """The ids of the members at ``level``, in id order."""
        keys = self.sync()
        lo, hi = np.searchsorted(keys, [level * self.n, (level + 1) * self.n])
        return keys[lo:hi] - level * self.n

    def sync(self) -> np.ndarray:
        """The keys of the members now, at their levels now."""
        if not self._touched:
            return self.keys
        touched, self._touched = self._touched, []
        n, at, keys, state, code, level = self.n, self._at, self.keys, self.state, self.code, self.level
        if len(touched) > _FEW:
            jobs = np.unique(np.array(touched, dtype=np.int64))
            old = at[jobs]
            new = np.where(state[jobs] == code, level[jobs], -1)
            moved = old != new
            jobs, old, new = jobs[moved], old[moved], new[moved]
            at[jobs] = new
            gone, come = old[old >= 0] * n + jobs[old >= 0], np.sort(new[new >= 0] * n + jobs[new >= 0])
        else:  # a round's usual few changes: plain Python beats a dozen calls on tiny arrays
            gone_l, come_l = [], []
            for j in set(touched):
                old, new = int(at[j]), int(level[j]) if state[j] == code else -1
                if old != new:
                    at[j] = new
                    if old >= 0:
                        gone_l.append(old * n + j)
                    if new >= 0:
                        come_l.append(new * n + j)
            if gone_l or come_l:
                come_l.sort()
                at = np.searchsorted(keys, gone_l + come_l).tolist()
                self.keys = keys = _splice(keys, at[: len(gone_l)], come_l, at[len(gone_l) :])
            return keys
        if len(gone):
            keys = np.delete(keys, np.searchsorted(keys, gone))
        if len(come):
            keys = np.insert(keys, np.searchsorted(keys, come), come)
        self.keys = keys
        return keys


class LevelSets:
    """The waiting and the running jobs of a 2D-LAS scheduler with their queue levels, and the GPUs that
    each level's waiting jobs ask for and its running jobs hold.

    :meth:`catch_up` takes in what happened since the last round (arrivals, completions, the jobs this
    scheduler preempted coming back to the queue) and :meth:`cross` the threshold crossings up to now;
    :meth:`start` and :meth:`preempt` record the round's own decisions. :meth:`consistent` says whether the sets still
    match the view, which holds when this scheduler alone starts and preempts the view's jobs.
    """

    def __init__(self, thresholds: np.ndarray, num_gpus: np.ndarray) -> None:
        self.thresholds = thresholds
        self._threshold_list = thresholds.tolist()
        self.gpus = np.asarray(num_gpus, dtype=np.int64)
        self._gpus = self.gpus.tolist()
        self._clear()

    def _clear(self) -> None:
        n, levels = len(self._gpus), len(self._threshold_list)
        self.state = np.zeros(n, dtype=np.int8)
        self.level = np.zeros(n, dtype=np.int64)
        self.service = np.zeros(n)  # waiting: attained GPU-seconds
        self.base = np.zeros(n)  # running: attained GPU-seconds minus GPUs x now, constant on the GPUs
        self._stint = [0] * n  # starts so far: tells a heap entry of an earlier stay on the GPUs
        self.waiting = LevelKeys(self.state, WAITING, self.level)
        self.running = LevelKeys(self.state, RUNNING, self.level)
        self.wait_need, self.run_need = [0] * levels, [0] * levels
        self.num_waiting = 0
        self._crossings: list[tuple[float, int, int]] = []  # (time of the next threshold, job, stint)
        self._returning: list[int] = []  # preempted in the last round: waiting from the next one
        self._arrived = self._completed = 0

    # ------------------------------------------------------------------ between rounds
    def catch_up(self, view: ClusterStateView) -> None:
        """Take in the arrivals, the completions and the jobs preempted last round (waiting now)."""
        arrived = view.num_arrived
        entering = [*range(self._arrived, arrived), *self._returning]
        self._arrived, self._returning = arrived, []
        if len(entering) > _FEW:
            self._wait(entering, view.attained_services(np.array(entering, dtype=np.int64)).tolist())
        elif entering:
            self._wait(entering, [view.attained_service(j) for j in entering])
        if view.num_completed != self._completed:
            done = view.completed_since(self._completed)
            self._completed += len(done)
            for j in done:
                self.state[j] = _OUT
                self.run_need[self.level[j]] -= self._gpus[j]
            self.running.note(done)

    def cross(self, now: float) -> None:
        """Move the running jobs whose attained service has crossed a threshold by ``now`` to their new
        queue (several, if rounds were far apart), and schedule their next crossings."""
        heap, due = self._crossings, []
        while heap and heap[0][0] <= now + _TOL:
            t, j, stint = heapq.heappop(heap)
            if self.state[j] == RUNNING and self._stint[j] == stint:
                due.append((t, j, stint))
        if not due:
            return
        jobs = np.array([j for _, j, _ in due], dtype=np.int64)
        new = queue_levels(self.thresholds, self.base[jobs] + self.gpus[jobs] * now)
        moved = []
        for (t, j, stint), lv in zip(due, new.tolist(), strict=True):
            old = int(self.level[j])
            if lv == old:  # within the tolerance of rounding, not yet: look again next time
                heapq.heappush(heap, (t, j, stint))
                continue
            self.level[j] = lv
            self.run_need[old] -= self._gpus[j]
            self.run_need[lv] += self._gpus[j]
            moved.append(j)
            self._push(j, lv)
        self.running.note(moved)

    def next_crossing(self) -> float:
        """When the next running job crosses a threshold (inf: none will)."""
        heap = self._crossings
        while heap and not (self.state[heap[0][1]] == RUNNING and self._stint[heap[0][1]] == heap[0][2]):
            heapq.heappop(heap)
        return heap[0][0] if heap else np.inf

    # ------------------------------------------------------------------ this round's decisions
    def start(self, jobs: list[int], now: float) -> None:
        """``jobs`` (waiting) start now, at their waiting level."""
        if not jobs:
            return
        self.num_waiting -= len(jobs)
        for j in jobs:
            lv, g = int(self.level[j]), self._gpus[j]
            self.base[j] = float(self.service[j]) - g * now
            self.state[j] = RUNNING
            self.wait_need[lv] -= g
            self.run_need[lv] += g
            self._stint[j] += 1
            self._push(j, lv)
        self.waiting.note(jobs)
        self.running.note(jobs)

    def preempt(self, jobs: list[int]) -> None:
        """``jobs`` (running) leave the GPUs; they wait from the next round, at their service then."""
        for j in jobs:
            self.state[j] = _OUT
            self.run_need[self.level[j]] -= self._gpus[j]
        self.running.note(jobs)
        self._returning += jobs

    # ------------------------------------------------------------------ checks
    def consistent(self, view: ClusterStateView, num_queued: int) -> bool:
        """Whether the sets match the view: as many waiting, and the running ones hold the GPUs in use."""
        return num_queued == self.num_waiting and sum(self.run_need) == view.topo.num_gpus - view.num_free

    def rebuild(self, view: ClusterStateView, queue: np.ndarray) -> None:
        """Start over from the view's queue and running jobs (a first round, or one after someone else
        started or preempted jobs)."""
        self._clear()
        self._arrived, self._completed = view.num_arrived, view.num_completed
        running = np.asarray(view.running, dtype=np.int64)
        svc = view.attained_services(running)
        self._wait(np.asarray(queue, dtype=np.int64).tolist(), view.attained_services(queue).tolist())
        self.level[running] = lv = queue_levels(self.thresholds, svc)
        self.base[running] = svc - self.gpus[running] * view.now
        self.state[running] = RUNNING
        for j, level in zip(running.tolist(), lv.tolist(), strict=True):
            self.run_need[level] += self._gpus[j]
            self._stint[j] += 1
            self._push(j, level)
        self.running.note(running.tolist())

    # ------------------------------------------------------------------ helpers
    def _wait(self, jobs: list[int], svc: list[float]) -> None:
        thresholds = self._threshold_list
        for j, attained in zip(jobs, svc, strict=True):
            level = bisect.bisect_right(thresholds, attained + _TOL)  # queue_levels of one job
            self.service[j], self.level[j], self.state[j] = attained, level, WAITING
            self.wait_need[level] += self._gpus[j]
        self.num_waiting += len(jobs)
        self.waiting.note(jobs)

    def _push(self, job: int, level: int) -> None:
        threshold = self._threshold_list[level]
        if threshold < np.inf:
            when = (threshold - float(self.base[job])) / self._gpus[job]
            heapq.heappush(self._crossings, (when, job, self._stint[job]))
