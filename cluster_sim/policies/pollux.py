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
others go best-fit onto one node, or onto the emptiest nodes free of other multi-node jobs. Counts do not
see nodes, so two repairs follow (:mod:`cluster_sim.policies.elastic`): a count that cannot be placed is
lowered, capped there and the search rerun (its GPUs go to others instead of idling), and a job left short
on its node takes GPUs from a job on that node when the objective gains. It is deterministic and takes
milliseconds per round, where the genetic algorithm takes seconds; it finds allocations at least as good
under the objective whenever the tightest placement is available.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from cluster_sim.policies.elastic import (
    ElasticPolicy,
    count_limits,
    goodput_function,
    greedy_counts,
)
from cluster_sim.protocol import SchedulerView


class Pollux(ElasticPolicy):
    """Goodput-based joint GPU and batch-size allocation, re-optimised every ``interval`` seconds."""

    ordering = "pollux"

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
        super().__init__(interval=interval, max_nodes=max_nodes, pinned=pinned, seed=seed, name=name)
        self.p = float(p)

    def allocate(self, view: SchedulerView, jobs: np.ndarray, cur: np.ndarray) -> tuple[np.ndarray, list]:
        tables, plans = self.per_round(view, jobs, lambda: self._speedups(view, jobs))
        return self._search(view, jobs, cur, tables), plans

    def batch_for(self, view: SchedulerView, job: int, gpus: np.ndarray, plan) -> int:
        """The goodput-optimal batch on ``gpus`` (the smallest allowed before the job has step times)."""
        n = len(gpus)
        lo, hi = view.batch_range(job, n)
        model = view.jobs.models[int(view.jobs.model[job])]
        if model in self.pinned:
            return int(min(max(self.pinned[model][1], lo), hi))
        if plan is None:
            return lo
        fn, bounds, app, best = plan
        nodes = len(np.unique(view.topo.gpu_server[gpus]))
        if (nodes, n) not in best:
            _, atomic, accum = fn.optimize(nodes, n, app.max_batch_size, bounds)
            best[nodes, n] = n * int(atomic[0]) * (int(accum[0]) + 1)
        return int(min(max(best[nodes, n], lo), hi))

    # -- speedup of every job on every GPU count ----------------------------------------------------------
    def _speedups(self, view: SchedulerView, jobs: np.ndarray) -> tuple[list[np.ndarray], list]:
        topo = view.topo
        gpn = int(topo.server_num_gpus.max())
        fair = math.ceil(topo.num_gpus / len(jobs))
        tables, plans = [], []
        for j in jobs.tolist():
            report = view.job_report(j)
            lo, top = count_limits(view, j, report, self.pinned)
            key = (self.report_key(report), lo, top, fair)
            table, plan = self.cached(j, key, lambda r=report, lo=lo, top=top: self._table(r, lo, top, fair, gpn))
            tables.append(table)
            plans.append(plan)
        return tables, plans

    @staticmethod
    def _table(report, lo: int, top: int, fair: int, gpn: int) -> tuple[np.ndarray, tuple | None]:
        """Speedup on each GPU count ``0..top`` (nan where not allowed) and the plan for its batch size."""
        table = np.full(top + 1, np.nan)  # speedup per GPU count; nan: a count the job may not use
        table[0] = 0.0
        if report is None:  # no step times yet: linear
            table[lo : top + 1] = np.arange(lo, top + 1) / fair
            return table, None
        app = report.app
        fn = goodput_function(report)
        r = np.arange(lo, top + 1)
        bounds = (app.min_local_bsz, app.max_local_bsz)
        good, _, _ = fn.optimize(np.ceil(r / gpn), r, app.max_batch_size, bounds)
        base = fn.optimize(1, max(fair, lo), app.max_batch_size, bounds)[0][0]
        base = base if base > 0 else good[0]
        table[lo : top + 1] = good / base
        return table, (fn, bounds, app, {})

    # -- the search over GPU counts ---------------------------------------------------------------------------
    def _search(self, view: SchedulerView, jobs: np.ndarray, cur: np.ndarray, tables: list[np.ndarray]) -> np.ndarray:
        topo = view.topo
        scale = topo.num_servers / topo.num_gpus  # dominant share (1 GPU of all) x number of nodes
        width = max(len(t) for t in tables)
        speed = np.full((len(jobs), width), np.nan)
        for i, t in enumerate(tables):
            speed[i, : len(t)] = t
        valid = ~np.isnan(speed)
        speed[~valid] = 0.0
        penalty = self.restart_penalty(view, jobs)
        same = np.arange(width)[None, :] == cur[:, None]
        value = scale * speed * np.where(same, 1.0, penalty[:, None]) + 1e-3
        cost = _power_cost(value, self.p)
        self.cost_table = np.where(valid, cost, np.inf)
        return greedy_counts(cost, valid, np.zeros(len(jobs), dtype=np.int64), topo.num_gpus, self.cap)


def _power_cost(value: np.ndarray, p: float) -> np.ndarray:
    """A per-job term whose sum the power mean with exponent ``p`` decreases in: ``value^p`` for ``p < 0``
    (minimised), ``-value^p`` for ``0 < p <= 1``."""
    return value**p if p < 0 else -(value**p)
