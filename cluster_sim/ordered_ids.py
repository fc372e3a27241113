"""An insertion-ordered set of job ids whose members come out as a numpy array without a Python loop.

The simulator's queue holds thousands of jobs at realistic load and every scheduling point hands it to
the scheduler; a dict turned into a list and then an array costs a Python step per queued job at every
event. Here adding and removing are O(1) and :meth:`OrderedIds.array` is one vectorised pass over an
append-only log, compacted when dead entries outnumber live ones; when the members are one contiguous
run of the log (a queue that only loses its oldest members), it is a view without any pass.
"""

from __future__ import annotations

import numpy as np


class OrderedIds:
    """Ids in ``0..capacity-1``, in order of (re)insertion.

    Each log entry carries an alive flag, so the members are one boolean selection over the log from the
    first live entry on: the oldest members leave first in a queue, and the dead entries before them
    are skipped rather than scanned.
    """

    def __init__(self, capacity: int) -> None:
        self._slot = np.full(capacity, -1, dtype=np.int64)  # log position of each member's entry, -1 if out
        self._log = np.empty(64, dtype=np.int64)
        self._alive = np.zeros(64, dtype=bool)
        self._n = 0  # log entries used (live and dead)
        self._head = 0  # no live entry before this one
        self._size = 0
        self._cache: np.ndarray | None = None

    def __len__(self) -> int:
        return self._size

    def __bool__(self) -> bool:
        return self._size > 0

    def __contains__(self, j: int) -> bool:
        return self._slot[j] >= 0

    def add(self, j: int) -> None:
        """Insert ``j`` at the end (it must not be a member)."""
        if self._n == len(self._log):
            self._compact()
            if self._n == len(self._log):
                self._log = np.concatenate([self._log, np.empty(len(self._log), dtype=np.int64)])
                self._alive = np.concatenate([self._alive, np.zeros(len(self._alive), dtype=bool)])
        self._log[self._n] = j
        self._alive[self._n] = True
        self._slot[j] = self._n
        self._n += 1
        self._size += 1
        self._cache = None

    def remove(self, j: int) -> None:
        """Take member ``j`` out."""
        at = self._slot[j]
        if at < 0:
            raise KeyError(j)
        self._alive[at] = False
        self._slot[j] = -1
        self._size -= 1
        self._cache = None

    def array(self) -> np.ndarray:
        """The members in insertion order, as a read-only int64 array (valid until the next change)."""
        if self._cache is None:
            if 2 * self._size + 64 < self._n:
                self._compact()
            head, n, alive = self._head, self._n, self._alive
            while head < n and not alive[head]:
                head += 1
            self._head = head
            # no hole after the head (a queue served in order): a view, no copy
            live = self._log[head:n] if n - head == self._size else self._log[head:n][alive[head:n]]
            live.flags.writeable = False
            self._cache = live
        return self._cache

    def _compact(self) -> None:
        """Live entries to the front of a new log (never in place: arrays handed out may be views)."""
        n = self._n
        live = self._log[:n][self._alive[:n]]
        self._log = np.empty(len(self._log), dtype=np.int64)
        self._log[: len(live)] = live
        self._alive[: len(live)] = True
        self._alive[len(live) : n] = False
        self._slot[live] = np.arange(len(live))
        self._n = len(live)
        self._head = 0
