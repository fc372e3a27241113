"""Gavel (Narayanan et al., OSDI'20): heterogeneity-aware max-sum-throughput, realised in rounds.

Gavel schedules rigid jobs (each runs on exactly the GPU count and batch size it asked for) and chooses
only *where* and *how often*:

- **Allocation.** An LP over ``X[j, t]``, the share of time job ``j`` should spend on GPU type ``t``:
  maximise ``Σ_j Σ_t T[j, t] · X[j, t]`` subject to ``Σ_t X[j, t] ≤ 1`` (a job is in one place at a time)
  and ``Σ_j n_j · X[j, t] ≤ G_t`` (the type's GPUs), ``T`` the job's steps per second on ``n_j`` GPUs of
  type ``t`` at its batch, in its tightest placement (Gavel's ``max_sum_throughput_perf``, the policy Sia
  compared against). Solved by HiGHS (``scipy.optimize.linprog``); a type too small for the job is out.
- **Rounds.** Every ``interval`` (360 s, Gavel's round) the allocation becomes a schedule by priorities:
  ``X[j, t]`` divided by the share of type ``t``'s time the job has received so far (every job starts
  with half a round on every type, so a new job is not infinitely urgent). The (job, type) pairs are
  taken in decreasing priority, then allocation; a job runs at most once, on a type with ``n_j`` GPUs
  left. A job is placed like every elastic policy's (its GPUs kept if it stays on its type and count,
  else best-fit on that type).

Differences from Gavel's simulator as Sia ran it: the throughput is the application's measured step time
on each type (not Gavel's throughput estimator), placement is best-fit rather than in server order, and a
job too large for every type is never scheduled (it is refused by the simulator's feasibility check).
"""

from __future__ import annotations

import time

import numpy as np
import scipy.optimize
import scipy.sparse

from cluster_sim.policies.rigid_rounds import RigidRounds, remaining_steps
from cluster_sim.protocol import SchedulerView

OBJECTIVES = ("throughput", "oracle-completions")


class Gavel(RigidRounds):
    """Max-sum-throughput time shares per GPU type (an LP), realised by priorities every ``interval``."""

    ordering = "gavel"

    def __init__(
        self,
        *,
        interval: float = 360.0,
        max_nodes: int = 16,
        objective: str = "throughput",
        seed: int = 0,
        name: str = "gavel",
    ) -> None:
        if objective not in OBJECTIVES:
            raise ValueError(f"gavel: unknown objective {objective!r}; choose one of {OBJECTIVES}")
        super().__init__(interval=interval, max_nodes=max_nodes, pinned={}, seed=seed, name=name)
        self.objective = objective
        self.solve_seconds: list[float] = []

    def reset(self, view: SchedulerView) -> None:
        super().reset(view)
        types = len(view.topo.gpu_types)
        self._job_time = np.zeros((len(view.jobs), types))  # seconds each job has run on each type (+ ½ round)
        self._type_time = np.zeros(types)  # Σ over jobs of the above, per type
        self._seen = np.zeros(len(view.jobs), dtype=bool)
        self.solve_seconds = []

    def allocation(self, rates: np.ndarray, asked: np.ndarray, capacity: np.ndarray) -> np.ndarray:
        """Gavel's LP: the time share of each job on each type maximising the summed throughput."""
        rows, cols = np.nonzero(rates > 0)
        x = np.zeros(rates.shape)
        if not len(rows):
            return x
        n_var, n_jobs, n_types = len(rows), rates.shape[0], rates.shape[1]
        one = scipy.sparse.csr_array((np.ones(n_var), (rows, np.arange(n_var))), shape=(n_jobs, n_var))
        cap = scipy.sparse.csr_array((asked[rows].astype(float), (cols, np.arange(n_var))), shape=(n_types, n_var))
        res = scipy.optimize.linprog(
            -rates[rows, cols],
            A_ub=scipy.sparse.vstack([one, cap]).tocsr(),
            b_ub=np.concatenate([np.ones(n_jobs), capacity.astype(float)]),
            bounds=(0, 1),
            method="highs",
        )
        if res.x is None:
            raise RuntimeError(f"gavel: the allocation LP failed ({res.message})")
        x[rows, cols] = np.clip(np.round(res.x, 5), 0.0, 1.0)
        return x

    def _allocate_placed(self, view: SchedulerView, jobs: np.ndarray, cur: np.ndarray, least: np.ndarray):
        t0 = time.perf_counter()
        rates, asked, capacity = self.throughputs(view, jobs)
        if self.objective == "oracle-completions":  # each job's throughput as a share of its true remaining work
            rates = (
                rates / np.maximum(remaining_steps(view, jobs, rates, self.current_types(view, jobs)), 1e-9)[:, None]
            )
        x = self.allocation(rates, asked, capacity)
        self.solve_seconds.append(time.perf_counter() - t0)
        new = jobs[~self._seen[jobs]]
        self._job_time[new] = self.interval / 2
        self._type_time += self.interval / 2 * len(new)
        self._seen[new] = True
        share = self._job_time[jobs] / np.maximum(self._type_time, 1e-12)
        priority = np.where(share > 0, x / np.maximum(share, 1e-300), x * 1e9)
        # (job, type) pairs by decreasing priority, then allocation; ties: the jobs' order (least service)
        i_idx, t_idx = np.nonzero(x > 0)
        order = np.lexsort((i_idx, -x[i_idx, t_idx], -priority[i_idx, t_idx]))
        types, counts = self.assign(order, i_idx, t_idx, asked, capacity)
        placement = self._place(view, jobs, cur, counts, np.where(counts > 0, counts, least), job_types=types)
        for i, g in enumerate(placement):
            if g is not None:
                self._job_time[jobs[i], types[i]] += self.interval
                self._type_time[types[i]] += self.interval
        return placement, [None] * len(jobs)


__all__ = ["Gavel"]
