"""Sia (Jayaram Subramanya et al., SOSP'23): heterogeneity-aware goodput-optimised allocation by an ILP.

Every ``interval`` (60 s) Sia chooses for every active job one *configuration*: a GPU type and a GPU count
on that type (1, 2 or 4 GPUs inside one node, or whole nodes; a job that can take none of these, such as a
rigid job of 3 GPUs, its own count), or nothing, jointly for all jobs:

- **Goodput.** For each job and configuration, its goodput there: statistical efficiency at its current
  gradient noise times samples per second on the configuration's tightest placement, at the best batch
  size (a grid of the allowed global batches; a rigid job keeps its GPU count and batch). Sia learns these
  from each job's profiles on each type; here they are the application's measured step times on that type
  (:meth:`~cluster_sim.pollux_apps.PolluxApplication.on`), i.e. Sia once its models have converged. A job
  whose work is a duration (no measured application) has its GPU count times its model's profiled speed on
  the type, the speeds Gavel reads.
- **Normalisation.** A job's goodputs are divided by its smallest one over all configurations, so every
  job's least useful configuration is worth 1 and jobs compare by relative speedup, not raw samples/s.
- **Restart factor.** A running job's value on any configuration other than its current one is multiplied
  by Pollux's factor ``max(age − restarts · r, 0) / (age + r)`` with ``r`` the job's restart cost (Sia's
  artifact: ``sia_use_pollux_realloc_factor``), 1 while the job is younger than ``r``.
- **Objective.** Minimise ``Σ x_jc · (speedup_jc^p + λ_a · changed_jc) + λ_n · (jobs − Σ x_jc)`` with
  fairness power ``p = −0.5``, ``λ_n = 1.1`` for every job left without GPUs, ``λ_a = 0.01`` for changing
  a running job's configuration (the artifact computes λ_a but leaves it out of its objective; here it
  breaks near-ties towards staying), ``speedup^p`` rounded to 2 decimals as the artifact does.
- **Constraints.** At most one configuration per job; per GPU type, the GPUs of the chosen configurations
  at most the type's GPUs. Binary variables; solved by HiGHS (``scipy.optimize.milp``) to a 1e-4 gap.

``oracle=q > 0`` (``sia-oracle``: q = 0.5) is a privileged reference, not Sia: each job's terms are weighted
by ``(median remaining time / its true remaining time) ** q``, so jobs near their end weigh more, as SRTF
would have it: what knowing remaining work adds to Sia's allocation. On Sia's eight Philly workloads
(``heuristic_spread.py --regime sia-hetero``) q = 0.5 is 2.2% ± 2.9% below Sia and q = 1 5.7% ± 4.8% above.

The chosen (type, count) pairs are then placed as the other elastic policies place counts (keep unchanged
placements, best-fit one node, else the emptiest nodes of that type), and a count that fragmentation
prevents is lowered. Differences from the artifact: goodputs are the measured ones rather than fitted
online from each job's first runs (no bootstrap period); jobs in the middle of a restart are not pinned.
"""

from __future__ import annotations

import time
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from cluster_sim.gpu_profiles import RESTART_COST
from cluster_sim.native_output import native_stdout_silenced
from cluster_sim.policies.elastic import ElasticPolicy
from cluster_sim.pollux_apps import consolidated
from cluster_sim.protocol import RUNNING, SchedulerView

BATCH_GRID = 8  # batch sizes tried per configuration, geometric over the allowed range


class TypeLayout(NamedTuple):
    """One GPU type as Sia's program sees it."""

    name: str
    per_node: int  # GPUs per node
    total: int  # GPUs of the type in the cluster
    gpu: int  # one GPU of the type (where a job's profiled speed on it is read)
    confs: list[int]  # GPU counts a job may get on it
    extra: frozenset[int] = frozenset()  # counts among them only for jobs that can take none of Sia's own


@lru_cache(maxsize=65536)
def batch_candidates(lo: int, hi: int) -> tuple[int, ...]:
    """The batch sizes Sia tries for a configuration whose allowed range is ``[lo, hi]`` (a round asks for the
    same few ranges thousands of times)."""
    return tuple(np.unique(np.geomspace(lo, hi, BATCH_GRID).round().astype(np.int64)).tolist())


CLIP = 3000.0  # the artifact's cap on a normalised goodput term


def configurations(gpus_per_node: int, nodes: int) -> list[int]:
    """GPU counts Sia considers on one type: 1, 2, 4 (within a node), then whole nodes (Sia's tables)."""
    small = [c for c in (1, 2, 4) if c < gpus_per_node]
    return small + [gpus_per_node * k for k in range(1, nodes + 1)]


