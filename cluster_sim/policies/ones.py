"""ONES (Bian et al., SC'21): each job's batch size chosen by an online evolutionary search.

ONES scales a job's global batch size and lets its GPUs follow: each GPU keeps the per-GPU batch the job
was submitted with, so doubling the batch doubles the GPUs. Every ``interval`` (60 s) it evolves a
population of candidate schedules, each a batch size (so a GPU count, 0 for paused) per active job:

- **Genes.** A job's choices are its smallest count, then doublings up to its cap (twice the most it has
  run on, 64; a job that has not run yet has only its smallest count, as in Pollux), and paused.
- **Fitness.** The sum over jobs of ``weight x speedup``: the speedup is the job's goodput at that batch
  on those GPUs (its own step-time measurements and gradient statistics, Pollux's model,
  :func:`~cluster_sim.policies.elastic.goodput_function`) over its goodput on its smallest count, so a
  batch that scales badly or costs statistical efficiency scores low; a job that has not run scores 1.
  The weight ``1 / (1 + attained GPU-hours)`` favours young jobs, which shortens the average completion
  time as least-attained-service does, and a job whose count changes has its term multiplied by Pollux's
  restart penalty.
- **Search.** 16 candidates, 20 generations: uniform crossover of two parents, each gene mutated with
  probability ``2 / jobs`` one step up or down the ladder or to paused, a repair that pauses the
  lowest-priority jobs until the GPUs suffice, and the best 16 of parents and children kept. The first
  population holds the current schedule, the previous round's best, and all jobs at their smallest
  count in least-attained-service order, so the search continues online from round to round.

The generator is seeded by the policy's seed: the same seed gives the same schedule bit for bit.
"""

from __future__ import annotations

import numpy as np

from cluster_sim.policies.elastic import ElasticPolicy, count_limits, goodput_function
from cluster_sim.protocol import SchedulerView

HOUR = 3600.0


