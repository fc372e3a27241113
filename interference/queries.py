"""Turning co-location queries into flat arrays, and caching answers per query.

The simulator asks about the same (job, neighbour set) combinations again and again; both interference
models therefore answer through :class:`FactorCache`, which computes only the queries it has not seen,
all at once, through a vectorised ``compute`` function. Callers that ask at every event (the simulator,
the agents' candidate predictions) go one step further with :class:`KeyedFactors`: co-locations as tuples
of small ints, so that a repeated one costs a dict lookup and no query object is built.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from interference.base import CoLocation, JobDescriptor, Sharing
from interference.features import JobColumns

_SHARING = tuple(Sharing)  # by value


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


class KeyedFactors:
    """A model's factors for co-locations given as integer keys, for callers that ask at every event.

    Descriptors get small codes (:meth:`code`; a trace has a few dozen distinct ones). A key is
    ``(job code, *sorted(neighbour code * 3 + sharing level))``, so equal neighbour sets are one key and
    the model sees neighbours in that order. A ``pure`` model's answers are memoised by key (``memoise``: also
    another's, whose owner calls :meth:`forget` whenever its answers change); misses go to the model as
    :class:`FlatQueries` when it offers ``flat_factors``, else as :class:`CoLocation`s.
    """

    def __init__(self, model, max_entries: int = 1_000_000, memoise: bool | None = None) -> None:
        self.model = model
        self._flat = getattr(model, "flat_factors", None)
        memoise = getattr(model, "pure", False) if memoise is None else memoise
        self._memo: dict[tuple[int, ...], float] | None = {} if memoise else None
        self._codes: dict[JobDescriptor, int] = {}
        self.descriptors: list[JobDescriptor] = []
        self.max_entries = max_entries

    def code(self, descriptor: JobDescriptor) -> int:
        c = self._codes.get(descriptor)
        if c is None:
            c = self._codes[descriptor] = len(self.descriptors)
            self.descriptors.append(descriptor)
        return c

    def forget(self) -> None:
        """Drop the memoised answers (the model's answers changed); the codes stay."""
        if self._memo is not None:
            self._memo.clear()

    def __call__(self, keys: Sequence[tuple[int, ...]]) -> np.ndarray:
        out = np.empty(len(keys), dtype=np.float64)
        memo = self._memo
        if memo is None:
            if keys:
                out[:] = self._ask(list(keys))
            return out
        missing: dict[tuple[int, ...], list[int]] = {}
        for i, key in enumerate(keys):
            value = memo.get(key)
            if value is not None:
                out[i] = value
            elif key in missing:
                missing[key].append(i)
            else:
                missing[key] = [i]
        if missing:
            asked = list(missing)
            values = self._ask(asked).tolist()
            for rows, value in zip(missing.values(), values, strict=True):
                out[rows] = value
            if len(memo) + len(asked) > self.max_entries:
                memo.clear()
            memo.update(zip(asked, values, strict=True))
        return out

    def _ask(self, keys: list[tuple[int, ...]]) -> np.ndarray:
        descs = self.descriptors
        if self._flat is not None:
            nbr: list[int] = []
            nbr_query: list[int] = []
            for q, key in enumerate(keys):
                nbr.extend(key[1:])
                nbr_query.extend([q] * (len(key) - 1))
            items = np.array(nbr, dtype=np.int64)
            flat = FlatQueries(
                descriptors=descs,
                job=np.array([key[0] for key in keys], dtype=np.int64),
                nbr=items // 3,
                nbr_query=np.array(nbr_query, dtype=np.int64),
                nbr_level=items % 3,
            )
            return np.asarray(self._flat(flat), dtype=np.float64)
        queries = [CoLocation(descs[key[0]], tuple((descs[c // 3], _SHARING[c % 3]) for c in key[1:])) for key in keys]
        return np.asarray(self.model.throughput_factors(queries), dtype=np.float64)