class Sia(ElasticPolicy):
    """Heterogeneity-aware configuration choice by an integer program, every ``interval`` seconds."""

    ordering = "sia"

    def __init__(
        self,
        *,
        interval: float = 60.0,
        p: float = -0.5,
        lambda_n: float = 1.1,
        lambda_a: float = 0.01,
        max_nodes: int = 16,
        oracle: float = 0.0,
        seed: int = 0,
        name: str = "sia",
    ) -> None:
        if not p < 0:
            raise ValueError(f"Sia's fairness power p must be < 0 (its objective is minimised), got {p}")
        if not lambda_n > 1.0:
            raise ValueError(f"lambda_n must exceed 1 (the least a normalised allocation gains), got {lambda_n}")
        super().__init__(interval=interval, max_nodes=max_nodes, pinned={}, seed=seed, name=name)
        if oracle < 0:
            raise ValueError(f"oracle is the power of the remaining-time weight, >= 0 (0: Sia itself), got {oracle}")
        self.p, self.lambda_n, self.lambda_a = float(p), float(lambda_n), float(lambda_a)
        self.oracle = float(oracle)
        self.solve_seconds: list[float] = []

    # -- the elastic round, with the type chosen per job -----------------------------------------------------
    def _allocate_placed(self, view: SchedulerView, jobs: np.ndarray, cur: np.ndarray, least: np.ndarray):
        types, counts, batches = self._solve(view, jobs, cur)
        placement = self._place(view, jobs, cur, counts.copy(), least, job_types=types)
        plans = [batches[i] for i in range(len(jobs))]
        return placement, plans

    def batch_for(self, view: SchedulerView, job: int, gpus: np.ndarray, plan) -> int:
        """The batch the solver's goodput assumed for the configuration (its count may have been lowered)."""
        lo, hi = view.batch_range(job, len(gpus))
        best = plan.get(len(gpus)) if plan else None
        if best is None:
            return int(min(max(int(view.batch_size(job)), lo), hi))
        return int(min(max(best, lo), hi))

    # -- goodputs ----------------------------------------------------------------------------------------------
    def _type_layout(self, view: SchedulerView, ranges: list[tuple[int, int]]) -> list[TypeLayout]:
        """Each GPU type of the cluster: its name, GPUs per node and in all, a GPU of it, its configurations.

        A job whose GPU range (``ranges``: this round's jobs') holds none of Sia's counts on a type, such as a
        rigid job of 3 or 6 GPUs, gets its least count there as an extra configuration of its own: Sia's
        tables have no such counts, and without one the job would wait forever."""
        topo = view.topo
        out = []
        for t, name in enumerate(topo.gpu_types):
            mask = np.asarray(topo.server_gpu_type) == t
            gpn = int(topo.server_num_gpus[mask].max())
            total = int(topo.server_num_gpus[mask].sum())
            nodes = min(int(mask.sum()), self.max_nodes)
            first = int(np.asarray(topo.server_first_gpu)[mask][0])
            own = [c for c in configurations(gpn, nodes) if c <= total]
            extra = frozenset(lo for lo, hi in ranges if lo <= total and not any(lo <= c <= hi for c in own))
            out.append(TypeLayout(name, gpn, total, first, sorted({*own, *extra}), extra))
        return out

    def _goodputs(
        self, view: SchedulerView, j: int, layout: list[TypeLayout]
    ) -> tuple[list[np.ndarray], list[dict[int, int]]]:
        """Goodput of job ``j`` on every configuration of every type (0: not allowed) and the batch behind it."""
        lo_gpus, hi_gpus = view.gpu_range(j)
        epoch = 0
        report = view.job_report(j)
        if report is not None:  # the epoch its progress is in (gradient noise, hence efficiency, moves with it)
            app0 = report.app
            ends = app0._cache.get("sia_epoch_ends")
            if ends is None:
                ends = app0._cache["sia_epoch_ends"] = np.array([app0.progress_at(e + 1) for e in range(app0.epochs)])
            epoch = min(int(np.searchsorted(ends, report.progress, "right")), app0.epochs - 1)
        out, plans = [], []
        for name, gpn, _, gpu, confs, extra in layout:
            app = view.app_on_type(j, name)
            good = np.zeros(len(confs))
            plan: dict[int, int] = {}
            own = any(lo_gpus <= n <= hi_gpus for n in confs if n not in extra)
            for c_i, n in enumerate(confs):
                if not lo_gpus <= n <= hi_gpus or (own and n in extra):
                    continue
                if app is None:  # a job with a duration: its GPUs at its model's profiled speed on the type
                    good[c_i] = n * view.estimated_speed(j, np.array([gpu]))
                    continue
                blo, bhi = view.batch_range(j, n)
                cand = batch_candidates(blo, bhi) if view.is_elastic(j) else (int(view.batch_size(j)),)
                key = ("sia", name, n, epoch, cand)
                hit = app._cache.get(key)
                if hit is None:
                    place = consolidated(n, gpn)
                    rates = [
                        app.gain(app.effective_batch(int(b), n), epoch) / app.iteration_time(place, int(b))
                        for b in cand
                    ]
                    k = int(np.argmax(rates))
                    hit = app._cache[key] = (float(rates[k]), int(cand[k]))
                good[c_i], plan[n] = hit
            out.append(good)
            plans.append(plan)
        return out, plans

    def job_weights(self, view: SchedulerView, jobs: np.ndarray) -> np.ndarray | None:
        """A positive weight per job on its terms of the objective (None: all 1, Sia itself); subclasses
        that rank jobs (by estimated remaining work, learned scores) override it."""
        if self.oracle <= 0:
            return None
        rem = np.maximum(view.remaining_times(jobs), 1.0)  # privileged: jobs near their end weigh more
        return (np.median(rem) / rem) ** self.oracle

    def restart_factors(self, view: SchedulerView, jobs: np.ndarray) -> np.ndarray:
        """Pollux's discount on moving each job: ``max(age − restarts · r, 0) / (age + r)`` (1 while younger
        than its restart cost ``r``), so jobs that restarted often relative to their age stay put."""
        ages = view.now - view.jobs.arrival[jobs]
        restarts = np.maximum(self._restarts[jobs], 0)
        factor = np.ones(len(jobs))
        for i, j in enumerate(jobs.tolist()):
            app = view.application(j)
            r = RESTART_COST.get(app.name, 30.0) if app is not None else 30.0
            if ages[i] >= r:
                factor[i] = max(ages[i] - restarts[i] * r, 0.0) / (ages[i] + r)
        return factor

    # -- the integer program -----------------------------------------------------------------------------------
    def _solve(self, view: SchedulerView, jobs: np.ndarray, cur: np.ndarray):
        topo = view.topo
        layout = self._type_layout(view, [view.gpu_range(j) for j in jobs.tolist()])
        offsets = np.cumsum([0] + [len(t.confs) for t in layout])
        width = int(offsets[-1])
        conf_type = np.repeat(np.arange(len(layout)), [len(t.confs) for t in layout])
        conf_gpus = np.array([n for t in layout for n in t.confs], dtype=np.float64)
        gain = np.zeros((len(jobs), width))
        batches: list[dict] = []
        current = np.full(len(jobs), -1)
        for i, j in enumerate(jobs.tolist()):
            goods, plans = self._goodputs(view, j, layout)
            row = np.concatenate(goods)
            pos = row > 0
            if pos.any():
                gain[i] = np.where(pos, row / row[pos].min(), 0.0)
            batches.append({(t, n): b for t, plan in enumerate(plans) for n, b in plan.items()})
            if view.job_state(j) == RUNNING:
                g = np.asarray(view.placement(j))
                t = int(topo.server_gpu_type[int(topo.gpu_server[g[0]])])
                hit = np.flatnonzero((conf_type == t) & (conf_gpus == len(g)))
                current[i] = int(hit[0]) if len(hit) else -1
        factor = self.restart_factors(view, jobs)
        allowed = gain > 0
        same = np.arange(width)[None, :] == current[:, None]
        value = np.where(same, gain, gain * factor[:, None])
        # a value the restart factor zeroed costs the cap (the artifact: 0 ** p = inf, clipped)
        cost = np.minimum(np.round(np.power(np.maximum(value, 1e-12), self.p), 2), CLIP)
        cost = np.where(allowed, cost, 0.0) + np.where((current[:, None] >= 0) & ~same, self.lambda_a, 0.0)
        # variables: x_jc for allowed (j, c); objective Σ x (cost − λ_n) (+ λ_n · jobs, a constant)
        rows_j, cols_c = np.nonzero(allowed)
        n_var = len(rows_j)
        t0 = time.perf_counter()
        types = np.full(len(jobs), -1)
        counts = np.zeros(len(jobs), dtype=np.int64)
        if n_var:
            c = cost[rows_j, cols_c] - self.lambda_n
            weight = self.job_weights(view, jobs)
            if weight is not None:
                c = c * weight[rows_j]
            capacity = np.array([t.total for t in layout], dtype=np.float64)
            chosen = unique_unconstrained_optimum(c, rows_j, conf_type[cols_c], conf_gpus[cols_c], capacity)
            if chosen is None:
                chosen = _solve_ilp(c, rows_j, conf_type[cols_c], conf_gpus[cols_c], capacity, len(jobs))
            types[rows_j[chosen]] = conf_type[cols_c[chosen]]
            counts[rows_j[chosen]] = conf_gpus[cols_c[chosen]].astype(np.int64)
        self.solve_seconds.append(time.perf_counter() - t0)
        plans = [{n: b for (t, n), b in batches[i].items() if t == types[i]} for i in range(len(jobs))]
        return types, counts, plans