class ONES(ElasticPolicy):
    """Online evolutionary search over batch sizes (GPUs follow the batch)."""

    ordering = "ones"
    honours_cap = False  # its search picks from its own ladders; a rerun would only repeat it

    def __init__(
        self,
        *,
        population: int = 16,
        generations: int = 20,
        interval: float = 60.0,
        seed: int = 0,
        name: str = "ones",
        **kw,
    ) -> None:
        if population < 4 or generations < 1:
            raise ValueError(f"ONES needs population >= 4 and generations >= 1, got {population}, {generations}")
        super().__init__(interval=interval, seed=seed, name=name, **kw)
        self.population = int(population)
        self.generations = int(generations)

    def reset(self, view: SchedulerView) -> None:
        super().reset(view)
        self._best = np.zeros(len(view.jobs), dtype=np.int64)  # GPU count each job had in the last best

    @staticmethod
    def _ladder(view: SchedulerView, j: int, report, lo: int, top: int) -> tuple[list, list, list]:
        """A job's GPU counts (its smallest, then doublings up to its cap), speedups and batch sizes."""
        counts = [lo]
        while report is not None and counts[-1] * 2 <= top:
            counts.append(counts[-1] * 2)
        if report is not None and counts[-1] < top:
            counts.append(top)
        local = view.jobs.batch_size[j] / view.jobs.num_gpus[j]  # the per-GPU batch it was submitted with
        batches = []
        for n in counts:
            blo, bhi = view.batch_range(j, n)
            batches.append(int(min(max(round(local * n), blo), bhi)))
        if report is None:
            return counts, [1.0] * len(counts), batches
        fn, app, gpn = goodput_function(report), report.app, int(view.topo.server_num_gpus.max())
        good = []
        for n, b in zip(counts, batches, strict=True):
            atomic, accum = app.batch_plan(b, n)
            good.append(float(fn.evaluate(-(-n // gpn), n, atomic, accum)))
        return counts, [g / max(good[0], 1e-12) for g in good], batches

    def _options(self, view: SchedulerView, jobs: np.ndarray, cur: np.ndarray):
        """(gpus, value, batch) tables of shape (jobs, choices); choice 0 is paused."""
        rows = []
        for j in jobs.tolist():
            report = view.job_report(j) if view.is_elastic(j) else None
            lo, top = count_limits(view, j, report, self.pinned)
            key = (self.report_key(report), lo, top)
            rows.append(self.cached(j, key, lambda j=j, r=report, lo=lo, top=top: self._ladder(view, j, r, lo, top)))
        k = 1 + max(len(r[0]) for r in rows)
        gpus = np.zeros((len(jobs), k), dtype=np.int64)
        value = np.full((len(jobs), k), -np.inf)
        batch = np.zeros((len(jobs), k), dtype=np.int64)
        value[:, 0] = 0.0
        weight = 1.0 / (1.0 + np.array([view.attained_service(int(j)) for j in jobs]) / HOUR)
        penalty = self.restart_penalty(view, jobs)
        for i, (counts, speed, batches) in enumerate(rows):
            c = np.array(counts)
            gpus[i, 1 : len(c) + 1] = c
            batch[i, 1 : len(c) + 1] = batches
            value[i, 1 : len(c) + 1] = weight[i] * np.array(speed) * np.where(c == cur[i], 1.0, penalty[i])
        return gpus, value, batch

    def allocate(self, view: SchedulerView, jobs: np.ndarray, cur: np.ndarray) -> tuple[np.ndarray, list]:
        gpus, value, batch = self._options(view, jobs, cur)
        nj, k = gpus.shape
        rows = np.arange(nj)
        capacity = int(view.topo.num_gpus)
        choices = (value > -np.inf).sum(axis=1)  # paused + the job's counts

        def nearest(target: np.ndarray) -> np.ndarray:  # the choice whose count is closest below target
            fits = (gpus <= target[:, None]) & (value > -np.inf)
            fits[:, 0] = True
            return np.where(target > 0, (fits * np.arange(k)).max(axis=1), 0)

        def repair(pop: np.ndarray) -> np.ndarray:  # pause the lowest-priority jobs until the GPUs suffice
            for _ in range(nj):
                used = np.cumsum(gpus[rows[None, :], pop], axis=1)
                over = used > capacity
                if not over.any():
                    break
                first = np.where(over.any(axis=1), over.argmax(axis=1), nj)
                hit = np.flatnonzero(first < nj)
                pop[hit, first[hit]] = 0
            return pop

        def fitness(pop: np.ndarray) -> np.ndarray:
            return value[rows[None, :], pop].sum(axis=1)

        seeds = [nearest(cur), nearest(self._best[jobs]), np.ones(nj, dtype=np.int64)]
        pop = np.array(seeds, dtype=np.int64)
        rng = self.rng
        kids = pop[rng.integers(len(seeds), size=max(self.population - len(seeds), 0))]
        self._mutate(kids, choices, rng)
        pop = repair(np.vstack([pop, kids]))
        for _ in range(self.generations):
            a, b = rng.integers(len(pop), size=(2, self.population))
            mask = rng.random((self.population, nj)) < 0.5
            kids = np.where(mask, pop[a], pop[b])
            self._mutate(kids, choices, rng)
            kids = repair(kids)
            both = np.vstack([pop, kids])
            fit = fitness(both)
            keep = np.lexsort((np.arange(len(both)), -fit))[: self.population]
            pop = both[keep]
        best = pop[0]
        counts = gpus[rows, best]
        self._best[jobs] = counts
        return counts, [int(batch[i, best[i]]) for i in range(nj)]

    @staticmethod
    def _mutate(pop: np.ndarray, choices: np.ndarray, rng: np.random.Generator) -> None:
        """Each gene of each candidate (rows of ``pop``) with probability 2 / jobs: one step up or down the
        job's ladder, or paused."""
        nj = pop.shape[1]
        hit = rng.random(pop.shape) < 2.0 / max(nj, 1)
        rows, cols = np.nonzero(hit)
        if not len(rows):
            return
        move = rng.integers(-1, 2, size=len(rows))  # -1 down, 0 pause, +1 up
        pop[rows, cols] = np.where(move == 0, 0, np.clip(pop[rows, cols] + move, 0, choices[cols] - 1))

    def batch_for(self, view: SchedulerView, job: int, gpus: np.ndarray, plan) -> int:
        """The batch the search chose, kept inside what the GPUs it got allow."""
        lo, hi = view.batch_range(job, len(gpus))
        return int(min(max(plan, lo), hi)) if plan else lo
