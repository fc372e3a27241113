"""The simulator's ground truth for interference (``--interference oracle``).

Per neighbour, the closest level it shares with the job decides the mechanism:

- GPU: Gavel's measured normalised throughput where the pair was measured on that GPU type (both
  descriptors recognised as Gavel job types by name or by facts, see
  :func:`~interference.gavel_jobs.gavel_job_type_of`), otherwise the fitted parametric GPU-sharing model
  of :mod:`interference.contention`. For a measured pair of two instances of the same job type the two
  instances' values are averaged (the simulator cannot tell which instance is which). A pair Gavel
  found infeasible (out of GPU memory) gets ``INFEASIBLE_GPU_FACTOR``; schedulers that share GPUs can
  ask :meth:`GroundTruthInterference.feasible`.
- SERVER and UPLINK: the contention models of :mod:`interference.contention`.

Several neighbours combine as :mod:`interference.composition` says (shared with the learned model).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from interference.base import CoLocation, JobDescriptor, Sharing
from interference.composition import INFEASIBLE_GPU_FACTOR, HostScalars, compose
from interference.contention import GPU_SHARE_COEF, gpu_share_factor
from interference.gavel_data import GavelPairs
from interference.gavel_jobs import gavel_job_type_of
from interference.queries import FactorCache, FlatQueries, flatten


class GroundTruthInterference:
    """Measured pairs where available, parametric contention elsewhere; cached per query."""

    name = "oracle"
    pure = True  # answers depend on the query alone, so callers may memoise them

    def __init__(self, measured: GavelPairs | None = None, gpu_share_coef: np.ndarray = GPU_SHARE_COEF):
        self.gpu_share_coef = np.asarray(gpu_share_coef, dtype=np.float64)
        self._measured: dict[tuple[str, str, str], float] = {}
        if measured is not None:
            one = measured.scale_factor == 1
            for g, a, b, na, nb, ok in zip(
                measured.gpu_type[one],
                measured.job_a[one],
                measured.job_b[one],
                measured.norm_a[one],
                measured.norm_b[one],
                measured.feasible[one],
                strict=True,
            ):
                g, a, b = str(g), str(a), str(b)
                if not ok:
                    self._measured[(g, a, b)] = self._measured[(g, b, a)] = np.nan
                elif a == b:
                    self._measured[(g, a, a)] = 0.5 * (float(na) + float(nb))
                else:
                    self._measured[(g, a, b)] = float(na)
                    self._measured[(g, b, a)] = float(nb)
        self._types: dict[JobDescriptor, str | None] = {}
        self._host = HostScalars()
        self._cache = FactorCache(self._compute)

    @property
    def num_measured(self) -> int:
        return len(self._measured)

    def _gavel_type(self, job: JobDescriptor) -> str | None:
        if job not in self._types:
            self._types[job] = gavel_job_type_of(job)
        return self._types[job]

    def measured_factor(self, job: JobDescriptor, other: JobDescriptor) -> float | None:
        """Gavel's value for ``job`` sharing a GPU with ``other``; NaN if infeasible, None if not measured."""
        if not self._measured or job.gpu_type.upper() != other.gpu_type.upper():
            return None
        a, b = self._gavel_type(job), self._gavel_type(other)
        if a is None or b is None:
            return None
        return self._measured.get((job.gpu_type.upper(), a, b))

    def feasible(self, job: JobDescriptor, other: JobDescriptor) -> bool:
        """False only for pairs Gavel measured as not fitting on one GPU together."""
        v = self.measured_factor(job, other)
        return v is None or not np.isnan(v)

    def pair_factor(self, job: JobDescriptor, other: JobDescriptor, level: Sharing) -> float:
        """Throughput factor of ``job`` with a single neighbour ``other`` at ``level``."""
        return float(self.throughput_factors([CoLocation(job, ((other, Sharing(level)),))])[0])

    def throughput_factors(self, queries: Sequence[CoLocation]) -> np.ndarray:
        return self._cache(queries)

    def _compute(self, queries: list[CoLocation]) -> np.ndarray:
        return self.flat_factors(flatten(queries))

    def flat_factors(self, flat: FlatQueries) -> np.ndarray:
        """Factors of queries already in flat form (what the simulator builds; not cached here)."""
        descs = flat.descriptors

        def gpu_pairs(job: np.ndarray, nbr: np.ndarray) -> np.ndarray:
            """Measured where possible, parametric otherwise."""
            vals = np.full(len(job), np.nan)
            known = np.zeros(len(job), dtype=bool)
            for k, (j, n) in enumerate(zip(job.tolist(), nbr.tolist(), strict=True)):
                v = self.measured_factor(descs[j], descs[n])
                if v is not None:
                    known[k] = True
                    vals[k] = INFEASIBLE_GPU_FACTOR if np.isnan(v) else v
            if (~known).any():
                cols = flat.columns()
                vals[~known] = gpu_share_factor(cols.take(job[~known]), cols.take(nbr[~known]), self.gpu_share_coef)
            return vals

        return compose(flat, None, gpu_pairs, host=self._host)
