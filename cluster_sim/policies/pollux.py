"""Pollux's policy (Qiao et al., OSDI'21): GPUs and batch sizes chosen together to maximise goodput.

Every ``interval`` (60 s) the policy re-optimises every active job's GPU count, its placement and its
batch size, with the objective and constraints of Pollux's simulator (``pollux.py`` of its artifact):

- **Speedup.** A job that has reported step times (:meth:`~cluster_sim.protocol.SchedulerView.job_report`)
  has a goodput function (:mod:`cluster_sim.goodput`, fitted to its own measurements, with its current
  gradient statistics); its speedup on ``r`` GPUs is its best goodput over batch sizes there, relative to
  its goodput on a fair share (``ceil(GPUs / jobs)`` GPUs, one node). A job that has not run yet scales
  linearly: ``r / fair share``.
- **Objective.** The power mean with ``p = -1`` (fairness-leaning) of the speedups, each scaled by the
  job's dominant share times the node count, plus 1e-3. A job whose allocation changes has its speedup
  multiplied by ``max(age − restarts · 30 s, 0) / (age + 30 s)``, Pollux's restart penalty.
- **Constraints.** At most ``2 x`` the largest GPU count a job has run on (1 before it has run; 64 and its
  largest batch over its smallest per-GPU batch at most), at most 16 nodes per job, at most one
  multi-node job per node, node capacities. ``ncf`` stays on one GPU at batch 32,768, as in Pollux's
  simulator (``pinned``).
- **Batch size.** The goodput-optimal batch for the GPUs a job gets; before a job has step times, the
  smallest allowed (``max(initial batch, smallest per-GPU batch x GPUs)``), as AdaptDL starts.

How the search differs from Pollux's: Pollux runs a genetic algorithm (NSGA-II, 100 x 100, warm-started
from the previous round) over the job x node replica matrix. The objective here depends on an allocation
only through each job's GPU count and node count, and it is a sum over jobs of ``1 / value`` (``p = -1``),
so this search is greedy on GPU counts instead: starting from nothing, it repeatedly gives the job with
the best objective decrease per GPU the GPU count that achieves it (counting a job's node count as the
tightest for its GPUs), then places the counts: jobs whose count is unchanged keep their GPUs, the
others go best-fit onto one node, or onto the emptiest nodes free of other multi-node jobs (a count
that cannot be placed is lowered). It is deterministic and takes milliseconds per round, where the
genetic algorithm takes seconds; it finds allocations at least as good under the objective whenever the
tightest placement is available.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from cluster_sim.goodput import GoodputFunction, fit_perf_params
from cluster_sim.policies.base import PolicyScheduler
from cluster_sim.protocol import Decision, Preempt, Resize, SchedulerView, SetBatch, Start

RESTART_DELAY = 30.0  # seconds a reallocation costs in Pollux's restart penalty
PINNED = {"ncf": (1, 32768)}  # Pollux's simulator keeps ncf on one GPU at this batch size


class Pollux(PolicyScheduler):
    """Goodput-based joint GPU and batch-size allocation, re-optimised every ``interval`` seconds."""

    ordering = "pollux"
    preemptive = True
    elastic = True  # the simulator lets its jobs resize and change batch size
    wants_all_points = True  # it grows running jobs even when nobody waits

    def __init__(
        self,
        *,
        interval: float = 60.0,
        p: float = -1.0,
        max_nodes: int = 16,
        pinned: Mapping[str, tuple[int, int]] | None = None,
        seed: int = 0,
        name: str = "pollux",
    ) -> None:
        if p == 0 or p > 1:
            raise ValueError(f"Pollux's power-mean exponent p must be < 0 or in (0, 1], got {p}")
        if max_nodes < 1:
            raise ValueError(f"max_nodes must be >= 1, got {max_nodes}")
        super().__init__("consolidate", seed=seed, name=name, interval=interval or 60.0)
        self.p = float(p)
        self.max_nodes = int(max_nodes)
        self.pinned = dict(PINNED if pinned is None else pinned)
        self._restarts = np.zeros(0, dtype=np.int64)
        self.rounds = 0

    def reset(self, view: SchedulerView) -> None:
        super().reset(view)
        self._restarts = np.full(len(view.jobs), -1, dtype=np.int64)  # -1: never allocated
        self.rounds = 0

    # ------------------------------------------------------------------------------------------------
    def schedule(self, view: SchedulerView) -> list[Decision]:
        if not self.on_tick(view):
            return []
        running = np.asarray(view.running, dtype=np.int64)
        queue = np.asarray(view.queue, dtype=np.int64)
        jobs = np.concatenate([running, queue])
        if not len(jobs):
            return []
        self.rounds += 1
        # Pollux orders jobs by attained service, then arrival: ties in the search go to the earlier ones
        att = np.array([view.attained_service(int(j)) for j in jobs])
        jobs = jobs[np.lexsort((view.jobs.arrival[jobs], att))]
        cur = np.array([len(view.placement(int(j))) if view.job_state(int(j)) == 2 else 0 for j in jobs])
        tables, plans = self._speedups(view, jobs)
        counts = self._search(view, jobs, cur, tables)
        least = np.array([view.gpu_range(int(j))[0] for j in jobs])
        placement = self._place(view, jobs, cur, counts, least)
        decisions = self._decisions(view, jobs, cur, placement, plans)
        # re-optimise at the next tick even if nothing happens by then (jobs grow as they are profiled)
        view.wake_at(view.now + self.interval)
        return decisions

    # -- speedup of every job on every GPU count ----------------------------------------------------------
    def _speedups(self, view: SchedulerView, jobs: np.ndarray) -> tuple[list[np.ndarray], list]:
        topo = view.topo
        gpn = int(topo.server_num_gpus.max())
        fair = math.ceil(topo.num_gpus / len(jobs))
        tables, plans = [], []
        for j in jobs.tolist():
            lo, hi = view.gpu_range(j)
            model = view.jobs.models[int(view.jobs.model[j])]
            report = view.job_report(j)
            if model in self.pinned:
                hi = max(lo, min(hi, self.pinned[model][0]))
            table = np.full(hi + 1, np.nan)  # speedup per GPU count; nan: a count the job may not use
            table[0] = 0.0
            if report is None:  # no step times yet: linear, on at most one GPU if it may choose
                top = hi if lo == hi else max(lo, min(1, hi))
                table[lo : top + 1] = np.arange(lo, top + 1) / fair
                tables.append(table[: top + 1])
                plans.append(None)
                continue
            app = report.app
            profiled = max(k[1] for k in report.profile)
            top = max(lo, min(max(2 * profiled, 1), 64, hi))
            keys = list(report.profile)
            step = [report.profile[k][0] for k in keys]
            sync = [report.profile[k][1] for k in keys]
            params = fit_perf_params(
                [k[0] for k in keys], [k[1] for k in keys], [k[2] for k in keys],
                [s - y for s, y in zip(step, sync, strict=True)], step,
            )  # fmt: skip
            fn = GoodputFunction(params, report.grad_sqr, report.grad_var, app.init_batch_size)
            r = np.arange(lo, top + 1)
            bounds = (app.min_local_bsz, app.max_local_bsz)
            good, _, _ = fn.optimize(np.ceil(r / gpn), r, app.max_batch_size, bounds)
            base = fn.optimize(1, min(max(fair, lo), top), app.max_batch_size, bounds)[0][0]
            base = base if base > 0 else good[0]
            table[lo : top + 1] = good / base
            tables.append(table[: top + 1])
            plans.append((fn, bounds, app))
        return tables, plans

    # -- the search over GPU counts ---------------------------------------------------------------------------
    def _search(self, view: SchedulerView, jobs: np.ndarray, cur: np.ndarray, tables: list[np.ndarray]) -> np.ndarray:
        topo = view.topo
        scale = topo.num_servers / topo.num_gpus  # dominant share (1 GPU of all) x number of nodes
        width = max(len(t) for t in tables)
        speed = np.zeros((len(jobs), width))
        valid = np.zeros((len(jobs), width), dtype=bool)
        for i, t in enumerate(tables):
            speed[i, : len(t)] = np.nan_to_num(t)
            valid[i, : len(t)] = ~np.isnan(t)
        age = view.now - view.jobs.arrival[jobs]
        restarts = np.maximum(self._restarts[jobs], 0)
        penalty = np.maximum(age - restarts * RESTART_DELAY, 0.0) / (age + RESTART_DELAY)
        cols = np.arange(width)
        same = cols[None, :] == cur[:, None]
        value = scale * speed * np.where(same, 1.0, penalty[:, None]) + 1e-3
        cost = np.where(valid, _power_cost(value, self.p), np.inf)
        counts = np.zeros(len(jobs), dtype=np.int64)
        free = topo.num_gpus
        rows = np.arange(len(jobs))
        while free > 0:
            step = cols[None, :] - counts[:, None]
            ok = valid & (step > 0) & (step <= free)
            if not ok.any():
                break
            now_cost = cost[rows, counts]
            gain = np.where(ok, (now_cost[:, None] - cost) / np.maximum(step, 1), -np.inf)
            k = int(np.argmax(gain))
            i, c = divmod(k, width)
            if not gain[i, c] > 0:
                break
            free -= c - int(counts[i])
            counts[i] = c
        return counts

    # -- placement of the counts ------------------------------------------------------------------------------
    def _place(
        self, view: SchedulerView, jobs: np.ndarray, cur: np.ndarray, counts: np.ndarray, least: np.ndarray
    ) -> list:
        topo = view.topo
        server_gpus = [np.flatnonzero(topo.gpu_server == s) for s in range(topo.num_servers)]
        taken = np.zeros(topo.num_gpus, dtype=bool)
        multi = np.zeros(topo.num_servers, dtype=bool)  # node holds a multi-node job
        out: list[np.ndarray | None] = [None] * len(jobs)
        for i, j in enumerate(jobs.tolist()):
            if counts[i] and counts[i] == cur[i]:
                g = np.asarray(view.placement(j))
                out[i] = g
                taken[g] = True
                servers = np.unique(topo.gpu_server[g])
                if len(servers) > 1:
                    multi[servers] = True
        for i in np.argsort(-counts, kind="stable").tolist():
            n = int(counts[i])
            if not n or out[i] is not None:
                continue
            free = np.array([int((~taken[g]).sum()) for g in server_gpus])
            chosen = None
            while n >= max(int(least[i]), 1):
                chosen = self._fit(free, multi, n)
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

    def _fit(self, free: np.ndarray, multi: np.ndarray, n: int) -> list[int] | None:
        """Servers for ``n`` GPUs: the fullest node that fits them, else the emptiest nodes with no other
        multi-node job (as few as possible, at most ``max_nodes``)."""
        fits = np.flatnonzero(free >= n)
        if len(fits):
            return [int(fits[np.argmin(free[fits])])]
        cand = np.flatnonzero((free > 0) & ~multi)
        cand = cand[np.lexsort((cand, -free[cand]))][: self.max_nodes]
        total = np.cumsum(free[cand])
        if not len(total) or total[-1] < n:
            return None
        k = int(np.searchsorted(total, n)) + 1
        return cand[:k].tolist()

    # -- decisions ------------------------------------------------------------------------------------------
    def _batch(self, view: SchedulerView, j: int, gpus: np.ndarray, plan) -> int:
        model = view.jobs.models[int(view.jobs.model[j])]
        n = len(gpus)
        lo, hi = view.batch_range(j, n)
        if model in self.pinned:
            return int(min(max(self.pinned[model][1], lo), hi))
        if plan is None:
            return lo
        fn, bounds, app = plan
        nodes = len(np.unique(view.topo.gpu_server[gpus]))
        _, atomic, accum = fn.optimize(nodes, n, app.max_batch_size, bounds)
        return int(min(max(n * int(atomic[0]) * (int(accum[0]) + 1), lo), hi))

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
            batch = self._batch(view, j, g, plans[i]) if view.is_elastic(j) else None
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
            started = view.job_state(j) != 2 or j in stopped
            decisions.append(Start(j, g, batch) if started else Resize(j, g, batch))
            self._restarts[j] += 1
            for k in waiting.get(j, ()):
                blockers[k].discard(j)
                if not blockers[k]:
                    ready.append(k)
        return decisions


def _power_cost(value: np.ndarray, p: float) -> np.ndarray:
    """A per-job term whose sum the power mean with exponent ``p`` decreases in: ``value^p`` for ``p < 0``
    (minimised), ``-value^p`` for ``0 < p <= 1``."""
    return value**p if p < 0 else -(value**p)
