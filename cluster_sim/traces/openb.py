"""Loader for Alibaba's 2023 GPU pod lists (``alibaba-gpu-v2023-openb/openb_pod_list_*.csv``).

Columns ``name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,
scheduled_time``, times in seconds from the trace start. The simulator gives jobs whole GPUs, so a
GPU-sharing pod (``num_gpu == 1`` with ``gpu_milli < 1000``) takes one whole GPU here
(``meta["gpu_sharing_pods"]`` counts them). CPU-only pods (``num_gpu == 0``) are dropped.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from cluster_sim.model_rules import assign_models, default_batch_sizes, make_rng
from cluster_sim.model_zoo import MODEL_NAMES
from cluster_sim.traces.table import (
    TraceFormatError,
    float_column,
    int_column,
    open_trace,
    read_csv_columns,
    require,
    tenant_codes,
)
from cluster_sim.traces.window import check_window_options, window
from cluster_sim.workload import Workload

OPENB_COLUMNS: tuple[str, ...] = (
    "name",
    "num_gpu",
    "gpu_milli",
    "qos",
    "pod_phase",
    "creation_time",
    "deletion_time",
    "scheduled_time",
)
TIME_COLUMNS: tuple[str, ...] = ("creation_time", "deletion_time", "scheduled_time")


def _check_has_times(path: Path):
    def check(header: list[str]) -> None:
        if not any(c in header for c in TIME_COLUMNS):
            raise TraceFormatError(
                path,
                1,
                f"the file has no time columns ({', '.join(TIME_COLUMNS)}): it lists pods without arrival or "
                "run times (like the multigpu* variants) and cannot drive a simulation; use "
                "openb_pod_list_default.csv or a variant that has them",
            )

    return check


def load_openb(
    path: str | Path,
    *,
    time_range: tuple[float, float] | None = None,
    max_jobs: int | None = None,
    arrival_scale: float = 1.0,
    seed: int = 0,
    include_pending: bool = False,
    model_rule: str = "independent",
) -> Workload:
    """GPU pods sorted by creation time (stable), one job each.

    Arrival = ``creation_time`` (already seconds from the trace start); duration =
    ``deletion_time - scheduled_time``; tenant = ``qos`` class; models by Pollux's GPU-time rule with
    ``seed``; batch = model default x GPUs. Pods never scheduled (Pending, empty ``scheduled_time``) are
    skipped unless ``include_pending``, which then times them from creation to deletion instead; pods
    whose duration is not positive are skipped. Running pods deleted at the trace end are right-censored:
    their duration is a lower bound. ``meta`` counts what was skipped.
    """
    check_window_options(time_range, max_jobs, arrival_scale)
    p = open_trace(path, "openb")
    cols, lines = read_csv_columns(p, OPENB_COLUMNS, header_check=_check_has_times(p))
    num_gpu = int_column(cols["num_gpu"], "num_gpu", lines, p)
    require(num_gpu >= 0, "must be >= 0", cols["num_gpu"], "num_gpu", lines, p)
    gpu = num_gpu >= 1
    cols = {k: v[gpu] for k, v in cols.items()}
    lines, num_gpu = lines[gpu], num_gpu[gpu]
    gpu_milli = int_column(cols["gpu_milli"], "gpu_milli", lines, p)
    creation = float_column(cols["creation_time"], "creation_time", lines, p)
    deletion = float_column(cols["deletion_time"], "deletion_time", lines, p)
    sched_str = cols["scheduled_time"]
    pending = np.char.str_len(np.char.strip(sched_str)) == 0
    scheduled = np.empty(len(sched_str), dtype=np.float64)
    scheduled[~pending] = float_column(sched_str[~pending], "scheduled_time", lines[~pending], p)
    scheduled[pending] = creation[pending]
    duration = deletion - scheduled
    keep = duration > 0
    if not include_pending:
        keep &= ~pending

    order = np.argsort(creation, kind="stable")
    order = order[keep[order]]
    g = num_gpu[order].astype(np.int32)
    dur = duration[order]
    tenant, tenants = tenant_codes(cols["qos"])
    model = assign_models(model_rule, tenant[order], g * dur, make_rng(seed))
    w = Workload(
        arrival=creation[order],
        num_gpus=g,
        duration=dur,
        model=model,
        batch_size=default_batch_sizes(model, g),
        tenant=tenant[order],
        models=MODEL_NAMES,
        tenants=tenants,
        source="openb",
        meta={
            "path": str(p),
            "gpu_pods": int(gpu.sum()),
            "cpu_only_skipped": int((~gpu).sum()),
            "pending_skipped": 0 if include_pending else int(pending.sum()),
            "nonpositive_duration_skipped": int(((duration <= 0) & (include_pending | ~pending)).sum()),
            "gpu_sharing_pods": int((gpu_milli[order] < 1000).sum()),
            "seed": seed,
        },
    )
    return window(w, time_range=time_range, max_jobs=max_jobs, arrival_scale=arrival_scale)
