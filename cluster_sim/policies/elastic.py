"""What every elastic policy shares: a periodic re-allocation of GPU counts, turned into placements and moves.

Each ``interval`` (60 s, as Pollux's simulator) an elastic policy chooses a GPU count for every active
job (its own :meth:`ElasticPolicy.allocate`), then this module places the counts and carries them out:

- **Placement.** Jobs whose count is unchanged keep their GPUs; the others go best-fit onto one node, or
  onto the emptiest nodes free of other multi-node jobs (at most ``max_nodes``, or the nodes a count needs where
  ``max_nodes`` full nodes cannot hold it: a rigid job of 192 GPUs on 8-GPU nodes); a count that cannot be
  placed is lowered (Pollux's rule of one multi-node job per node).
- **Moves.** A job that changes placement waits for the jobs now on its GPUs to move away first; a cycle
  of moves is broken by stopping one job, which frees its GPUs.
- **Batch size.** :meth:`ElasticPolicy.batch_for`: by default the job's own (:func:`kept_batch`), for
  policies that do not tune batch sizes.

Helpers every allocation uses: a job's fitted goodput function (:func:`goodput_function`), the GPU counts
it may be given (:func:`count_limits`), the goodput at a fixed batch rule (:func:`fixed_batch_goodput`)
and the greedy marginal-gain search over count tables (:func:`greedy_counts`).
"""

from __future__ import annotations

import heapq
import math
import time
import warnings
from collections.abc import Mapping

import numpy as np

from cluster_sim.goodput import GoodputFunction, fit_perf_params
from cluster_sim.policies.base import PolicyScheduler
from cluster_sim.protocol import (
    DONE,
    RUNNING,
    Decision,
    JobReport,
    Preempt,
    Resize,
    RigidWorkloadWarning,
    SchedulerView,
    SetBatch,
    Start,
)
from topology.view import index_lists

RESTART_DELAY = 30.0  # seconds a reallocation costs in Pollux's restart penalty
PINNED = {"ncf": (1, 32768)}  # Pollux's simulator keeps ncf on one GPU at this batch size
MAX_GPUS_PER_JOB = 64  # Pollux's cap on one job's GPUs
REPLACE_TRIES = 3  # searches per round when fragmentation lowers counts


