"""How one job's neighbours combine into its throughput factor; shared by every interference model.

The factor is the product of a GPU term, a server term and an uplink term:

- GPU: the product of the pairwise factors of the neighbours on the job's GPU (time slicing compounds:
  each extra tenant takes its share again). Models differ only in where the pairwise factor comes from.
- SERVER and UPLINK: contention sums of :mod:`interference.contention`: the neighbours' host pressures
  (communication shares) add up, bounded by the host's (uplink's) capacity.

For one neighbour the factor is exactly the pairwise value.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from interference.base import Sharing
from interference.contention import comm_share, host_pressure, server_factor, uplink_factor
from interference.features import JobColumns
from interference.queries import FlatQueries

MIN_FACTOR = 1e-3
# Two jobs that do not fit in one GPU's memory together: one of them would page or fail. Modelled as
# a near stall so that a scheduler sharing GPUs learns to avoid the pair; it is not a measured value.
INFEASIBLE_GPU_FACTOR = 0.05

# (job descriptor indices, neighbour descriptor indices) -> factor of each job sharing its GPU with the neighbour
GpuPairFactors = Callable[[np.ndarray, np.ndarray], np.ndarray]


def compose(flat: FlatQueries, cols: JobColumns, gpu_pairs: GpuPairFactors) -> np.ndarray:
    """Throughput factor of every query of ``flat`` (``cols``: its descriptors as columns)."""
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
    if on_server.any():
        pressure = host_pressure(cols)
        total = np.bincount(flat.nbr_query[on_server], weights=pressure[flat.nbr[on_server]], minlength=nq)
        out *= server_factor(pressure[flat.job], total)
    on_uplink = flat.nbr_level == int(Sharing.UPLINK)
    if on_uplink.any():
        share = comm_share(cols)
        total = np.bincount(flat.nbr_query[on_uplink], weights=share[flat.nbr[on_uplink]], minlength=nq)
        out *= uplink_factor(share[flat.job], total)
    return np.clip(out, MIN_FACTOR, 1.0)
