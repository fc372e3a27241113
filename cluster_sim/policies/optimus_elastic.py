"""Optimus (Peng et al., EuroSys'18) as an elastic policy: GPUs go where they cut estimated remaining time most.

Every ``interval`` (60 s) each active job's remaining time on ``n`` GPUs is estimated as ``W / rate(n)``:

- ``W``, the statistical progress the job still needs. Optimus fits each job's loss curve to predict when
  it converges; the traces here carry no loss curves, so ``W`` is fitted from the jobs that finished
  instead: the conditional mean residual ``E[P − p | P > p]`` of the total progress ``P`` of finished
  jobs of the same application and tenant (of the same application where the tenant has fewer than 3), at
  the job's progress ``p`` so far (:class:`~cluster_sim.policies.run_history.History`). Before any job of its
  application has finished, a job is expected to need the application's standard training (its epochs
  at the smallest batch), or as much again as it has done. No job's own length is read.
  ``oracle=True`` is Pollux's "Optimus+Oracle" baseline instead (see :meth:`ElasticOptimus._oracle_tables`):
  true remaining times from the measured iteration times, jobs admitted in arrival order, one GPU at a time,
  no growth cap from measurements.
- ``rate(n)``, from the job's own step-time measurements (Pollux's throughput model, fitted as in
  :func:`~cluster_sim.policies.elastic.goodput_function`), at the job's own batch (as submitted, raised only
  as far as ``n`` GPUs require): Optimus does not tune batch sizes.

Allocation: jobs are admitted shortest estimated remaining time first, each with its smallest GPU count,
while GPUs last (jobs that have not run yet first, in arrival order: they have no speed to estimate with
and run on one GPU until they have step times, as in Pollux); then every further GPU goes, greedily, to
the job whose estimated remaining time falls most per GPU (Optimus' marginal gain). Counts are capped
as in Pollux (twice the most a job has run on, 64). Jobs without an application (duration traces) are
rigid: admitted in arrival order.
"""

from __future__ import annotations

import numpy as np

from cluster_sim.policies.elastic import (
    ElasticPolicy,
    count_limits,
    fixed_batch_goodput,
    goodput_function,
    greedy_counts,
    kept_batch,
)
from cluster_sim.policies.run_history import History
from cluster_sim.pollux_apps import consolidated
from cluster_sim.protocol import SchedulerView

MIN_HISTORY = 3  # finished jobs of (application, tenant) before that group's own history is used


