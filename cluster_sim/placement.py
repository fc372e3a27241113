"""Placement strategies: which free GPUs a job gets.

Every strategy is a function ``(view, job, n, free=None) -> np.ndarray | None`` that returns ``n``
distinct free GPU ids (sorted) or ``None`` when fewer than ``n`` GPUs are free. Strategies never fail
for another reason: each falls back to "anywhere", so a scheduler can tell "cannot start now" from the
free-GPU count alone.

A scheduler that starts several jobs in one round passes a :class:`FreePool`, its working copy of the
free GPUs, and calls :meth:`FreePool.take` after each placement, because the view only changes once the
round's decisions are applied. The pool keeps free counts per server, rack and pod up to date
incrementally, so one placement costs a few vectorised passes over the server array (10,240 entries at
dc-10k) and never a Python loop over GPUs.

The GPUs of a server, the servers of a rack and the racks of a pod are contiguous ranges
(:mod:`topology.view`), which the padded index tables below rely on.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np

from cluster_sim.protocol import SchedulerView
from topology.view import FEW_GPUS, ClusterView, index_lists

Placement = Callable[..., "np.ndarray | None"]

_BIG = np.iinfo(np.int64).max // 4


@dataclass(frozen=True, eq=False)
class _TopoIndex:
    """Lookup tables derived once per ClusterView (cached weakly by identity)."""

    rack_servers: np.ndarray  # (R, max servers per rack) server ids, padded with S (a sentinel)
    pod_racks: np.ndarray  # (P, max racks per pod) rack ids, padded with R (a sentinel)
    num_sockets: int
    socket_server: np.ndarray  # (K,) server of each socket
    max_server_gpus: int
    max_socket_gpus: int
    multi_socket: bool  # some server has more than one socket (otherwise socket == server)
    racks_nonempty: bool  # every rack has a server, so np.add.reduceat sums racks


_INDEX: weakref.WeakKeyDictionary[ClusterView, _TopoIndex] = weakref.WeakKeyDictionary()


def _padded_ranges(first: np.ndarray, count: np.ndarray, sentinel: int) -> np.ndarray:
    width = int(count.max()) if len(count) else 0
    cols = np.arange(width)
    table = first[:, None].astype(np.int64) + cols[None, :]
    return np.where(cols[None, :] < count[:, None], table, sentinel).astype(np.int64)


def topo_index(topo: ClusterView) -> _TopoIndex:
    idx = _INDEX.get(topo)
    if idx is None:
        num_sockets = int(topo.gpu_socket.max()) + 1 if topo.num_gpus else 0
        socket_server = np.zeros(num_sockets, dtype=np.int64)
        socket_server[topo.gpu_socket] = topo.gpu_server
        idx = _TopoIndex(
            rack_servers=_padded_ranges(topo.rack_first_server, topo.rack_num_servers, topo.num_servers),
            pod_racks=_padded_ranges(topo.pod_first_rack, topo.pod_num_racks, topo.num_racks),
            num_sockets=num_sockets,
            socket_server=socket_server,
            max_server_gpus=int(topo.server_num_gpus.max()),
            max_socket_gpus=int(np.bincount(topo.gpu_socket).max()),
            multi_socket=num_sockets > topo.num_servers,
            racks_nonempty=bool((topo.rack_num_servers > 0).all()),
        )
        _INDEX[topo] = idx
    return idx


class FreeCounts:
    """Free GPUs per server, rack and pod and servers per free count, kept up to date one server at a time.

    The simulator owns one and changes it at every start and stop, so that a :class:`FreePool` can
    borrow its arrays instead of summing 10,240 servers at every scheduling point. ``server`` and
    ``rack`` carry one extra sentinel entry (always 0) so padded index tables can gather without masking.

    Given the owner's GPU-to-job array (``gpu_job``), it also lends one pool per round (see
    :meth:`next_round`) scratch copies of all these arrays to write into: copying 81,920 GPUs at every
    round that starts a job would cost more than the round. The scratch is brought back to the truth at
    the next loan by rewriting only the GPUs and servers that changed since the last one.
    """

    def __init__(self, topo: ClusterView, server_free: np.ndarray, gpu_job: np.ndarray | None = None) -> None:
        s, r = topo.num_servers, topo.num_racks
        self._rack_of, self._pod_of = topo.server_rack, topo.rack_pod
        sf = self.server = np.zeros(s + 1, dtype=np.int64)
        sf[:s] = server_free
        self.rack = np.zeros(r + 1, dtype=np.int64)
        if topo_index(topo).racks_nonempty:
            self.rack[:r] = np.add.reduceat(sf[:s], topo.rack_first_server)
        else:
            self.rack[:r] = np.bincount(topo.server_rack, weights=sf[:s], minlength=r)
        self.pod = np.bincount(topo.rack_pod, weights=self.rack[:r], minlength=topo.num_pods).astype(np.int64)
        self.hist = np.bincount(sf[:s], minlength=topo_index(topo).max_server_gpus + 1)  # servers per free count
        self.gpu_job = gpu_job
        self._scratch: tuple[np.ndarray, ...] | None = None  # (gpu_job, server, rack, pod, hist)
        self._stale_gpus: list[np.ndarray] = []  # GPUs and servers where the scratch may differ from the truth
        self._stale_servers: list[int] = []
        self._stale_size = 0
        self._round = 0
        self._lent_round = -1

    def set_server(self, s: int, free: int) -> None:
        old = int(self.server[s])
        self.server[s] = free
        self.hist[old] -= 1
        self.hist[free] += 1
        r = self._rack_of[s]
        self.rack[r] += free - old
        self.pod[self._pod_of[r]] += free - old
        if self._scratch is not None:
            self._stale_servers.append(s)

    def note_gpus(self, gpus: np.ndarray) -> None:
        """The owner changed these GPUs' entries in ``gpu_job`` (or a borrower wrote them in the scratch)."""
        if self._scratch is not None:
            self._stale_gpus.append(gpus)
            self._stale_size += len(gpus)
            if self._stale_size > len(self._scratch[0]) // 8:  # cheaper to copy everything at the next loan
                self._scratch = None

    def note_servers(self, servers: list[int]) -> None:
        if self._scratch is not None:
            self._stale_servers.extend(servers)

    def next_round(self) -> None:
        """A new scheduling round: pools of earlier rounds are dead, so the scratch may be lent again."""
        self._round += 1

    def lend(self) -> tuple[np.ndarray, ...] | None:
        """Scratch (gpu_job, server, rack, pod, hist) equal to the truth, to the first pool that writes in
        this round; None for any other (it copies), or when no GPU-to-job array was given."""
        if self.gpu_job is None or self._lent_round == self._round:
            return None
        self._lent_round = self._round
        if self._scratch is None:
            self._scratch = (
                np.array(self.gpu_job, dtype=np.int32), self.server.copy(), self.rack.copy(), self.pod.copy(),
                self.hist.copy(),
            )  # fmt: skip
        else:
            gpu_job, server, rack, pod, hist = self._scratch
            if self._stale_gpus:
                stale = np.concatenate(self._stale_gpus)
                gpu_job[stale] = self.gpu_job[stale]
            if self._stale_servers:
                stale = np.array(self._stale_servers, dtype=np.int64)
                server[stale] = self.server[stale]
            rack[:], pod[:], hist[:] = self.rack, self.pod, self.hist
        self._stale_gpus, self._stale_servers, self._stale_size = [], [], 0
        return self._scratch


