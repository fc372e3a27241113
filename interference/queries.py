"""Turning co-location queries into flat arrays, and caching answers per query.

The simulator asks about the same (job, neighbour set) combinations again and again; both interference
models therefore answer through :class:`FactorCache`, which computes only the queries it has not seen,
all at once, through a vectorised ``compute`` function.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from interference.base import CoLocation, JobDescriptor
from interference.features import JobColumns


@dataclass(frozen=True, eq=False)
class FlatQueries:
    """Queries as index arrays into a list of distinct descriptors.

    ``job[q]`` is the descriptor index of query ``q``'s job; neighbour row ``m`` belongs to query
    ``nbr_query[m]``, is descriptor ``nbr[m]`` and is shared at level ``nbr_level[m]``.
    """

    descriptors: list[JobDescriptor]
    job: np.ndarray  # int64 (Q,)
    nbr: np.ndarray  # int64 (M,)
    nbr_query: np.ndarray  # int64 (M,)
    nbr_level: np.ndarray  # int64 (M,)

    @property
    def num_queries(self) -> int:
        return len(self.job)

    def columns(self) -> JobColumns:
        """The descriptors as columns (built on first use: a batch that needs only memoised per-job
        scalars never builds them)."""
        return self._columns

    @cached_property
    def _columns(self) -> JobColumns:
        return JobColumns.from_descriptors(self.descriptors)


def flatten(queries: Sequence[CoLocation]) -> FlatQueries:
    index: dict[JobDescriptor, int] = {}
    descriptors: list[JobDescriptor] = []

    def idx(d: JobDescriptor) -> int:
        i = index.get(d)
        if i is None:
            i = index[d] = len(descriptors)
            descriptors.append(d)
        return i

    job = np.empty(len(queries), dtype=np.int64)
    nbr: list[int] = []
    nbr_query: list[int] = []
    nbr_level: list[int] = []
    for q, query in enumerate(queries):
        job[q] = idx(query.job)
        for d, level in query.neighbours:
            nbr.append(idx(d))
            nbr_query.append(q)
            nbr_level.append(int(level))
    return FlatQueries(
        descriptors=descriptors,
        job=job,
        nbr=np.array(nbr, dtype=np.int64),
        nbr_query=np.array(nbr_query, dtype=np.int64),
        nbr_level=np.array(nbr_level, dtype=np.int64),
    )


class FactorCache:
    """Memoises ``compute(queries) -> factors`` per query; misses are computed in one batch."""

    def __init__(self, compute: Callable[[list[CoLocation]], np.ndarray], max_entries: int = 1_000_000):
        self._compute = compute
        self._store: dict[CoLocation, float] = {}
        self.max_entries = max_entries
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._store)

    def clear(self) -> None:
        self._store.clear()

    def __call__(self, queries: Sequence[CoLocation]) -> np.ndarray:
        out = np.empty(len(queries), dtype=np.float64)
        get = self._store.get
        miss_pos: list[int] = []
        for i, q in enumerate(queries):
            v = get(q)
            if v is None:
                miss_pos.append(i)
            else:
                out[i] = v
        if miss_pos:
            unique: dict[CoLocation, int] = {}
            for i in miss_pos:
                unique.setdefault(queries[i], len(unique))
            todo = list(unique)
            values = np.asarray(self._compute(todo), dtype=np.float64)
            if len(self._store) + len(todo) > self.max_entries:
                self._store.clear()
            self._store.update(zip(todo, values.tolist(), strict=True))
            for i in miss_pos:
                out[i] = values[unique[queries[i]]]
        self.hits += len(queries) - len(miss_pos)
        self.misses += len(miss_pos)
        return out