class ElasticOptimus(ElasticPolicy):
    """Marginal reduction of estimated remaining time per GPU, from fitted (or oracle) remaining work."""

    ordering = "optimus"

    def __init__(self, *, oracle: bool = False, interval: float = 60.0, seed: int = 0, name: str = "optimus", **kw):
        super().__init__(interval=interval, seed=seed, name=name, **kw)
        self.oracle = bool(oracle)

    def reset(self, view: SchedulerView) -> None:
        super().reset(view)
        self._active = np.zeros(0, dtype=np.int64)  # jobs active at the last round
        self._by_group, self._by_app = History(), History()
        tenants = max(len(view.jobs.tenants), 1)
        self._group = view.jobs.model.astype(np.int64) * tenants + view.jobs.tenant.astype(np.int64)
        self._app = view.jobs.model.astype(np.int64)
        self._group_count = np.zeros(int(self._group.max(initial=0)) + 1, dtype=np.int64)
        self._app_count = np.zeros(int(self._app.max(initial=0)) + 1, dtype=np.int64)

    # -- what finished jobs teach --------------------------------------------------------------------------
    def _learn(self, view: SchedulerView, jobs: np.ndarray) -> None:
        """Jobs active last round and gone now have finished: their final report (a finished job's log)
        says how much progress its training took."""
        here = np.zeros(len(view.jobs), dtype=bool)
        here[jobs] = True
        gone = self._active[~here[self._active]]
        reports = [view.job_report(int(j)) for j in gone]
        done = np.array([r is not None for r in reports], dtype=bool)
        total = np.array([r.progress for r in reports if r is not None])
        gone = gone[done]
        if len(gone):
            self._by_group.add(self._group[gone], total)
            self._by_app.add(self._app[gone], total)
            np.add.at(self._group_count, self._group[gone], 1)
            np.add.at(self._app_count, self._app[gone], 1)
        self._active = jobs

    def remaining_work(self, view: SchedulerView, jobs: np.ndarray, reports: list) -> np.ndarray:
        """Expected statistical progress each job still needs (see the module docstring)."""
        p = np.array([r.progress if r is not None else 0.0 for r in reports])
        group, app = self._group[jobs], self._app[jobs]
        own = self._group_count[group] >= MIN_HISTORY
        some = ~own & (self._app_count[app] >= 1)
        est = np.zeros(len(jobs))
        if own.any():
            est[own] = self._by_group.residual(group[own], p[own])
        if some.any():
            est[some] = self._by_app.residual(app[some], p[some])
        for i in np.flatnonzero(~own & ~some).tolist():
            standard = reports[i].app.total_progress if reports[i] is not None else 0.0
            est[i] = max(standard - p[i], p[i])
        return est

    # -- the allocation ---------------------------------------------------------------------------------------
    def allocate(self, view: SchedulerView, jobs: np.ndarray, cur: np.ndarray) -> tuple[np.ndarray, list]:
        tables = self._oracle_tables if self.oracle else self._tables
        seconds, valid, counts, free = self.per_round(view, jobs, lambda: tables(view, jobs))
        step = 1 if self.oracle else None
        return greedy_counts(seconds, valid, counts, free, self.cap, max_step=step), [None] * len(jobs)

    def estimates(self, view: SchedulerView, jobs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Estimated remaining seconds of each job on each GPU count (inf where unknown), the counts it may
        be given, its smallest count and whether it has step times to estimate with; learns from the jobs
        that finished since the last call."""
        self._learn(view, jobs)
        reports = [view.job_report(int(j)) if view.is_elastic(int(j)) else None for j in jobs]
        work = self.remaining_work(view, jobs, reports)
        limits = [count_limits(view, int(j), r, self.pinned) for j, r in zip(jobs, reports, strict=True)]
        width = max(top for _, top in limits) + 1
        seconds = np.full((len(jobs), width), np.inf)  # estimated remaining time on each GPU count
        valid = np.zeros((len(jobs), width), dtype=bool)
        for i, (j, r) in enumerate(zip(jobs.tolist(), reports, strict=True)):
            lo, top = limits[i]
            valid[i, lo : top + 1] = True
            if r is None:
                continue
            counts = np.arange(lo, top + 1)
            good = self.cached(
                j, (self.report_key(r), lo, top),
                lambda r=r, j=j, counts=counts: fixed_batch_goodput(goodput_function(r), r.app, view, j, counts),
            )  # fmt: skip
            rate = good / r.app.init_batch_size
            seconds[i, lo : top + 1] = work[i] / np.maximum(rate, 1e-12)
        lo = np.array([lim[0] for lim in limits], dtype=np.int64)
        profiled = np.array([r is not None for r in reports], dtype=bool)
        return seconds, valid, lo, profiled

    def _tables(self, view: SchedulerView, jobs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        """Estimated remaining seconds per job and GPU count, which counts are allowed, the admitted counts
        and the GPUs left."""
        seconds, valid, lo, profiled = self.estimates(view, jobs)
        width = seconds.shape[1]
        key = np.where(profiled, seconds[np.arange(len(jobs)), lo], -1.0)
        counts = np.zeros(len(jobs), dtype=np.int64)
        free = int(view.topo.num_gpus)
        for i in np.lexsort((view.jobs.arrival[jobs], key)).tolist():
            if lo[i] <= free:
                counts[i] = lo[i]
                free -= int(lo[i])
        valid[counts == 0, 1:] = False  # only admitted jobs grow
        valid[:, 0] = True
        seconds[:, 0] = np.inf
        grow = profiled & (counts > 0)
        valid[~grow] &= np.arange(width)[None, :] == counts[~grow, None]
        return seconds, valid, counts, free

    def _oracle_tables(self, view: SchedulerView, jobs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        """Pollux's Optimus+Oracle: one GPU per job in arrival order while GPUs last, then one GPU at a time
        to the job whose true remaining time falls most, up to its batch over the smallest per-GPU batch.
        The remaining time on ``n`` GPUs is the true one now, times the ratio of measured iteration times
        (tightest placement, the job's own batch) on ``n`` GPUs and on the GPUs it is timed on."""
        gpn = int(view.topo.server_num_gpus.max())
        lows, tops, rows = [], [], []
        for j in jobs.tolist():
            lo, hi = view.gpu_range(j)
            app = view.application(j) if view.is_elastic(j) else None
            if app is None:
                lows.append(lo), tops.append(lo), rows.append(None)
                continue
            model = view.jobs.models[int(view.jobs.model[j])]
            hi = min(hi, max(view.batch_size(j) // app.min_local_bsz, lo))
            if model in self.pinned:
                hi = max(lo, min(hi, self.pinned[model][0]))
            ref = int(view.job_gpus_held[j]) or int(view.jobs.num_gpus[j])
            per_second = view.remaining_time(j) / app.iteration_time(consolidated(ref, gpn), view.batch_size(j))
            it = self.cached(
                j, ("iteration", lo, hi),
                lambda j=j, app=app, lo=lo, hi=hi: np.array(
                    [app.iteration_time(consolidated(c, gpn), kept_batch(view, j, c)) for c in range(lo, hi + 1)]
                ),
            )  # fmt: skip
            lows.append(lo), tops.append(hi), rows.append(per_second * it)
        width = max(tops, default=0) + 1
        seconds = np.full((len(jobs), width), np.inf)
        valid = np.zeros((len(jobs), width), dtype=bool)
        counts = np.zeros(len(jobs), dtype=np.int64)
        free = int(view.topo.num_gpus)
        for i in np.lexsort((jobs, view.jobs.arrival[jobs])).tolist():
            if lows[i] <= free:
                counts[i] = lows[i]
                free -= lows[i]
                valid[i, lows[i] : tops[i] + 1] = True
                if rows[i] is not None:
                    seconds[i, lows[i] : tops[i] + 1] = rows[i]
            valid[i, counts[i]] = True
        return seconds, valid, counts, free