class FreePool:
    """A scheduler's working copy of the free GPUs during one scheduling round.

    ``server_free`` and ``rack_free`` carry one extra sentinel entry (always 0) so padded index tables
    can gather from them without masking. A view that keeps a :class:`FreeCounts` as ``free_counts``
    (the simulator does) lends its arrays; they and the GPU-to-job array are copied on the first change
    only, so a round that starts nothing costs O(1). Per-socket counts, per-model occupancy and per-rack
    sorted free counts are built on first use and then kept up to date, so a round pays only for what
    its placements read.
    """

    def __init__(self, view: SchedulerView) -> None:
        topo = view.topo
        self.view = view
        self.topo = topo
        self.index = topo_index(topo)
        self.lists = index_lists(topo)
        self.gpu_job = view.gpu_job  # replaced by a private copy on the first take/release
        self._own = False
        counts = getattr(view, "free_counts", None)
        if counts is None:
            counts = FreeCounts(topo, view.server_free)
            self._own_counts = True
        else:
            self._own_counts = False  # borrowed: copied (or the scratch leased) on the first change
        self._counts = counts
        self._lease: FreeCounts | None = None  # the counts whose scratch this pool writes into
        self.server_free, self.rack_free, self.pod_free = counts.server, counts.rack, counts.pod
        self.hist = counts.hist  # servers per free count
        self.num_free = int(view.num_free)
        self._socket_free: np.ndarray | None = None
        self._socket_hist = np.zeros(0, dtype=np.int64)
        self._model_gpus: dict[int, np.ndarray] = {}
        self._rack_cum: np.ndarray | None = None

    @property
    def socket_free(self) -> np.ndarray:
        """(K,) free GPUs per socket (one pass over the GPUs on first use)."""
        if self._socket_free is None:
            free = self.gpu_job < 0
            self._socket_free = np.bincount(self.topo.gpu_socket[free], minlength=self.index.num_sockets)
            self._socket_hist = np.bincount(self._socket_free, minlength=self.index.max_socket_gpus + 1)
        return self._socket_free

    @property
    def rack_cum(self) -> np.ndarray:
        """(max servers per rack, R): per rack, cumulative sums of its server free counts, largest first.

        ``(rack_cum[:, r] < n).sum() + 1`` is the fewest servers of rack ``r`` that hold ``n`` GPUs. Racks
        are columns so that the sum runs over a few long contiguous rows.
        """
        if self._rack_cum is None:
            self._rack_cum = np.ascontiguousarray(self._sorted_cum(self.index.rack_servers).T)
        return self._rack_cum

    def _sorted_cum(self, rows: np.ndarray) -> np.ndarray:
        return np.cumsum(np.sort(self.server_free[rows], axis=1)[:, ::-1], axis=1)

    def server_model_gpus(self, model: int) -> np.ndarray:
        """(S,) GPUs per server held by jobs of workload model ``model`` (running or taken this round)."""
        counts = self._model_gpus.get(model)
        if counts is None:
            held = np.flatnonzero(self.gpu_job >= 0)
            same = held[self.view.jobs.model[self.gpu_job[held]] == model]
            counts = np.bincount(self.topo.gpu_server[same], minlength=self.topo.num_servers)
            self._model_gpus[model] = counts
        return counts

    def is_free(self, gpus: np.ndarray) -> bool:
        return bool((self.gpu_job[gpus] < 0).all())

    def take(self, gpus: np.ndarray, job: int) -> None:
        """Mark ``gpus`` as held by ``job``; raises if one is not free or is named twice."""
        if gpus is None:  # what a placement returns where it finds no room
            raise ValueError(f"cannot give GPUs to job {job}: the placement found none (None); leave the job waiting")
        gpus = np.asarray(gpus)
        ids = gpus.tolist()
        held = self.gpu_job
        if ids and (gpus.dtype.kind not in "iu" or min(ids) < 0 or max(ids) >= len(held)):
            raise ValueError(
                f"cannot give GPUs {ids[:8]}{'...' * (len(ids) > 8)} to job {job}: GPU ids are integers from 0 to "
                f"{len(held) - 1} on this cluster"
            )
        free = all(held[g] < 0 for g in ids) if len(ids) <= FEW_GPUS else self.is_free(gpus)
        if not free or len(set(ids)) != len(ids):
            raise ValueError(f"cannot give GPUs {ids} to job {job}: some are taken or repeated")
        self._write(gpus, ids, job)
        self._update(gpus, ids, job, -1)

    def release(self, gpus: np.ndarray, job: int) -> None:
        """Return the GPUs of ``job`` (a preemption decided this round) to the pool."""
        gpus = np.asarray(gpus)
        ids = gpus.tolist()
        held = self.gpu_job
        if not (all(held[g] == job for g in ids) if len(ids) <= FEW_GPUS else (held[gpus] == job).all()):
            raise ValueError(f"cannot release GPUs {ids} of job {job}: it does not hold them all")
        self._write(gpus, ids, -1)
        self._update(gpus, ids, job, +1)

    def _write(self, gpus: np.ndarray, ids: list[int], value: int) -> None:
        if not self._own_counts:
            scratch = self._counts.lend() if not self._own else None
            if scratch is not None:
                self.gpu_job, self.server_free, self.rack_free, self.pod_free, self.hist = scratch
                self._lease = self._counts
                self._own = True
            else:
                self.server_free, self.rack_free = self.server_free.copy(), self.rack_free.copy()
                self.pod_free, self.hist = self.pod_free.copy(), self.hist.copy()
            self._own_counts = True
        if not self._own:
            self.gpu_job = np.array(self.gpu_job, dtype=np.int32)
            self._own = True
        if len(ids) <= FEW_GPUS:
            held = self.gpu_job
            for g in ids:
                held[g] = value
        else:
            self.gpu_job[gpus] = value
        if self._lease is not None:
            self._lease.note_gpus(gpus)

    def _update(self, gpus: np.ndarray, ids: list[int], job: int, sign: int) -> None:
        topo, lists = self.topo, self.lists
        gpu_server = lists.gpu_server
        s = gpu_server[ids[0]]
        if len(ids) <= FEW_GPUS and all(gpu_server[g] == s for g in ids):
            # one server, the common case: scalar updates, without numpy's per-call overhead
            servers: list[int] | np.ndarray = [s]
            r = lists.server_rack[s]
            racks: list[int] | np.ndarray = [r]
            c = sign * len(ids)
            sf, hist = self.server_free, self.hist
            old = int(sf[s])
            hist[old] -= 1
            sf[s] = old + c
            hist[old + c] += 1
            self.rack_free[r] += c
            self.pod_free[lists.rack_pod[r]] += c
            counts: np.ndarray | list[int] = [len(ids)]
        else:
            servers, counts = _group_counts(topo.gpu_server[gpus])
            racks = topo.server_rack[servers]
            np.subtract.at(self.hist, self.server_free[servers], 1)
            self.server_free[servers] += sign * counts
            np.add.at(self.hist, self.server_free[servers], 1)
            np.add.at(self.rack_free, racks, sign * counts)
            np.add.at(self.pod_free, topo.rack_pod[racks], sign * counts)
        if self._lease is not None:
            self._lease.note_servers(servers if isinstance(servers, list) else servers.tolist())
        self.num_free += sign * len(ids)
        if self._socket_free is not None:
            socks, per = _group_counts(topo.gpu_socket[gpus])
            np.subtract.at(self._socket_hist, self._socket_free[socks], 1)
            self._socket_free[socks] += sign * per
            np.add.at(self._socket_hist, self._socket_free[socks], 1)
        if self._rack_cum is not None:
            touched = np.asarray(racks) if len(racks) == 1 else np.unique(racks)
            self._rack_cum[:, touched] = self._sorted_cum(self.index.rack_servers[touched]).T
        if self._model_gpus:
            model = int(self.view.jobs.model[job])
            if model in self._model_gpus:
                self._model_gpus[model][servers] -= sign * np.asarray(counts)

    def fullest_server_with(self, n: int) -> int:
        """The server with the fewest free GPUs that still has ``n`` (lowest id on ties), or -1."""
        return _first_with(self.hist, self.server_free, n)

    def fullest_socket_with(self, n: int) -> int:
        """The socket with the fewest free GPUs that still has ``n`` (lowest id on ties), or -1."""
        free = self.socket_free
        return _first_with(self._socket_hist, free, n)