class ElasticPolicy(PolicyScheduler):
    """Periodic elastic re-allocation; subclasses choose the counts (:meth:`allocate`) and batch sizes."""

    preemptive = True
    elastic = True  # the simulator lets its jobs resize and change batch size
    one_gpu_type = True  # its placements keep each job on one GPU type (Sia's rule on mixed clusters)
    wants_all_points = True  # it grows running jobs even when nobody waits
    honours_cap = True  # its allocate() respects self.cap, so a rerun after fragmentation can help
    resizes = True  # it chooses jobs' GPU counts and batches (rounds that keep them say False)

    def __init__(
        self,
        *,
        interval: float = 60.0,
        max_nodes: int = 16,
        pinned: Mapping[str, tuple[int, int]] | None = None,
        seed: int = 0,
        name: str,
    ) -> None:
        if max_nodes < 1:
            raise ValueError(f"max_nodes must be >= 1, got {max_nodes}")
        super().__init__("consolidate", seed=seed, name=name, interval=interval or 60.0)
        self.max_nodes = int(max_nodes)
        self.pinned = dict(PINNED if pinned is None else pinned)
        self._restarts = np.zeros(0, dtype=np.int64)
        self.rounds = 0
        self.cap: np.ndarray | None = None  # per job of this round: most GPUs it could be placed on
        # the search's (jobs, GPU counts) objective, lower is better (inf: not allowed), when it has one
        self.cost_table: np.ndarray | None = None

    def reset(self, view: SchedulerView) -> None:
        super().reset(view)
        if self.resizes and len(view.jobs) and not any(view.is_elastic(j) for j in range(len(view.jobs))):
            why = "none trains a measured application" if view.elastic else "the simulation was built rigid"
            warnings.warn(
                f"{self.name}: no job of this workload can resize ({why}), so it only orders and places jobs at the "
                "GPU counts they asked for; give a trace's spec apps=PATH (../shared/traces/pollux-osdi21/traces) "
                "or run pollux:/Sia workloads to compare it as published",
                RigidWorkloadWarning,
                stacklevel=2,
            )
        self._restarts = np.full(len(view.jobs), -1, dtype=np.int64)  # -1: never allocated
        self.rounds = 0
        self.round_seconds: list[float] = []  # wall time of each round that decided
        self._memo: dict[int, tuple[tuple, object]] = {}
        self._round: tuple | None = None

    def per_round(self, view: SchedulerView, jobs: np.ndarray, compute):
        """``compute()`` once per round: the searches rerun after fragmentation (same time, same jobs) only
        change the caps, so they reuse what the round's tables cost."""
        key = (view.now, jobs.tobytes())
        if self._round is None or self._round[0] != key:
            self._round = (key, compute())
        return self._round[1]

    def cached(self, job: int, key: tuple, compute):
        """``compute()`` for ``job``, reused while ``key`` (what it depends on: the job's measurements,
        gradient statistics, limits) stays the same: a long job's tables are computed once per change,
        not once per round."""
        hit = self._memo.get(job)
        if hit is not None and hit[0] == key:
            return hit[1]
        value = compute()
        self._memo[job] = (key, value)
        return value

    @staticmethod
    def report_key(report: JobReport | None) -> tuple:
        """What a job's goodput function depends on: the configurations it measured, its gradient noise."""
        if report is None:
            return (None,)
        return (tuple(report.profile), report.grad_sqr, report.grad_var)

    # -- what subclasses decide ---------------------------------------------------------------------------
    def allocate(self, view: SchedulerView, jobs: np.ndarray, cur: np.ndarray) -> tuple[np.ndarray, list]:
        """GPU count per job of ``jobs`` (ordered by attained service, then arrival; ``cur``: the counts
        they hold now) and a per-job plan handed to :meth:`batch_for`."""
        raise NotImplementedError

    def batch_for(self, view: SchedulerView, job: int, gpus: np.ndarray, plan) -> int:
        """Global batch size for ``job`` on ``gpus``: by default its own (:func:`kept_batch`)."""
        return kept_batch(view, job, len(gpus))

    # -- one round ------------------------------------------------------------------------------------------
    def schedule(self, view: SchedulerView) -> list[Decision]:
        if not self.on_tick(view):
            return []
        running = np.asarray(view.running, dtype=np.int64)
        queue = np.asarray(view.queue, dtype=np.int64)
        jobs = np.concatenate([running, queue])
        if not len(jobs):
            return []
        self.rounds += 1
        t0 = time.perf_counter()
        # least attained service first, then arrival: ties in every search go to these jobs
        att = np.array([view.attained_service(int(j)) for j in jobs])
        jobs = jobs[np.lexsort((view.jobs.arrival[jobs], att))]
        cur = np.array([len(view.placement(int(j))) if view.job_state(int(j)) == RUNNING else 0 for j in jobs])
        for j in [j for j in self._memo if view.job_state(j) == DONE]:  # finished jobs need no tables
            del self._memo[j]
        least = np.array([view.gpu_range(int(j))[0] for j in jobs])
        placement, plans = self._allocate_placed(view, jobs, cur, least)
        decisions = self._decisions(view, jobs, cur, placement, plans)
        # re-optimise at the next tick even if nothing happens by then (jobs grow as they are profiled)
        view.wake_at(view.now + self.interval)
        self.round_seconds.append(time.perf_counter() - t0)
        return decisions

    def _allocate_placed(self, view: SchedulerView, jobs: np.ndarray, cur: np.ndarray, least: np.ndarray):
        """Counts that can be placed. The searches assume each job gets its tightest placement; when
        fragmentation lowers a job's count, it is capped there and the search runs again, so the GPUs it
        could not use go to other jobs instead of idling until the next round (at most ``REPLACE_TRIES``
        searches)."""
        cap = np.full(len(jobs), np.iinfo(np.int64).max)
        self.cap = None
        wanted = None
        try:
            tries = REPLACE_TRIES if self.honours_cap else 1
            for attempt in range(tries):
                self.cost_table = None
                counts, plans = self.allocate(view, jobs, cur)
                wanted = np.asarray(counts, dtype=np.int64) if wanted is None else wanted
                placed = np.asarray(counts, dtype=np.int64).copy()
                placement = self._place(view, jobs, cur, placed, least)
                lowered = placed < np.asarray(counts)
                if not lowered.any() or placed.sum() >= view.topo.num_gpus or attempt == tries - 1:
                    break
                cap = np.where(lowered, placed, cap)
                self.cap = cap
        finally:
            self.cap = None
        if self.cost_table is not None:
            self._swap_in(view, placement, wanted, least)
        return placement, plans

    def _swap_in(self, view: SchedulerView, placement: list, wanted: np.ndarray, least: np.ndarray) -> None:
        """Give a job held below its count by fragmentation the GPUs it needs on its own node, taken from
        one job there, when the objective (:attr:`cost_table`) gains: the searches pick which job shrinks
        by count alone, while only a job on the same node can make room. A single-node job grows in place
        (or starts on any node), so no placement constraint changes."""
        cost = self.cost_table
        topo = view.topo
        server = np.asarray(topo.gpu_server)
        size = np.asarray(topo.server_num_gpus)
        gpn = int(size.max())
        jobs = len(placement)
        holder = np.full(topo.num_gpus, -1, dtype=np.int64)
        for i, g in enumerate(placement):
            if g is not None:
                holder[g] = i
        counts = np.array([0 if g is None else len(g) for g in placement], dtype=np.int64)
        pairs = None  # each (node, job) holding GPUs there, in (node, job) order, and how many: redone after a swap
        for i in np.flatnonzero(counts < np.minimum(wanted, gpn)).tolist():
            t = min(int(wanted[i]), gpn)
            allowed = None  # every node, for a job not running
            if counts[i]:
                allowed = np.unique(server[placement[i]])
                if len(allowed) > 1:
                    continue
            gain = cost[i, counts[i]] - cost[i, t]
            if not np.isfinite(gain):
                continue
            if pairs is None:
                held = holder >= 0
                keys, held_there = np.unique(server[held] * jobs + holder[held], return_counts=True)
                pairs = (keys // jobs, keys % jobs, held_there, np.bincount(server[~held], minlength=len(size)))
            node, donor, held_there, free = pairs
            # GPUs job i still lacks on each node once it has its own and the free ones there
            need = t - np.bincount(server[holder == i], minlength=len(size)) - free
            ok = (need[node] > 0) & (size[node] >= t) & (donor != i) & (held_there >= need[node])
            if allowed is not None:
                ok &= node == allowed[0]
            left = counts[donor] - need[node]
            ok &= ~((left > 0) & (left < least[donor]))
            if not ok.any():
                continue
            c, d_, lf = np.flatnonzero(ok), donor[ok], left[ok]
            net = gain - (cost[d_, lf] - cost[d_, counts[d_]])
            better = net > 1e-12
            if not better.any():
                continue
            k = int(np.argmax(np.where(better, net, -np.inf)))  # the first best in (node, donor) order
            s, d, n = int(node[c[k]]), int(d_[k]), int(need[node[c[k]]])
            on = np.flatnonzero(server == s)
            taken = on[holder[on] == d][-n:]
            holder[taken] = i
            holder[on[holder[on] == -1][: t - int((holder[on] == i).sum())]] = i
            placement[i] = np.flatnonzero(holder == i)
            rest = np.flatnonzero(holder == d)
            placement[d] = rest if len(rest) else None
            counts[i], counts[d] = len(placement[i]), len(rest)
            pairs = None

    def restart_penalty(self, view: SchedulerView, jobs: np.ndarray) -> np.ndarray:
        """Pollux's factor on the value of a job whose allocation changes: ``max(age − restarts · 30 s, 0) /
        (age + 30 s)``, so young or often-moved jobs are moved less."""
        age = view.now - view.jobs.arrival[jobs]
        restarts = np.maximum(self._restarts[jobs], 0)
        return np.maximum(age - restarts * RESTART_DELAY, 0.0) / (age + RESTART_DELAY)

    # -- placement of the counts ------------------------------------------------------------------------------
    def _place(
        self,
        view: SchedulerView,
        jobs: np.ndarray,
        cur: np.ndarray,
        counts: np.ndarray,
        least: np.ndarray,
        job_types: np.ndarray | None = None,
    ) -> list:
        """GPUs for each job's count (None: none); ``job_types``: the GPU type index each job must run on
        (-1: any), for policies that choose the type (``sia``, ``gavel``)."""
        topo = view.topo
        server_gpus = index_lists(topo).server_gpus
        taken = np.zeros(topo.num_gpus, dtype=bool)
        multi = np.zeros(topo.num_servers, dtype=bool)  # node holds a multi-node job
        # a job's nodes share one GPU type unless the simulation lets jobs mix types
        types = None if getattr(view, "mix_gpu_types", True) else np.asarray(topo.server_gpu_type)
        out: list[np.ndarray | None] = [None] * len(jobs)
        stype = np.asarray(topo.server_gpu_type)
        node_gpus = int(np.max(topo.server_num_gpus))
        for i, j in enumerate(jobs.tolist()):
            if counts[i] and counts[i] == cur[i]:
                g = np.asarray(view.placement(j))
                if job_types is not None and job_types[i] >= 0 and stype[topo.gpu_server[g[0]]] != job_types[i]:
                    continue  # same count on another type: placed below
                out[i] = g
                taken[g] = True
                servers = topo.gpu_server[g]
                if servers.min() != servers.max():  # a multi-node job (most are on one node: no np.unique)
                    multi[servers] = True
        for i in np.argsort(-counts, kind="stable").tolist():
            n = int(counts[i])
            if not n or out[i] is not None:
                continue
            free = np.bincount(topo.gpu_server, weights=~taken, minlength=topo.num_servers).astype(np.int64)
            chosen = None
            while n >= max(int(least[i]), 1):
                only = (
                    None if job_types is None or job_types[i] < 0 else np.asarray(topo.server_gpu_type) == job_types[i]
                )
                chosen = self._fit(free, multi, n, types, only, nodes=max(self.max_nodes, -(-n // node_gpus)))
                if chosen is not None:
                    break
                n -= 1
            if chosen is None:
                counts[i] = 0
                continue
            gpus = []
            need = n
            for s in chosen:
                avail = server_gpus[s][~taken[server_gpus[s]]][:need]
                gpus.extend(avail.tolist())
                need -= len(avail)
            g = np.array(sorted(gpus), dtype=np.int64)
            taken[g] = True
            if len(chosen) > 1:
                multi[chosen] = True
            counts[i] = n
            out[i] = g
        return out

    def _fit(
        self,
        free: np.ndarray,
        multi: np.ndarray,
        n: int,
        types: np.ndarray | None = None,
        only: np.ndarray | None = None,
        nodes: int | None = None,
    ) -> list[int] | None:
        """Servers for ``n`` GPUs: the fullest node that fits them, else the emptiest nodes with no other
        multi-node job (as few as possible, at most ``nodes``, by default ``max_nodes``). With ``types`` (each
        server's GPU type), the nodes share one type: the type that needs the fewest nodes (then has the most free
        GPUs).
        ``only``: a mask of the servers allowed (one GPU type's)."""
        if only is not None:
            free = np.where(only, free, 0)
        fits = np.flatnonzero(free >= n)
        if len(fits):
            return [int(fits[np.argmin(free[fits])])]
        best = None
        for mask in [None] if types is None else [types == t for t in np.unique(types).tolist()]:
            ok = (free > 0) & ~multi if mask is None else (free > 0) & ~multi & mask
            cand = np.flatnonzero(ok)
            cand = cand[np.lexsort((cand, -free[cand]))][: nodes or self.max_nodes]
            total = np.cumsum(free[cand])
            if not len(total) or total[-1] < n:
                continue
            k = int(np.searchsorted(total, n)) + 1
            if best is None or (k, -int(total[-1])) < best[0]:
                best = ((k, -int(total[-1])), cand[:k].tolist())
        return None if best is None else best[1]

    # -- decisions ------------------------------------------------------------------------------------------
    def _decisions(self, view: SchedulerView, jobs: np.ndarray, cur: np.ndarray, placement: list, plans: list):
        decisions: list[Decision] = []
        moves: list[tuple[int, np.ndarray, int | None]] = []
        holder = np.asarray(view.gpu_job).copy()
        for i, j in enumerate(jobs.tolist()):
            g = placement[i]
            if g is None:
                if cur[i]:
                    decisions.append(Preempt(j))
                    holder[holder == j] = -1
                continue
            batch = self.batch_for(view, j, g, plans[i]) if view.is_elastic(j) else None
            if not cur[i]:
                moves.append((j, g, batch))
            elif np.array_equal(np.sort(np.asarray(view.placement(j))), g):
                if batch is not None and batch != view.batch_size(j):
                    decisions.append(SetBatch(j, batch))
            else:
                moves.append((j, g, batch))
        # a move waits for the jobs now on its GPUs to move away; a cycle of moves is broken by stopping a job
        blockers = {j: set(holder[g].tolist()) - {-1, j} for j, g, _ in moves}
        waiting = {j: set() for j, _, _ in moves}
        for j, bl in blockers.items():
            for k in bl:
                waiting.setdefault(k, set()).add(j)
        stopped: set[int] = set()
        order = {j: (g, batch) for j, g, batch in moves}
        ready = [j for j, _, _ in moves if not blockers[j]]
        while order:
            if not ready:  # a cycle: stop a running job that another move waits for, which frees its GPUs
                j = next(k for k in order if k not in stopped and any(w in order for w in waiting.get(k, ())))
                decisions.append(Preempt(j))
                stopped.add(j)
                ready_now = [j]
                for k in waiting.get(j, ()):
                    blockers[k].discard(j)
                    if not blockers[k] and k != j:
                        ready_now.append(k)
                ready = ready_now if not blockers[j] else [k for k in ready_now if k != j]
                continue
            j = ready.pop()
            if j not in order:
                continue
            g, batch = order.pop(j)
            started = view.job_state(j) != RUNNING or j in stopped
            decisions.append(Start(j, g, batch) if started else Resize(j, g, batch))
            self._restarts[j] += 1
            for k in waiting.get(j, ()):
                blockers[k].discard(j)
                if not blockers[k]:
                    ready.append(k)
        return decisions


# -- helpers ------------------------------------------------------------------------------------------------
def goodput_function(report: JobReport) -> GoodputFunction:
    """The job's goodput function: Pollux's step-time model fitted to the step times it reported, with its
    current gradient statistics."""
    keys = list(report.profile)
    step = [report.profile[k][0] for k in keys]
    sync = [report.profile[k][1] for k in keys]
    params = fit_perf_params(
        [k[0] for k in keys], [k[1] for k in keys], [k[2] for k in keys],
        [s - y for s, y in zip(step, sync, strict=True)], step,
    )  # fmt: skip
    return GoodputFunction(params, report.grad_sqr, report.grad_var, report.app.init_batch_size)


def count_limits(view: SchedulerView, job: int, report: JobReport | None, pinned: Mapping) -> tuple[int, int]:
    """GPU counts ``job`` may be given: its range, at most 2 x the most it has run on (1 before it has run:
    its model is trusted only that far, Pollux's rule), 64, and a pinned model's count."""
    lo, hi = view.gpu_range(job)
    model = view.jobs.models[int(view.jobs.model[job])]
    if model in pinned:
        hi = max(lo, min(hi, pinned[model][0]))
    if report is None:
        return lo, hi if lo == hi else max(lo, min(1, hi))
    profiled = max(k[1] for k in report.profile)
    return lo, max(lo, min(max(2 * profiled, 1), MAX_GPUS_PER_JOB, hi))


def kept_batch(view: SchedulerView, job: int, gpus: int) -> int:
    """The batch a policy that does not tune batch sizes runs ``job`` with on ``gpus`` GPUs: the one it was
    submitted with, raised or lowered only as far as that GPU count requires."""
    lo, hi = view.batch_range(job, int(gpus))
    return int(min(max(int(view.jobs.batch_size[job]), lo), hi))


def fixed_batch_goodput(fn: GoodputFunction, app, view: SchedulerView, job: int, counts: np.ndarray) -> np.ndarray:
    """Goodput on each of ``counts`` GPUs (tightest nodes) at the job's own batch (:func:`kept_batch`)."""
    gpn = int(view.topo.server_num_gpus.max())
    counts = np.asarray(counts, dtype=np.int64)
    plans = np.array([app.batch_plan(kept_batch(view, job, n), n) for n in counts.tolist()], dtype=np.int64)
    plans = plans.reshape(len(counts), 2)
    return np.asarray(fn.evaluate(-(-counts // gpn), counts, plans[:, 0], plans[:, 1]), dtype=np.float64)


def greedy_counts(
    cost: np.ndarray,
    valid: np.ndarray,
    counts: np.ndarray,
    free: int,
    cap: np.ndarray | None = None,
    *,
    max_step: int | None = None,
) -> np.ndarray:
    """Repeatedly move the job whose cost falls most per added GPU to the count achieving that, while GPUs
    last and some move lowers the cost. ``cost``/``valid``: (jobs, counts) tables; ``counts``: the start;
    ``cap``: most GPUs per job (a job starting above its cap starts at 0 instead); ``max_step``: most GPUs
    added in one move (1: Optimus' one GPU at a time).

    Every job's best move from every count is computed at once; a heap keeps each job's next move, which
    changes only when the job moved or its move no longer fits in the GPUs left (fewer GPUs only remove
    moves), so a round costs one (jobs, counts, counts) array operation and O(moves log jobs); ties go to
    the lower job index, then the smaller count."""
    counts = np.asarray(counts, dtype=np.int64).copy()
    width = cost.shape[1]
    cols = np.arange(width)
    if cap is not None:
        valid = valid & (cols[None, :] <= cap[:, None])
        over = counts > cap
        free += int(counts[over].sum())
        counts[over] = 0
    cost = np.where(valid, cost, np.inf)

    if max_step == 1:
        return _one_gpu_at_a_time(cost, valid, counts, free)

    limit = width if max_step is None else max_step
    # every job's best move from every count, ignoring the GPUs left (one array operation), and, when that
    # move does not fit, its best move that does (one row)
    step = cols[None, None, :] - cols[None, :, None]  # (1, from, to)
    with np.errstate(invalid="ignore"):
        table = (cost[:, :, None] - cost[:, None, :]) / np.maximum(step, 1)
    table = np.where(valid[:, None, :] & (step > 0) & (step <= limit) & ~np.isnan(table), table, -np.inf)
    best_to = table.argmax(axis=2)  # (jobs, from)

    def best_move(i: int, free: int) -> tuple[float, int]:
        c = int(counts[i])
        to = int(best_to[i, c])
        if to - c > free:
            row = np.where(cols - c <= free, table[i, c], -np.inf)
            to = int(row.argmax())
        return float(table[i, c, to]), to

    heap: list[tuple[float, int, int]] = []  # (-gain, job, count): one entry per job with a move
    for i in range(len(counts)):
        g, to = best_move(i, free)
        if g > 0:
            heap.append((-g, i, to))
    heapq.heapify(heap)
    while free > 0 and heap:
        _, i, to = heapq.heappop(heap)
        if to - counts[i] > free:  # that move no longer fits: find this job's best that does
            g, to = best_move(i, free)
            if g > 0:
                heapq.heappush(heap, (-g, i, to))
            continue
        free -= to - int(counts[i])
        counts[i] = to
        g, to = best_move(i, free)
        if g > 0:
            heapq.heappush(heap, (-g, i, to))
    return counts


def _one_gpu_at_a_time(cost: np.ndarray, valid: np.ndarray, counts: np.ndarray, free: int) -> np.ndarray:
    """:func:`greedy_counts` with moves of one GPU: a job's next gain depends only on its own count, so a
    heap of each job's next gain gives the same choices (ties to the lower job index) in O(GPUs log jobs)."""
    width = cost.shape[1]

    def gain(i: int) -> float:
        c = int(counts[i])
        if c + 1 >= width or not valid[i, c + 1]:
            return -math.inf
        with np.errstate(invalid="ignore"):
            g = float(cost[i, c] - cost[i, c + 1])
        return g if g > 0 else -math.inf

    heap = [(-g, i) for i in range(len(counts)) if (g := gain(i)) > -math.inf]
    heapq.heapify(heap)
    while free > 0 and heap:
        _, i = heapq.heappop(heap)
        counts[i] += 1
        free -= 1
        if (g := gain(i)) > -math.inf:
            heapq.heappush(heap, (-g, i))
    return counts
