"""Cutting a workload to a time window and a job count, and compressing or stretching its arrivals.

Every loader ends here, so the three options mean the same for every trace: ``time_range=(t0, t1)`` keeps
jobs arriving in ``[t0, t1)`` seconds from the trace start and makes ``t0`` the new time zero;
``max_jobs=N`` then keeps the first N of those by arrival; ``arrival_scale=F`` finally multiplies every
arrival time (hence every gap between arrivals) by F, so F < 1 offers the same jobs faster (higher load).
"""

from __future__ import annotations

import math

import numpy as np

from cluster_sim.workload import Workload


def check_window_options(time_range: tuple[float, float] | None, max_jobs: int | None, arrival_scale: float) -> None:
    """Raise ValueError naming the bad option."""
    if time_range is not None:
        t0, t1 = time_range
        if not (math.isfinite(t0) and t0 >= 0 and t1 > t0):
            raise ValueError(f"time_range=({t0}, {t1}) needs 0 <= start < end (seconds from the trace start)")
    if max_jobs is not None and (int(max_jobs) != max_jobs or max_jobs < 0):
        raise ValueError(f"max_jobs={max_jobs} must be a non-negative integer")
    if not (math.isfinite(arrival_scale) and arrival_scale > 0):
        raise ValueError(f"arrival_scale={arrival_scale} must be a positive number (< 1 raises the load)")


def window(
    w: Workload,
    *,
    time_range: tuple[float, float] | None = None,
    max_jobs: int | None = None,
    arrival_scale: float = 1.0,
) -> Workload:
    """``w`` restricted to ``time_range`` and ``max_jobs`` with arrivals scaled by ``arrival_scale``."""
    check_window_options(time_range, max_jobs, arrival_scale)
    if time_range is None and max_jobs is None and arrival_scale == 1.0:
        return w
    lo, hi, t0 = 0, len(w), 0.0
    if time_range is not None:
        t0 = float(time_range[0])
        lo = int(np.searchsorted(w.arrival, t0, side="left"))
        hi = int(np.searchsorted(w.arrival, float(time_range[1]), side="left"))
    if max_jobs is not None:
        hi = min(hi, lo + int(max_jobs))
    sl = slice(lo, hi)
    arrival = w.arrival[sl] - t0 if t0 else w.arrival[sl].copy()
    if arrival_scale != 1.0:
        arrival = arrival * float(arrival_scale)
    meta = dict(w.meta)
    meta["window"] = {"time_range": time_range, "max_jobs": max_jobs, "arrival_scale": arrival_scale}
    return Workload(
        arrival=arrival,
        num_gpus=w.num_gpus[sl].copy(),
        duration=w.duration[sl].copy(),
        model=w.model[sl].copy(),
        batch_size=w.batch_size[sl].copy(),
        tenant=w.tenant[sl].copy(),
        models=w.models,
        tenants=w.tenants,
        source=w.source,
        meta=meta,
    )
