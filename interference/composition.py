"""How one job's neighbours combine into its throughput factor; shared by every interference model.

The factor is the product of a GPU term, a server term and an uplink term:

- GPU: the product of the pairwise factors of the neighbours on the job's GPU (time slicing compounds:
  each extra tenant takes its share again). Models differ only in where the pairwise factor comes from.
- SERVER and UPLINK: contention sums of :mod:`interference.contention`: the neighbours' host pressures
  (communication shares) add up, bounded by the host's (uplink's) capacity.

For one neighbour the factor is exactly the pairwise value.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from interference.base import JobDescriptor, Sharing
from interference.contention import comm_share, host_pressure, server_factor, uplink_factor
from interference.features import JobColumns
from interference.queries import FlatQueries

MIN_FACTOR = 1e-3
# Two jobs that do not fit in one GPU's memory together: one of them would page or fail. Modelled as
# a near stall so that a scheduler sharing GPUs learns to avoid the pair; it is not a measured value.
INFEASIBLE_GPU_FACTOR = 0.05

# (job descriptor indices, neighbour descriptor indices) -> factor of each job sharing its GPU with the neighbour
GpuPairFactors = Callable[[np.ndarray, np.ndarray], np.ndarray]


class HostScalars:
    """Host pressure and communication share of each descriptor, memoised: they are facts of the job alone,
    and deriving them from columns (datasheet lookups) costs more than composing a small batch. Values
    are those of :func:`host_pressure` and :func:`comm_share`, bit for bit (elementwise arithmetic)."""

    def __init__(self, max_entries: int = 100_000) -> None:
        self._memo: dict[JobDescriptor, tuple[float, float]] = {}
        self.max_entries = max_entries

    def __call__(self, descriptors: Sequence[JobDescriptor]) -> tuple[np.ndarray, np.ndarray]:
        """(pressure, share) arrays, one entry per descriptor."""
        memo = self._memo
        vals = [memo.get(d) for d in descriptors]
        miss = [i for i, v in enumerate(vals) if v is None]
        if miss:
            cols = JobColumns.from_descriptors([descriptors[i] for i in miss])
            new = zip(host_pressure(cols).tolist(), comm_share(cols).tolist(), strict=True)
            if len(memo) + len(miss) > self.max_entries:
                memo.clear()
            for i, v in zip(miss, new, strict=True):
                vals[i] = memo[descriptors[i]] = v
        pressure, share = zip(*vals, strict=True) if vals else ((), ())
        return np.array(pressure, dtype=np.float64), np.array(share, dtype=np.float64)


def compose(
    flat: FlatQueries, cols: JobColumns | None, gpu_pairs: GpuPairFactors, host: HostScalars | None = None
) -> np.ndarray:
    """Throughput factor of every query of ``flat``. ``cols``: its descriptors as columns; ``None`` with a
    ``host`` memo, which then gives the per-job scalars of the server and uplink terms."""
    nq = flat.num_queries
    out = np.ones(nq, dtype=np.float64)
    if len(flat.nbr) == 0:
        return out
    on_gpu = flat.nbr_level == int(Sharing.GPU)
    if on_gpu.any():
        rows = np.flatnonzero(on_gpu)
        vals = gpu_pairs(flat.job[flat.nbr_query[rows]], flat.nbr[rows])
        np.multiply.at(out, flat.nbr_query[rows], vals)
    on_server = flat.nbr_level == int(Sharing.SERVER)
    on_uplink = flat.nbr_level == int(Sharing.UPLINK)
    any_server, any_uplink = bool(on_server.any()), bool(on_uplink.any())
    if host is not None and (any_server or any_uplink):
        pressure, share = host(flat.descriptors)
    if any_server:
        if host is None:
            pressure = host_pressure(cols)
        total = np.bincount(flat.nbr_query[on_server], weights=pressure[flat.nbr[on_server]], minlength=nq)
        out *= server_factor(pressure[flat.job], total)
    if any_uplink:
        if host is None:
            share = comm_share(cols)
        total = np.bincount(flat.nbr_query[on_uplink], weights=share[flat.nbr[on_uplink]], minlength=nq)
        out *= uplink_factor(share[flat.job], total)
    return np.clip(out, MIN_FACTOR, 1.0)
