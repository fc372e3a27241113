"""Cutting a workload to a time window and a job count, and compressing or stretching its arrivals.

Every loader ends here, so the three options mean the same for every trace: ``time_range=(t0, t1)`` keeps
jobs arriving in ``[t0, t1)`` seconds from the trace start and makes ``t0`` the new time zero;
``max_jobs=N`` then keeps the first N of those by arrival; ``arrival_scale=F`` finally multiplies every
arrival time (hence every gap between arrivals) by F, so F < 1 offers the same jobs faster (higher load).
``load=F`` instead picks that factor so that the kept jobs offer F x the cluster's GPUs over the window
(``end - start``, or up to the last arrival without an end): each job counts with the GPU-time it could
run inside the rescaled window, ``GPUs x min(duration, window end - arrival)``, so a week-long job in a
two-day window offers two days at most, not its whole week, and the cluster really is that busy while
the window lasts. It reads only requests and durations of the jobs as a whole, as an operator sizing a
replay would. ``max_gpus=G`` first drops every job asking for more than G GPUs (a trace replayed on a
cluster, or on GPU types, smaller than its largest jobs).

A window that starts after the trace does keeps the history a scheduler would have at its start:
``meta["history"]`` holds the tenant, GPU count and run time of the jobs that had finished by then
(arrived and ran to completion before ``start``), and nothing about the window's own jobs.
"""

from __future__ import annotations

import math

import numpy as np

from cluster_sim.workload import Workload

BURST_SCALE = 0.01  # load= squeezing a window's arrivals 100-fold or more: a burst, not a load kept over time


class QuietWindowError(ValueError):
    """A window whose jobs cannot offer the load asked: a caller drawing random windows may draw another."""


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
    load: float | None = None,
    cluster_gpus: int | None = None,
    max_gpus: int | None = None,
) -> Workload:
    """``w`` without jobs over ``max_gpus`` GPUs, restricted to ``time_range`` and ``max_jobs`` with arrivals
    scaled by ``arrival_scale``, or rescaled to offer ``load`` x ``cluster_gpus``."""
    check_window_options(time_range, max_jobs, arrival_scale)
    if max_gpus is not None:
        if int(max_gpus) != max_gpus or max_gpus < 1:
            raise ValueError(f"max_gpus={max_gpus} must be a positive integer (the largest GPU count kept)")
        w = w.subset(np.flatnonzero(w.num_gpus <= max_gpus))
    if load is not None:
        if not (math.isfinite(load) and load > 0):
            raise ValueError(f"load={load} must be a positive number (the fraction of the cluster's GPUs offered)")
        if arrival_scale != 1.0:
            raise ValueError("give load=F or arrival_scale=F, not both (load picks the arrival scale itself)")
        if not cluster_gpus or cluster_gpus < 1:
            raise ValueError("load=F needs the cluster's GPU count")
    if time_range is None and max_jobs is None and arrival_scale == 1.0 and load is None:
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
    if load is not None:
        arrival_scale = _scale_for_load(arrival, w.num_gpus[sl], w.duration[sl], time_range, t0, load, cluster_gpus)
    if arrival_scale != 1.0:
        arrival = arrival * float(arrival_scale)
    meta = dict(w.meta)
    if t0 > 0:
        done = np.flatnonzero(w.arrival[:lo] + w.duration[:lo] <= t0)
        meta["history"] = {
            "tenant": w.tenant[done].copy(),
            "num_gpus": w.num_gpus[done].copy(),
            "duration": w.duration[done].copy(),
            "end": w.arrival[done] + w.duration[done] - t0,  # seconds before the window opened (< 0)
        }
    meta["window"] = {"time_range": time_range, "max_jobs": max_jobs, "arrival_scale": arrival_scale, "load": load}
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
        rigid=None if w.rigid is None else w.rigid[sl].copy(),
        job_ids=None if w.job_ids is None else w.job_ids[sl].copy(),
    )


def _scale_for_load(
    arrival: np.ndarray,
    num_gpus: np.ndarray,
    duration: np.ndarray,
    time_range: tuple[float, float] | None,
    t0: float,
    load: float,
    cluster_gpus: int,
) -> float:
    """The arrival scale ``s`` at which these jobs offer ``load`` x ``cluster_gpus`` over the window.

    With arrivals ``a`` (from the window start) and window length ``T``, the rescaled window offers
    ``sum(g * min(d, s * (T - a))) / (cluster_gpus * s * T)``. The numerator minus ``load * G * s * T``
    is concave in ``s`` and zero at 0, so its positive root is unique: found by bisection.
    """
    if len(arrival) < 2:
        raise QuietWindowError("load=F needs a window with at least two jobs")
    end = time_range[1] if time_range is not None and math.isfinite(time_range[1]) else None
    span = (end - t0) if end is not None else float(arrival[-1] - arrival[0])
    if span <= 0:
        raise ValueError("load=F needs jobs arriving over a time span (all arrivals are at one instant)")
    g = num_gpus.astype(np.float64)
    left = span - (arrival - (0.0 if end is not None else float(arrival[0])))  # time to the window's end
    target = load * cluster_gpus * span
    most = float(np.dot(g, left)) / (cluster_gpus * span)  # the load if every job arrived at once
    if most <= load:
        raise QuietWindowError(
            f"load={load}: this window's {len(arrival)} jobs offer at most {most:.3g} x the cluster's GPUs "
            "(even arriving all at once); choose a lower load, a longer window or a smaller cluster"
        )

    def excess(s: float) -> float:
        return float(np.dot(g, np.minimum(duration, s * left))) - target * s

    lo, hi = 0.0, float(np.dot(g, duration)) / target * 1.001 + 1e-12
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if excess(mid) > 0:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def burst_warning(w: Workload) -> str | None:
    """Why a ``load=`` window is one burst of arrivals rather than that load kept over time, or None.

    ``load`` is met while the rescaled window lasts; a window whose jobs are few for the cluster is squeezed
    until they arrive within seconds or minutes, and the run is then mostly the drain of that burst on an
    idle cluster (the Philly trace's two weeks at load 0.9 of dc-1k arrive in 56 s)."""
    win = w.meta.get("window") or {}
    load, scale, time_range = win.get("load"), win.get("arrival_scale"), win.get("time_range")
    if load is None or scale is None or time_range is None or scale > BURST_SCALE or len(w) < 2:
        return None
    t0, t1 = time_range
    span = t1 - t0 if math.isfinite(t1) else float(w.arrival[-1] - w.arrival[0]) / scale
    return (
        f"load={load:g} squeezes this window's {_duration(span)} of arrivals into {_duration(span * scale)} "
        f"(arrival scale {scale:.2g}): its {len(w):,} jobs arrive as one burst and most of the run is their drain "
        f"on a nearly idle cluster, not a load of {load:g} kept over time; for that, choose a longer window "
        "(start=, end=), more GPUs per job (gpu_scale=K), the whole trace at a set pace (arrival_scale=F, no load=) "
        "or a smaller cluster"
    )


def _duration(seconds: float) -> str:
    for unit, size in (("days", 86400.0), ("h", 3600.0), ("min", 60.0)):
        if seconds >= 2 * size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.0f} s"
