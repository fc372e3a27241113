"""One function builds a simulator from plain settings, for the CLI, experiment tasks, training evaluation
and Python users (:func:`build_simulator`); the training environment, which keeps its cluster and models
across episodes, assembles one from those parts (:func:`assemble_simulator`)."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np

from cluster_sim.perf_model import PerformanceModel
from cluster_sim.protocol import SimulationWarning
from cluster_sim.sim_presets import SIMULATE_DEFAULTS, resolve_settings
from cluster_sim.simulator import Simulator
from cluster_sim.workload import Workload
from cluster_sim.workload_spec import parse_workload_spec
from interference.base import InterferenceModel
from interference.loader import load_interference_model
from topology import ClusterSpec, build_cluster, parse_spec
from topology.view import ClusterView


def build_simulator(
    cluster: str | Mapping[str, Any] | ClusterSpec,
    workload: str | Workload | Any,
    *,
    seed: int = 0,
    preset: str | None = None,
    interference: str | None = None,
    interference_data: str | None = None,
    restart_cost: float | None = None,
    perf_model: bool = True,
    record_history: bool = False,
    gpu_sharing: bool = False,
    start_cost: float | None = None,
    elastic: bool | None = None,
    batch_change_cost: float = 0.0,
    mix_gpu_types: bool | None = None,
    app_restart_costs: bool | None = None,
    calibration: bool | None = None,
    warn_estimated: bool = True,
) -> Simulator:
    """A simulator of ``workload`` on ``cluster``.

    ``cluster``: a preset name (``small``, ``dc-1k``, ...), a YAML file or a spec mapping. ``workload``: a
    spec string (``philly:PATH,start=...``, ``synthetic:500,load=0.9``; ``seed`` draws its random parts),
    a :class:`Workload` or a table of jobs (a pandas DataFrame: :func:`cluster_sim.traces.workload_from_frame`).
    ``preset``: a paper's settings (``sia``, ``pollux``: :mod:`cluster_sim.sim_presets`,
    ``simulate --preset``) for the five below that are not given; those not given otherwise take simulate's
    defaults (no interference, restart cost 30 s, no start cost, neither Sia's per-application costs nor its
    calibration). ``interference``: a mode of :func:`interference.loader.load_interference_model` with its data
    file. ``perf_model=False`` runs every placement at ideal speed. ``gpu_sharing`` lets two
    single-GPU jobs share a GPU; ``start_cost`` stalls a job's first start too; ``elastic`` (None: as the
    scheduler asks) lets jobs of measured applications resize and change batch size (see
    :class:`~cluster_sim.simulator.Simulator`). ``mix_gpu_types`` lets a job span GPU types;
    ``app_restart_costs`` and ``calibration`` are Sia's per-application restart costs and slowdowns.
    ``warn_estimated=False``: no warning that jobs run at estimated speeds (a probe of the cluster that runs no
    job, which would otherwise say so of its placeholder job, and silence the warning for the real runs).
    """
    given = {"interference": interference, "restart_cost": restart_cost, "start_cost": start_cost,
             "app_restart_costs": app_restart_costs, "calibration": calibration}  # fmt: skip
    settings = resolve_settings(preset, given, SIMULATE_DEFAULTS)
    if isinstance(cluster, Mapping):
        cluster = parse_spec(dict(cluster), source="cluster")
    view = build_cluster(cluster).view
    if isinstance(workload, str):
        workload = parse_workload_spec(workload, cluster_gpus=view.num_gpus, seed=seed)
    elif not isinstance(workload, Workload):  # a table of jobs (a DataFrame, a mapping of columns)
        from cluster_sim.traces.frame import workload_from_frame

        workload = workload_from_frame(workload, seed=seed)
    perf = PerformanceModel(view) if perf_model else None
    mode = settings.pop("interference")
    model = None if mode == "none" else load_interference_model(mode, interference_data)
    return assemble_simulator(
        view,
        workload,
        perf=perf,
        interference=model,
        record_history=record_history,
        gpu_sharing=gpu_sharing,
        elastic=elastic,
        batch_change_cost=batch_change_cost,
        mix_gpu_types=mix_gpu_types,
        warn_estimated=warn_estimated,
        **settings,
    )


def assemble_simulator(
    view: ClusterView,
    workload: Workload,
    *,
    perf: PerformanceModel | None,
    interference: InterferenceModel | None,
    warn_estimated: bool = True,
    **options: Any,
) -> Simulator:
    """A simulator from parts already built (what a training environment reuses across episodes): jobs of
    Pollux's measured applications run at their measured speeds. ``options`` go to
    :class:`~cluster_sim.simulator.Simulator`."""
    if perf is not None and workload.meta.get("pollux_traces"):
        from cluster_sim.pollux_apps import PolluxPerformance

        perf = PolluxPerformance(perf, workload.meta["pollux_traces"], view)
        if warn_estimated:
            _warn_estimated(view, workload, perf.estimated_apps_by_type(workload.model, workload.models), _APPS)
    elif perf is not None and warn_estimated:
        _warn_estimated(view, workload, perf.estimated_jobs_by_type(workload.model, workload.models), _MODELS)
    if interference is not None and warn_estimated and hasattr(interference, "outside_fitted_range"):
        _warn_outside_range(view, workload, perf, interference)
    return Simulator(view, workload, perf=perf, interference=interference, **options)


class InterferenceRangeWarning(SimulationWarning):
    """Jobs lie outside the range a learned interference model was fitted on: its answers there, which a
    simulation in learned mode takes as the truth, lean on its safe prior."""


def _warn_outside_range(view: ClusterView, workload: Workload, perf: Any, model: Any) -> None:
    """Warn, once a process per cluster and models found outside, how many jobs lie outside the learned model's
    fitted range on some GPU type of the cluster, and which models on which types."""
    from cluster_sim.job_descriptors import DescriptorCache

    cache = DescriptorCache(workload, view, perf)
    first_gpu = [int(np.flatnonzero(view.server_gpu_type[view.gpu_server] == t)[0]) for t in range(len(view.gpu_types))]
    outside = np.zeros(len(workload), dtype=bool)
    where: dict[str, set[str]] = {}
    for t, gpu in enumerate(first_gpu):
        flags = model.outside_fitted_range([cache.get(j, gpu) for j in range(len(workload))])
        outside |= flags
        for m in sorted({workload.models[int(workload.model[j])] for j in np.flatnonzero(flags)}):
            where.setdefault(m, set()).add(view.gpu_types[t])
    key = ("range", view.name, tuple((m, tuple(sorted(t))) for m, t in sorted(where.items())))
    if not outside.any() or key in _WARNED:
        return
    _WARNED.add(key)
    said = "; ".join(f"{m} on {', '.join(sorted(t))}" for m, t in list(where.items())[:6])
    more = f" and {len(where) - 6} more models" if len(where) > 6 else ""
    warnings.warn(
        f"on {view.name}, {int(outside.sum()):,} of the workload's {len(workload):,} jobs lie outside the range the "
        f"learned interference model was fitted on ({said}{more}): its answers for them lean on its safe prior, and "
        "a simulation in learned mode takes them as the truth (`marlsched interference predict` says which inputs; "
        "compare with --interference oracle)",
        InterferenceRangeWarning,
        stacklevel=3,
    )


class EstimatedSpeedWarning(SimulationWarning):
    """Jobs run on a GPU type where their model was never measured: their speed there is an estimate."""


_MODELS = (
    "models were never measured",
    "there they run at an estimate, the type's single speed or (A10, H100, H200) its datasheet ratio to the model's "
    "A100 speed (a result's estimated_jobs counts the jobs that did); "
    "measured are Gavel's job types on K80, P100 and V100 (model_rule=gavel) and Sia's applications on T4, RTX 2080 "
    "Ti, A100 and RTX 6000 (pollux: with profiles=)",
)
_APPS = (
    "applications were never profiled",
    "there their step times are those measured on T4 with the compute part scaled by the model's speed on the "
    "type, an estimate (a result's estimated_jobs counts the jobs that ran there); Pollux's traces measure T4 only, "
    "Sia's (apps= or profiles= ../shared/traces/sia-sosp23/traces) T4, RTX 2080 Ti, A100 and RTX 6000",
)
_WARNED: set[tuple] = set()  # (what, cluster, types): once a process, not once a window


def _warn_estimated(view: ClusterView, workload: Workload, by_type: dict[str, int], text: tuple[str, str]) -> None:
    """Warn, once a process, that ``by_type`` jobs of the workload run on estimated speeds on each type."""
    what, how = text
    key = (what, view.name, tuple(sorted(by_type)))
    if not by_type or key in _WARNED:
        return
    _WARNED.add(key)
    counts = "jobs that may run there: " + ", ".join(f"{n:,} on {t}" for t, n in by_type.items())
    counts += f", of the workload's {len(workload):,}"  # where the scheduler puts them decides how many do
    warnings.warn(
        f"on {view.name}, some jobs' {what} on {' or '.join(by_type)} ({counts}): {how}; see docs/guide/clusters.md, "
        "GPU types and their speeds",
        EstimatedSpeedWarning,
        stacklevel=3,
    )
