"""Loader for Pollux's evaluation workloads (``pollux-osdi21/workloads/workload-N.csv``).

Columns ``name,time,application,num_replicas,batch_size``. Pollux runs each job to a target accuracy, so
these files carry no duration; we have no accuracy model, so a duration is drawn instead (see
:func:`load_pollux`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from cluster_sim.model_zoo import MODEL_NAMES, ZOO, model_index
from cluster_sim.synthetic import GPU_TIME_BUCKET_MODELS, PHILLY_GPU_TIME_QUANTILES, make_rng, sample_log_quantiles
from cluster_sim.traces.table import float_column, int_column, open_trace, read_csv_columns, require
from cluster_sim.traces.window import check_window_options, window
from cluster_sim.workload import Workload

POLLUX_COLUMNS: tuple[str, ...] = ("name", "time", "application", "num_replicas", "batch_size")
APPLICATION_MODELS: dict[str, str] = {s.pollux_name: s.name for s in ZOO.values() if s.pollux_name}


def _application_bucket(model: str) -> int:
    """Pollux GPU-time bucket (0..3) that its workload generator maps to this model."""
    return next(b for b, pair in enumerate(GPU_TIME_BUCKET_MODELS) if model in pair)


def load_pollux(
    path: str | Path,
    *,
    time_range: tuple[float, float] | None = None,
    max_jobs: int | None = None,
    arrival_scale: float = 1.0,
    seed: int = 0,
) -> Workload:
    """Pollux jobs sorted by ``time`` (stable); GPUs = ``num_replicas``, batch = ``batch_size``.

    The model comes from ``application`` (cifar10 -> resnet18-cifar10, imagenet -> resnet50-imagenet,
    bert -> bert-squad; deepspeech2, yolov3, ncf keep their names). Duration: Pollux's generator chose the
    application from the Philly job's GPU-time (cifar10/ncf below 1 GPU-hour, deepspeech2/bert below 10,
    yolov3 below 100, imagenet up to 1000), so we invert that rule: each job draws, with ``seed``, a
    GPU-time from the Philly GPU-time distribution of its application's bucket
    (:data:`cluster_sim.synthetic.PHILLY_GPU_TIME_QUANTILES`) and runs for that GPU-time divided by its
    replicas. Tenant: one, ``default`` (the files have none).
    """
    check_window_options(time_range, max_jobs, arrival_scale)
    p = open_trace(path, "pollux")
    cols, lines = read_csv_columns(p, POLLUX_COLUMNS)
    time = float_column(cols["time"], "time", lines, p)
    replicas = int_column(cols["num_replicas"], "num_replicas", lines, p)
    batch = int_column(cols["batch_size"], "batch_size", lines, p)
    require(time >= 0, "must be >= 0 seconds", cols["time"], "time", lines, p)
    require(replicas >= 1, "must be >= 1", cols["num_replicas"], "num_replicas", lines, p)
    require(batch >= 1, "must be >= 1", cols["batch_size"], "batch_size", lines, p)
    apps = np.char.strip(cols["application"])
    known = np.isin(apps, list(APPLICATION_MODELS))
    require(
        known, f"is not a Pollux application (known: {', '.join(APPLICATION_MODELS)})", apps, "application", lines, p
    )

    uniq, inv = np.unique(apps, return_inverse=True)
    model_of = np.array([model_index(APPLICATION_MODELS[str(a)]) for a in uniq], dtype=np.int16)
    bucket_of = np.array([_application_bucket(APPLICATION_MODELS[str(a)]) for a in uniq], dtype=np.int64)
    inv = inv.reshape(-1)
    order = np.argsort(time, kind="stable")
    rng = make_rng(seed)
    gpu_time = sample_log_quantiles(PHILLY_GPU_TIME_QUANTILES, bucket_of[inv[order]], rng.random(len(order)))
    g = replicas[order].astype(np.int32)
    w = Workload(
        arrival=time[order],
        num_gpus=g,
        duration=gpu_time / g,
        model=model_of[inv[order]],
        batch_size=batch[order].astype(np.int32),
        tenant=np.zeros(len(order), dtype=np.int16),
        models=MODEL_NAMES,
        tenants=("default",),
        source="pollux",
        meta={"path": str(p), "seed": seed},
    )
    return window(w, time_range=time_range, max_jobs=max_jobs, arrival_scale=arrival_scale)