_SOLVED: dict[bytes, np.ndarray] = {}  # recent programs and their answers (see _solve_ilp)
_SOLVED_MAX = 256


def _solve_ilp(
    cost: np.ndarray, job: np.ndarray, gpu_type: np.ndarray, gpus: np.ndarray, capacity: np.ndarray, jobs: int
) -> np.ndarray:
    """The variables HiGHS sets to 1: at most one per job, each type's GPUs within its capacity, least cost.

    Costs are rounded, so a round often poses the very program an earlier one did (201 of the 817 of Sia's run
    on its first Philly workload): HiGHS answers the same program the same way, so the answer is kept and
    given again (the schedule is the same bit for bit, a fifth less solver time)."""
    key = b"".join(a.dtype.str.encode() + a.tobytes() for a in (cost, job, gpu_type, gpus, capacity))
    key += jobs.to_bytes(8, "little")
    if (hit := _SOLVED.get(key)) is not None:
        return hit.copy()
    chosen = _run_highs(cost, job, gpu_type, gpus, capacity, jobs)
    if len(_SOLVED) >= _SOLVED_MAX:
        del _SOLVED[next(iter(_SOLVED))]  # the oldest
    _SOLVED[key] = chosen.copy()
    return chosen


def _run_highs(
    cost: np.ndarray, job: np.ndarray, gpu_type: np.ndarray, gpus: np.ndarray, capacity: np.ndarray, jobs: int
) -> np.ndarray:
    import scipy.optimize  # here: every command imports the policies, few run Sia (scipy.optimize: 0.3 s)
    import scipy.sparse

    n_var = len(cost)
    one = scipy.sparse.csr_array((np.ones(n_var), (job, np.arange(n_var))), shape=(jobs, n_var))
    cap = scipy.sparse.csr_array((gpus, (gpu_type, np.arange(n_var))), shape=(len(capacity), n_var))
    with native_stdout_silenced():  # HiGHS prints debugging lines from C++ on some programs
        res = scipy.optimize.milp(
            cost,
            integrality=np.ones(n_var),
            bounds=scipy.optimize.Bounds(0, 1),
            constraints=[
                scipy.optimize.LinearConstraint(one, -np.inf, 1),
                scipy.optimize.LinearConstraint(cap, -np.inf, capacity),
            ],
            options={"mip_rel_gap": 1e-4, "time_limit": 10.0},
        )
    if res.x is None:
        raise RuntimeError(f"sia: the allocation ILP found no solution ({res.message})")
    return np.flatnonzero(res.x > 0.5)


