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

Composition for a job with several neighbours: the factor is the product of a GPU term, a server term and
an uplink term. The GPU term is the product of the pairwise GPU factors (time slicing compounds: each
extra tenant takes its share again). The server and uplink terms are contention sums: the neighbours'
pressures (communication shares) add up, bounded by the host's (uplink's) capacity, see
:func:`~interference.contention.server_factor` and :func:`~interference.contention.uplink_factor`.
For one neighbour the factor is exactly the pairwise value.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from interference.base import CoLocation, JobDescriptor, Sharing
from interference.contention import (
    GPU_SHARE_COEF,
    comm_share,
    gpu_share_factor,
    host_pressure,
    server_factor,
    uplink_factor,
)
from interference.gavel_data import GavelPairs
from interference.gavel_jobs import gavel_job_type_of
from interference.queries import FactorCache, flatten

# Two jobs that do not fit in one GPU's memory together: one of them would page or fail. Modelled as
# a near stall so that a scheduler sharing GPUs learns to avoid the pair; it is not a measured value.
INFEASIBLE_GPU_FACTOR = 0.05
MIN_FACTOR = 1e-3


class GroundTruthInterference:
    """Measured pairs where available, parametric contention elsewhere; cached per query."""

    name = "oracle"

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
        flat = flatten(queries)
        nq = flat.num_queries
        out = np.ones(nq, dtype=np.float64)
        if len(flat.nbr) == 0:
            return out
        cols = flat.columns()
        descs = flat.descriptors
        jrow = flat.job[flat.nbr_query]  # descriptor of the query's job, per neighbour row

        # GPU level: measured where possible, parametric otherwise; product over neighbours.
        on_gpu = flat.nbr_level == int(Sharing.GPU)
        if on_gpu.any():
            rows = np.flatnonzero(on_gpu)
            vals = np.full(len(rows), np.nan)
            known = np.zeros(len(rows), dtype=bool)
            for k, m in enumerate(rows):
                v = self.measured_factor(descs[jrow[m]], descs[flat.nbr[m]])
                if v is not None:
                    known[k] = True
                    vals[k] = INFEASIBLE_GPU_FACTOR if np.isnan(v) else v
            if (~known).any():
                todo = rows[~known]
                vals[~known] = gpu_share_factor(cols.take(jrow[todo]), cols.take(flat.nbr[todo]), self.gpu_share_coef)
            np.multiply.at(out, flat.nbr_query[rows], vals)  # exact: one neighbour gives its value

        # SERVER level: contention sum of host pressures.
        on_server = flat.nbr_level == int(Sharing.SERVER)
        if on_server.any():
            pressure = host_pressure(cols)
            total = np.bincount(flat.nbr_query[on_server], weights=pressure[flat.nbr[on_server]], minlength=nq)
            out *= server_factor(pressure[flat.job], total)

        # UPLINK level: contention sum of communication shares.
        on_uplink = flat.nbr_level == int(Sharing.UPLINK)
        if on_uplink.any():
            share = comm_share(cols)
            total = np.bincount(flat.nbr_query[on_uplink], weights=share[flat.nbr[on_uplink]], minlength=nq)
            out *= uplink_factor(share[flat.job], total)
        return np.clip(out, MIN_FACTOR, 1.0)
