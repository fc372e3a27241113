"""One GPU type per job: any placement strategy, run on one GPU type at a time, in a stated type order.

On a cluster of several GPU types a job runs on one type (Sia's rule, enforced by the simulator for
schedulers with ``one_gpu_type``). :func:`one_type_placement` wraps a strategy of :mod:`cluster_sim.placement`
so that it sees only the free GPUs of one type, trying the types in the order a ``gpu_type`` preference
gives:

- ``any``: type-blind; the type with the most free GPUs first (the strategy's own choice, kept to one type).
- ``fastest``: the type the job's model runs fastest on first (measured speeds per model and type, or the
  application's step times on each type), then the next: a greedy type-aware heuristic.
- ``slowest``: the reverse; the worst type choice, a bound for how much type matching is worth.

A job that fits on no single type waits (the wrapped strategy returns None although enough GPUs may be
free in total). On a single-type cluster the strategy is returned unchanged.
"""

from __future__ import annotations

import weakref
from functools import partial

import numpy as np

from cluster_sim.placement import FreePool, Placement
from cluster_sim.pollux_apps import consolidated
from cluster_sim.protocol import SchedulerView

GPU_TYPE_ORDERS = ("any", "fastest", "slowest")


class _OneTypeView:
    """What a :class:`FreePool` reads from a view, with every GPU of other types marked as held."""

    def __init__(self, view: SchedulerView, pool: FreePool, servers: np.ndarray, holder: int) -> None:
        topo = pool.topo
        self.topo = topo
        self.jobs = view.jobs
        mask = np.zeros(topo.num_servers, dtype=bool)
        mask[servers] = True
        self.gpu_job = np.where(mask[topo.gpu_server], pool.gpu_job, holder).astype(pool.gpu_job.dtype)
        self.server_free = np.where(mask, pool.server_free[: topo.num_servers], 0)
        self.num_free = int(self.server_free.sum())
        self.free_counts = None


def type_speeds(view: SchedulerView, job: int, n: int) -> np.ndarray:
    """Relative speed of ``job`` on ``n`` GPUs of each GPU type of the cluster (0: the type has fewer GPUs):
    its application's steps per second on the type where it has one, else its model's speed there."""
    topo = view.topo
    stype = np.asarray(topo.server_gpu_type)
    out = np.zeros(len(topo.gpu_types))
    app = view.application(job)
    for t, name in enumerate(topo.gpu_types):
        servers = np.flatnonzero(stype == t)
        if int(topo.server_num_gpus[servers].sum()) < n:
            continue
        if app is not None:
            typed = view.app_on_type(job, name) if hasattr(view, "app_on_type") else app
            gpn = int(topo.server_num_gpus[servers].max())
            out[t] = 1.0 / typed.iteration_time(consolidated(n, gpn), int(view.jobs.batch_size[job]))
        else:
            out[t] = view.estimated_speed(job, np.array([int(topo.server_first_gpu[servers[0]])]))
    return out


def _typed(
    view: SchedulerView, job: int, n: int, free: FreePool | None = None, *, place: Placement, order: str
) -> np.ndarray | None:
    pool = FreePool(view) if free is None else free
    if pool.num_free < n:
        return None
    topo = pool.topo
    if _single_type(topo):  # a part of the cluster with one type (an agent's partition)
        return place(view, job, n, pool)
    stype = np.asarray(topo.server_gpu_type)
    free_by_type = np.bincount(stype, weights=pool.server_free[: topo.num_servers], minlength=len(topo.gpu_types))
    if order == "any":
        ranked = np.lexsort((np.arange(len(free_by_type)), -free_by_type))
    else:
        speed = type_speeds(view, job, n)
        ranked = np.lexsort((np.arange(len(speed)), -speed if order == "fastest" else speed))
    for t in ranked.tolist():
        if free_by_type[t] < n:
            continue
        gpus = place_on_type(view, job, n, pool, t, place)
        if gpus is not None:
            return gpus
    return None


def place_on_type(
    view: SchedulerView, job: int, n: int, pool: FreePool, gpu_type: int, place: Placement
) -> np.ndarray | None:
    """``place`` on the free GPUs of ``pool`` of one GPU type (an index into ``pool.topo.gpu_types``); None
    when they do not hold the job. Ids are the pool's."""
    stype = np.asarray(pool.topo.server_gpu_type)
    servers = np.flatnonzero(stype == gpu_type)
    if int(pool.server_free[servers].sum()) < n:
        return None
    return place(view, job, n, FreePool(_OneTypeView(view, pool, servers, job)))  # type: ignore[arg-type]


_SINGLE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # topology -> it has one GPU type


def _single_type(topo) -> bool:
    """Whether every server of ``topo`` has the same GPU type (computed once per topology)."""
    single = _SINGLE.get(topo)
    if single is None:
        stype = np.asarray(topo.server_gpu_type)
        single = _SINGLE[topo] = bool(len(stype) == 0 or stype.min() == stype.max())
    return single


def one_type_placement(place: Placement, topo=None, order: str = "any") -> Placement:
    """``place`` restricted to one GPU type per job, types tried in ``order`` (see the module docstring);
    ``place`` itself on a single-type cluster ``topo`` (None: decided at each call, from the pool's servers)."""
    if order not in GPU_TYPE_ORDERS:
        raise ValueError(f"gpu_type preference {order!r} is not one of: {', '.join(GPU_TYPE_ORDERS)}")
    if topo is not None and _single_type(topo):
        return place
    return partial(_typed, place=place, order=order)


__all__ = ["GPU_TYPE_ORDERS", "one_type_placement", "place_on_type", "type_speeds"]