def unique_unconstrained_optimum(
    cost: np.ndarray, job: np.ndarray, gpu_type: np.ndarray, gpus: np.ndarray, capacity: np.ndarray
) -> np.ndarray | None:
    """The variables the allocation ILP sets to 1 when that needs no solver, else None.

    The ILP gives each job at most one configuration (its variables, ``job`` ascending) within each type's
    ``capacity`` and minimises the summed ``cost``. Each job on its cheapest configuration where that costs
    below 0 is the optimum when it fits every type, and the only one when no chosen job's cheapest cost is
    tied (costs are rounded, so ties happen) and none is exactly 0: then HiGHS returns it too (the schedules of
    ``sia`` and ``sia-philly`` on four of Sia's workloads are the same bit for bit with and without this path).
    Most of Sia's rounds on a cluster with room are such programs."""
    starts = np.flatnonzero(np.r_[True, job[1:] != job[:-1]])
    least = np.minimum.reduceat(cost, starts)
    sizes = np.diff(np.r_[starts, len(cost)])
    at_least = cost == np.repeat(least, sizes)
    ties = np.add.reduceat(at_least.astype(np.int64), starts)
    if np.any(least == 0.0) or np.any((least < 0.0) & (ties > 1)):
        return None
    chosen = np.flatnonzero(at_least & np.repeat(least < 0.0, sizes))
    used = np.bincount(gpu_type[chosen], weights=gpus[chosen], minlength=len(capacity))
    return chosen if np.all(used <= capacity) else None


__all__ = ["Sia", "configurations", "unique_unconstrained_optimum"]