def _group_counts(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(keys, return_counts=True)``, with a fast path for the common one-server/socket job."""
    if keys[0] == keys[-1] and (keys == keys[0]).all():
        return keys[:1], np.array([len(keys)])
    return np.unique(keys, return_counts=True)


def _first_with(hist: np.ndarray, free: np.ndarray, n: int) -> int:
    """Lowest index whose ``free`` is the smallest value >= n, using ``hist`` (count per value)."""
    for v in range(n, len(hist)):
        if hist[v]:
            return int(np.argmax(free == v))
    return -1


def _pool(view: SchedulerView, n: int, free: FreePool | None) -> FreePool | None:
    """The pool to place from, or None when ``n`` GPUs are not free."""
    if n < 1:
        raise ValueError(f"a job needs at least 1 GPU, got n={n}")
    pool = FreePool(view) if free is None else free
    return pool if pool.num_free >= n else None


# ------------------------------------------------------------------ building blocks
def _free_in_server(pool: FreePool, s: int) -> np.ndarray:
    first = int(pool.topo.server_first_gpu[s])
    return np.flatnonzero(pool.gpu_job[first : first + int(pool.topo.server_num_gpus[s])] < 0) + first


def _pick_in_server(pool: FreePool, s: int, k: int) -> np.ndarray:
    """``k`` free GPUs of server ``s`` spanning as few sockets as possible (best-fit socket first)."""
    free = _free_in_server(pool, s)
    if len(free) == k or not pool.index.multi_socket:
        return free[:k]
    socks = pool.topo.gpu_socket[free]
    if (socks == socks[0]).all():
        return free[:k]
    uniq, counts = np.unique(socks, return_counts=True)
    fits = counts >= k
    if fits.any():
        best = uniq[fits][np.argmin(counts[fits])]
        return free[socks == best][:k]
    picked: list[np.ndarray] = []
    left = k
    for i in np.argsort(-counts, kind="stable"):
        part = free[socks == uniq[i]][:left]
        picked.append(part)
        left -= len(part)
        if left == 0:
            break
    return np.sort(np.concatenate(picked))


def _gather(pool: FreePool, servers: np.ndarray, takes: np.ndarray) -> np.ndarray:
    """``takes[i]`` free GPUs from each ``servers[i]``, sorted.

    A server giving only part of its free GPUs gives them from as few sockets as possible; with many
    servers the lowest free ids of each are selected in one vectorised pass instead.
    """
    topo = pool.topo
    servers = np.asarray(servers, dtype=np.int64)
    takes = np.asarray(takes, dtype=np.int64)
    partial = takes < pool.server_free[servers]
    if len(servers) <= 4 or (pool.index.multi_socket and (takes[partial] > 1).any()):
        parts = []
        for s, k, p in zip(servers.tolist(), takes.tolist(), partial.tolist(), strict=True):
            if k > 0:
                parts.append(_pick_in_server(pool, s, k) if p else _free_in_server(pool, s))
        return np.sort(np.concatenate(parts)).astype(np.int32)
    size = topo.server_num_gpus[servers].astype(np.int64)
    seg = np.cumsum(size) - size
    gids = np.arange(int(size.sum())) - np.repeat(seg - topo.server_first_gpu[servers], size)
    free = pool.gpu_job[gids] < 0
    rank = np.cumsum(free)
    rank_in_server = rank - np.repeat(rank[seg] - free[seg], size)
    picked = gids[free & (rank_in_server <= np.repeat(takes, size))]
    return np.sort(picked).astype(np.int32)


def _best_fit(values: np.ndarray, n: int) -> int:
    """Index of the smallest value >= n (lowest index on ties), or -1."""
    v = np.where(values >= n, values, _BIG)
    i = int(np.argmin(v))
    return i if v[i] != _BIG else -1


def _largest_first(ids: np.ndarray, free: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Fewest groups among ``ids`` that hold ``n``: largest first, the last piece from the best-fit group.

    Returns the chosen ids and how many GPUs to take from each. Requires ``free[ids].sum() >= n``.
    A rack's few servers are cheaper to sort in Python than through a chain of numpy calls.
    """
    f = free[ids]
    if len(ids) <= 64:
        pairs = sorted(zip((-f).tolist(), ids.tolist(), strict=True))
        chosen, takes, got = [], [], 0
        for i, (neg, g) in enumerate(pairs):
            if got - neg >= n:  # this group would complete the job: use the best-fit one instead
                rest = n - got
                last = min((-m, h) for m, h in pairs[i:] if -m >= rest)[1]
                return np.array([*chosen, last], dtype=np.int64), np.array([*takes, rest], dtype=np.int64)
            chosen.append(g)
            takes.append(-neg)
            got -= neg
        raise AssertionError("fewer free GPUs than requested")  # callers check the total first
    order = np.argsort(-f, kind="stable")
    cs = np.cumsum(f[order])
    need = int(np.searchsorted(cs, n)) + 1
    full = order[: need - 1]
    rest = n - (int(cs[need - 2]) if need > 1 else 0)
    tail = order[need - 1 :]
    last = tail[_best_fit(f[tail], rest)]
    return np.append(ids[full], ids[last]), np.append(f[full], rest)


def _groups_needed(table: np.ndarray, free: np.ndarray, cand: np.ndarray, n: int) -> np.ndarray:
    """For each candidate row of a padded index table, how many largest members it takes to hold ``n``."""
    m = np.sort(free[table[cand]], axis=1)[:, ::-1]
    return (np.cumsum(m, axis=1) < n).sum(axis=1) + 1


def _servers_of_racks(pool: FreePool, racks: np.ndarray) -> np.ndarray:
    rows = pool.index.rack_servers[racks].ravel()
    return rows[rows < pool.topo.num_servers]


def _multi_server(pool: FreePool, n: int) -> np.ndarray:
    """Lowest span level for a job that no single server holds: one rack, else one pod, else anywhere.

    In a rack, the rack whose free GPUs hold ``n`` with the fewest servers (ties: fewest free GPUs, then
    lowest id); in a pod or across pods, the fewest racks, then the fewest servers within them.
    """
    topo, idx = pool.topo, pool.index
    r = topo.num_racks
    if pool.rack_free.max() >= n:
        cum = pool.rack_cum
        need = (cum < n).view(np.int8).sum(axis=0, dtype=np.int64) + 1
        key = np.where(cum[-1] >= n, need * (topo.num_gpus + 1) + pool.rack_free[:r], _BIG)
        rack = int(np.argmin(key))
        servers, takes = _largest_first(_servers_of_racks(pool, np.array([rack])), pool.server_free, n)
        return _gather(pool, servers, takes)
    cand = np.flatnonzero(pool.pod_free >= n)
    if len(cand):  # one pod: the fewest racks, then the fewest free GPUs
        need = _groups_needed(idx.pod_racks, pool.rack_free, cand, n)
        pod = int(cand[np.argmin(need * (topo.num_gpus + 1) + pool.pod_free[cand])])
        first = int(topo.pod_first_rack[pod])
        region = np.arange(first, first + int(topo.pod_num_racks[pod]))
    else:
        region = np.arange(r)
    racks, _ = _largest_first(region, pool.rack_free, n)
    servers, takes = _largest_first(_servers_of_racks(pool, np.sort(racks)), pool.server_free, n)
    return _gather(pool, servers, takes)


# ------------------------------------------------------------------ strategies
def consolidate(view: SchedulerView, job: int, n: int, free: FreePool | None = None) -> np.ndarray | None:
    """Fewest servers at the lowest span level: the fullest server that holds ``n``, else one rack, one
    pod, anywhere (whole servers largest first). Packs tightly and keeps synchronisation local."""
    pool = _pool(view, n, free)
    if pool is None:
        return None
    s = pool.fullest_server_with(n)
    if s >= 0:
        return _pick_in_server(pool, s, n).astype(np.int32)
    return _multi_server(pool, n)


def closest_gpus(view: SchedulerView, job: int, n: int, free: FreePool | None = None) -> np.ndarray | None:
    """TopDRL's heuristic: the GPU set at the smallest topology distance, i.e. the lowest span level and
    then the fewest servers. Unlike :func:`consolidate`, a socket (PCIe switch) that holds the whole job
    is preferred to a fuller server where it would cross the CPU interconnect."""
    pool = _pool(view, n, free)
    if pool is None:
        return None
    if pool.index.multi_socket and n <= pool.index.max_socket_gpus:
        k = pool.fullest_socket_with(n)
        if k >= 0:
            s = int(pool.index.socket_server[k])
            gpus = _free_in_server(pool, s)
            return gpus[pool.topo.gpu_socket[gpus] == k][:n].astype(np.int32)
    s = pool.fullest_server_with(n)
    if s >= 0:
        return _pick_in_server(pool, s, n).astype(np.int32)
    return _multi_server(pool, n)


def spread(view: SchedulerView, job: int, n: int, free: FreePool | None = None) -> np.ndarray | None:
    """Load balancing: one GPU on each of the ``n`` servers with the most free GPUs (ties: lowest id);
    when fewer servers have a free GPU, as even a share per server as possible."""
    pool = _pool(view, n, free)
    if pool is None:
        return None
    sf = pool.server_free[: pool.topo.num_servers]
    hist = pool.hist
    if n <= len(sf) - hist[0]:  # enough servers with a free GPU: the n with the most
        above = np.cumsum(hist[::-1])[::-1]  # above[v]: servers with at least v free
        v = int(np.flatnonzero(above >= n)[-1])  # servers with more than v free are fewer than n
        more = np.flatnonzero(sf > v)
        ties = np.flatnonzero(sf == v)[: n - len(more)]
        chosen = np.concatenate([more, ties])
        return _gather(pool, chosen, np.ones(n, dtype=np.int64))
    ids = np.flatnonzero(sf > 0)
    f = sf[ids]
    level = 1  # water-filling: take up to level-1 from every server, one more from the fullest
    while np.minimum(f, level).sum() < n:
        level += 1
    takes = np.minimum(f, level - 1)
    extra = n - int(takes.sum())
    room = np.flatnonzero(f >= level)
    room = room[np.lexsort((ids[room], -f[room]))]
    takes[room[:extra]] += 1
    return _gather(pool, ids, takes)


def first_fit(view: SchedulerView, job: int, n: int, free: FreePool | None = None) -> np.ndarray | None:
    """The ``n`` free GPUs with the lowest ids."""
    pool = _pool(view, n, free)
    if pool is None:
        return None
    topo = pool.topo
    last = int(np.searchsorted(np.cumsum(pool.server_free[: topo.num_servers]), n))
    end = int(topo.server_first_gpu[last]) + int(topo.server_num_gpus[last])
    return np.flatnonzero(pool.gpu_job[:end] < 0)[:n].astype(np.int32)


def best_fit(view: SchedulerView, job: int, n: int, free: FreePool | None = None) -> np.ndarray | None:
    """The server with the fewest free GPUs that holds ``n``; otherwise pieces from the servers with the
    fewest free GPUs first, filling fragmented holes and keeping emptier servers for larger jobs."""
    pool = _pool(view, n, free)
    if pool is None:
        return None
    sf = pool.server_free[: pool.topo.num_servers]
    s = pool.fullest_server_with(n)
    if s >= 0:
        return _pick_in_server(pool, s, n).astype(np.int32)
    counts = pool.hist  # servers per free count
    capacity = np.cumsum(counts * np.arange(len(counts)))
    v = int(np.searchsorted(capacity, n))  # smallest free count at which the holes hold n
    small = np.flatnonzero((sf > 0) & (sf < v))
    rest = n - int(capacity[v - 1])
    k = -(-rest // v)
    tops = np.flatnonzero(sf == v)[:k]
    servers = np.concatenate([small, tops])
    takes = sf[servers].copy()
    takes[-1] -= int(takes.sum()) - n
    return _gather(pool, servers, takes)


def most_free(view: SchedulerView, job: int, n: int, free: FreePool | None = None) -> np.ndarray | None:
    """As many GPUs as possible from the server with the most free GPUs (ties: lowest id), then the next:
    the placement of Pollux's Tiresias baseline (adaptdl ``simulator/tiresias.py``)."""
    pool = _pool(view, n, free)
    if pool is None:
        return None
    sf = pool.server_free[: pool.topo.num_servers]
    order = np.argsort(-sf, kind="stable")  # most free first; a stable sort keeps the lowest id first
    counts = sf[order]
    k = int(np.searchsorted(np.cumsum(counts), n))  # servers 0..k hold n together
    takes = counts[: k + 1].copy()
    takes[-1] -= int(takes.sum()) - n
    return _gather(pool, order[: k + 1], takes)


def gandiva(view: SchedulerView, job: int, n: int, free: FreePool | None = None) -> np.ndarray | None:
    """Gandiva-style affinity packing: the fullest server that already runs jobs of the same model and
    has room, else an empty server (keeping unrelated models apart), else :func:`consolidate`.

    Gandiva groups similar jobs on the same servers so its packing and time-slicing see predictable,
    low interference; here only that placement preference is kept.
    """
    pool = _pool(view, n, free)
    if pool is None:
        return None
    topo = pool.topo
    if n <= pool.index.max_server_gpus:
        sf = pool.server_free[: topo.num_servers]
        same = pool.server_model_gpus(int(view.jobs.model[job])) > 0
        s = _best_fit(np.where(same, sf, 0), n)
        if s < 0:
            empty = sf == topo.server_num_gpus
            s = _best_fit(np.where(empty, sf, 0), n)
        if s >= 0:
            return _pick_in_server(pool, s, n).astype(np.int32)
    return consolidate(view, job, n, pool)


def random_gpus(
    view: SchedulerView, job: int, n: int, free: FreePool | None = None, *, rng: np.random.Generator
) -> np.ndarray | None:
    """``n`` free GPUs drawn uniformly at random with ``rng`` (a topology-blind baseline)."""
    pool = _pool(view, n, free)
    if pool is None:
        return None
    ids = np.flatnonzero(pool.gpu_job < 0)
    return np.sort(ids[rng.choice(len(ids), size=n, replace=False)]).astype(np.int32)


PLACEMENTS: dict[str, Placement] = {
    "consolidate": consolidate,
    "closest-gpus": closest_gpus,
    "spread": spread,
    "first-fit": first_fit,
    "best-fit": best_fit,
    "most-free": most_free,
    "gandiva": gandiva,
    "random": random_gpus,
}


def register_placement(name: str, placement: Placement, *, replace: bool = False) -> None:
    """Add a placement strategy ``(view, job, n, free=None) -> n sorted free GPU ids | None`` under
    ``name``. It then works wherever a built-in does (``fifo+NAME`` and every ORDERING+NAME).
    A strategy must return None only when fewer than ``n`` GPUs are free (see the module docstring)."""
    if not name or "+" in name or "," in name:
        raise ValueError(f"placement name {name!r} must be non-empty and contain no '+' or ','")
    if name in PLACEMENTS and not replace:
        raise ValueError(f"placement {name!r} is already registered; pass replace=True to override it")
    PLACEMENTS[name] = placement


def placement_names() -> list[str]:
    return sorted(PLACEMENTS)


def get_placement(name: str, rng: np.random.Generator | None = None) -> Placement:
    """The placement function called ``name``; ``random`` is bound to ``rng`` (required for it)."""
    if name not in PLACEMENTS:
        raise ValueError(f"unknown placement {name!r}; choose one of: {', '.join(placement_names())}")
    if name == "random":
        if rng is None:
            raise ValueError("placement 'random' needs a numpy Generator: pass rng=np.random.default_rng(seed)")
        return partial(random_gpus, rng=rng)
    return PLACEMENTS[name]
