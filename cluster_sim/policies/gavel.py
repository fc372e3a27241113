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
from collections import OrderedDict

import numpy as np

from cluster_sim.policies.rigid_rounds import (
    ScoredRounds,
    attained_hours,
    remaining_steps,
    type_capacity,
)
from cluster_sim.protocol import SchedulerView

OBJECTIVES = ("throughput", "oracle-completions")


# The LPs solved last, by their inputs: a round asks the same LP as the one before until a job arrives, ends or
# is re-weighted (95% of a gavel-las day on small-hetero), and the training environment interleaves two
# simulators (the agents' and the reference's), so a few are kept. HiGHS is deterministic: a hit is the solve.
_SOLVED: OrderedDict[tuple, np.ndarray] = OrderedDict()
_SOLVED_KEPT = 16


def max_sum_throughput(rates: np.ndarray, asked: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """Gavel's LP: the time share of each job on each type maximising the summed throughput."""
    rates = np.ascontiguousarray(rates, dtype=np.float64)
    asked, capacity = np.asarray(asked, dtype=np.float64), np.asarray(capacity, dtype=np.float64)
    key = (rates.shape, rates.tobytes(), asked.tobytes(), capacity.tobytes())
    hit = _SOLVED.get(key)
    if hit is None:
        hit = _SOLVED[key] = _solve_max_sum_throughput(rates, asked, capacity)
        if len(_SOLVED) > _SOLVED_KEPT:
            _SOLVED.popitem(last=False)
    else:
        _SOLVED.move_to_end(key)
    return hit.copy()


def _solve_max_sum_throughput(rates: np.ndarray, asked: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    import scipy.optimize  # here: every command imports the policies, few run Gavel (scipy.optimize: 0.3 s)
    import scipy.sparse

    rows, cols = np.nonzero(rates > 0)
    x = np.zeros(rates.shape)
    if not len(rows):
        return x
    n_var, n_jobs, n_types = len(rows), rates.shape[0], rates.shape[1]
    one = scipy.sparse.csr_array((np.ones(n_var), (rows, np.arange(n_var))), shape=(n_jobs, n_var))
    cap = scipy.sparse.csr_array((asked[rows].astype(float), (cols, np.arange(n_var))), shape=(n_types, n_var))
    a_ub = scipy.sparse.vstack([one, cap]).tocsr()
    b_ub = np.concatenate([np.ones(n_jobs), capacity.astype(float)])
    res = scipy.optimize.linprog(-rates[rows, cols], A_ub=a_ub, b_ub=b_ub, bounds=(0, 1), method="highs")
    if res.x is None:  # HiGHS gave up on badly scaled speeds (e.g. weighted by remaining time): same LP, scaled
        c = rates[rows, cols]
        res = scipy.optimize.linprog(-c / c.max(), A_ub=a_ub, b_ub=b_ub, bounds=(0, 1), method="highs-ds")
    if res.x is None:
        raise RuntimeError(f"gavel: the allocation LP failed ({res.message})")
    x[rows, cols] = np.clip(np.round(res.x, 5), 0.0, 1.0)
    return x


class GavelShares:
    """Gavel's round priorities: each (job, type)'s LP share over the share of the type's time the job has
    received so far. Every job starts with half a round on every type, so a new job is not infinitely
    urgent; :meth:`ran` credits a round to the jobs that ran."""

    def __init__(self, num_jobs: int, num_types: int, interval: float) -> None:
        self.interval = float(interval)
        self.job_time = np.zeros((num_jobs, num_types))  # seconds each job has run on each type (+ ½ round)
        self.type_time = np.zeros(num_types)  # Σ over jobs of the above, per type
        self.seen = np.zeros(num_jobs, dtype=bool)

    def priority(self, jobs: np.ndarray, x: np.ndarray) -> np.ndarray:
        """``x`` (jobs, types) over each job's received share of each type (``x`` · 1e9 where none yet)."""
        new = jobs[~self.seen[jobs]]
        self.job_time[new] = self.interval / 2
        self.type_time += self.interval / 2 * len(new)
        self.seen[new] = True
        share = self.job_time[jobs] / np.maximum(self.type_time, 1e-12)
        return np.where(share > 0, x / np.maximum(share, 1e-300), x * 1e9)

    def ran(self, jobs: np.ndarray, types: np.ndarray) -> None:
        """Credit one round on ``types[i]`` to each ``jobs[i]`` that ran (``types[i] >= 0``)."""
        on = types >= 0
        np.add.at(self.job_time, (jobs[on], types[on]), self.interval)
        np.add.at(self.type_time, types[on], self.interval)


# gavel-las: the weight of log(1 + attained GPU-hours), chosen among 0..3 on eight 2-day Philly windows of
# 2017-10-16..31 (before the report weeks). Relative speeds in the LP (normalise) did better there (-4.0%
# against -2.1% vs Gavel) but 48% worse than Gavel on Sia's workloads, so Gavel's own LP stays the default.
LAS_WEIGHT = 2.0


class GavelPriorityScore:
    """Gavel's round priority as a :class:`~cluster_sim.policies.rigid_rounds.ScoredRounds` score:
    ``log(priority) - las · log(1 + attained GPU-hours)``. With ``las=0`` it is Gavel's order (``rounds-gavel``,
    which also fills GPUs the LP leaves idle with the pairs it gave no share, in priority order); ``las > 0``
    (``gavel-las``) leans each round towards the jobs that have run least, as Tiresias does, where Gavel's
    LP is blind to how long a job has run. A pair the LP gives no share has ``log(1e-9 / share)``: last.

    ``normalise`` gives the LP each job's speed relative to its fastest type instead of its steps per
    second (steps of different models are not worth the same), and ``weight`` w scales a job's speeds in
    the LP by (1 + attained GPU-hours)^-w, so the LP itself favours the jobs that have run least.
    ``oracle`` (privileged, a reference only) scales them by the job's true remaining hours at its best
    speed to the power -``oracle`` instead: ``gavel-las-oracle``, what knowing durations adds to gavel-las."""

    def __init__(
        self,
        las: float = 0.0,
        interval: float = 360.0,
        *,
        normalise: bool = False,
        weight: float = 0.0,
        oracle: float = 0.0,
    ) -> None:
        if las < 0 or weight < 0 or oracle < 0:
            raise ValueError(f"gavel rounds: las, weight and oracle must be >= 0, got {las}, {weight}, {oracle}")
        self.las, self.interval, self.normalise = float(las), float(interval), bool(normalise)
        self.weight, self.oracle = float(weight), float(oracle)
        self.shares: GavelShares | None = None

    def reset(self, view: SchedulerView) -> None:
        self.shares = GavelShares(len(view.jobs), len(view.topo.gpu_types), self.interval)

    def ran(self, jobs: np.ndarray, types: np.ndarray) -> None:
        self.shares.ran(jobs, types)

    def log_priority(self, view: SchedulerView, jobs: np.ndarray, rates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(the LP's share ``x``, log of Gavel's priority with ``x`` floored at 1e-9) per (job, type)."""
        if self.shares is None:
            self.reset(view)
        r = rates
        if self.normalise:
            r = r / np.maximum(r.max(axis=1, keepdims=True), 1e-300)
        if self.weight:
            r = r * (1.0 + attained_hours(view, jobs))[:, None] ** -self.weight
        if self.oracle:
            current = np.full(len(jobs), -1, dtype=np.int64)  # a job with a duration: its work at speed 1
            hours = remaining_steps(view, jobs, rates, current) / np.maximum(rates.max(axis=1), 1e-300) / 3600.0
            r = r * np.maximum(hours, 1e-3)[:, None] ** -self.oracle
        x = max_sum_throughput(r, np.asarray(view.jobs.num_gpus[jobs], dtype=np.int64), type_capacity(view.topo))
        return x, np.log(np.maximum(self.shares.priority(jobs, np.maximum(x, 1e-9)), 1e-300))

    @classmethod
    def gavel_las(cls, interval: float = 360.0) -> GavelPriorityScore:
        """The ``gavel-las`` score."""
        return cls(LAS_WEIGHT, interval)

    def __call__(self, view: SchedulerView, jobs: np.ndarray, rates: np.ndarray, current: np.ndarray) -> np.ndarray:
        _, score = self.log_priority(view, jobs, rates)
        if self.las:
            score = score - self.las * np.log1p(attained_hours(view, jobs))[:, None]
        return score


class GavelOrder:
    """Gavel's own round order as a :class:`~cluster_sim.policies.rigid_rounds.ScoredRounds` score: the pairs
    the LP gives a share, by priority (share over share received), then by share; the pairs it gives none are
    left out (``gavel``; ``rounds-gavel`` ranks them last instead). Keeps the LP's solve times."""

    def __init__(self, interval: float = 360.0, objective: str = "throughput") -> None:
        if objective not in OBJECTIVES:
            raise ValueError(f"gavel: unknown objective {objective!r}; choose one of {OBJECTIVES}")
        self.interval, self.objective = float(interval), objective
        self.shares: GavelShares | None = None
        self.solve_seconds: list[float] = []

    def reset(self, view: SchedulerView) -> None:
        self.shares = GavelShares(len(view.jobs), len(view.topo.gpu_types), self.interval)
        self.solve_seconds = []

    def ran(self, jobs: np.ndarray, types: np.ndarray) -> None:
        self.shares.ran(jobs, types)

    def __call__(self, view: SchedulerView, jobs: np.ndarray, rates: np.ndarray, current: np.ndarray) -> np.ndarray:
        t0 = time.perf_counter()
        if self.objective == "oracle-completions":  # each job's throughput as a share of its true remaining work
            rates = rates / np.maximum(remaining_steps(view, jobs, rates, current), 1e-9)[:, None]
        x = max_sum_throughput(rates, np.asarray(view.jobs.num_gpus[jobs], dtype=np.int64), type_capacity(view.topo))
        self.solve_seconds.append(time.perf_counter() - t0)
        priority = self.shares.priority(jobs, x)
        return np.stack([np.where(x > 0, priority, -np.inf), x])


class Gavel(ScoredRounds):
    """Max-sum-throughput time shares per GPU type (an LP), realised by priorities every ``interval``: the
    rounds' ordering stage is :class:`GavelOrder`."""

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
        order = GavelOrder(interval, objective)
        super().__init__(order, interval=interval, stay=0.0, max_nodes=max_nodes, seed=seed, name=name)
        self.objective = objective

    @property
    def shares(self) -> GavelShares | None:
        return self.scorer.shares

    @property
    def solve_seconds(self) -> list[float]:
        return self.scorer.solve_seconds


__all__ = ["LAS_WEIGHT", "Gavel", "GavelOrder", "GavelPriorityScore", "GavelShares", "max_sum_throughput"]
