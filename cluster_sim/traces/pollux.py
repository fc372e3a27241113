"""Loader for Pollux's evaluation workloads (``pollux-osdi21/workloads/workload-N.csv``).

Columns ``name,time,application,num_replicas,batch_size``, and optionally Sia's ``category`` (``rigid``
keeps a job's GPU count under elastic schedulers; any other value, or none, leaves it adaptive). The files
carry no duration: a job trains its application for a fixed number of epochs, so its length follows from
the measurements of that application (:mod:`cluster_sim.pollux_apps`, read from the ``traces/`` folder
beside the workloads, or from ``profiles=DIR``: Sia's per-GPU-type profiles are ``DIR/<app>/placements-
<gpu>.csv``), its batch size and its replicas. Nothing is drawn at random.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from cluster_sim.model_zoo import MODEL_NAMES, ZOO, model_index
from cluster_sim.pollux_apps import load_application
from cluster_sim.traces.table import (
    TraceFormatError,
    float_column,
    int_column,
    open_trace,
    read_csv_columns,
    require,
)
from cluster_sim.traces.window import check_window_options, window
from cluster_sim.workload import Workload

POLLUX_COLUMNS: tuple[str, ...] = ("name", "time", "application", "num_replicas", "batch_size")
APPLICATION_MODELS: dict[str, str] = {s.pollux_name: s.name for s in ZOO.values() if s.pollux_name}


def load_pollux(
    path: str | Path,
    *,
    time_range: tuple[float, float] | None = None,
    max_jobs: int | None = None,
    arrival_scale: float = 1.0,
    seed: int = 0,
    traces: str | Path | None = None,
) -> Workload:
    """Pollux jobs sorted by ``time`` (stable); GPUs = ``num_replicas``, batch = ``batch_size``.

    The model comes from ``application`` (cifar10 -> resnet18-cifar10, imagenet -> resnet50-imagenet,
    bert -> bert-squad; deepspeech2, yolov3, ncf keep their names). Duration: the seconds the job needs
    to train its application's epochs at its batch size on its replicas placed as tightly as the testbed
    allows (:meth:`~cluster_sim.pollux_apps.PolluxApplication.ideal_duration`); slower placements run
    at the measured ratio (:class:`~cluster_sim.pollux_apps` via ``meta["pollux_traces"]``). ``traces``:
    the measurements folder (default: ``traces/`` beside the workload's folder). ``seed`` is unused (kept
    so every loader takes one). Tenant: one, ``default`` (the files have none).
    """
    check_window_options(time_range, max_jobs, arrival_scale)
    p = open_trace(path, "pollux")
    cols, lines = read_csv_columns(p, POLLUX_COLUMNS)
    rigid = None
    with open(p, encoding="utf-8") as f:
        has_category = "category" in [h.strip() for h in f.readline().split(",")]
    if has_category:
        category = np.char.strip(read_csv_columns(p, ("category",))[0]["category"])
        rigid = category == "rigid"
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

    tdir = Path(traces) if traces is not None else p.resolve().parent.parent / "traces"
    if not tdir.is_dir():
        raise FileNotFoundError(
            f"{p}: the applications' measurements were not found at {tdir}; they sit in traces/ beside the "
            "workloads folder (pollux-osdi21/traces/), or name the folder with the workload option "
            "profiles=DIR (e.g. pollux:sia-sosp23/workloads/philly/workload-1.csv,profiles=sia-sosp23/traces)"
        )
    for a in np.unique(apps).tolist():
        if not (tdir / a).is_dir():
            raise TraceFormatError(
                p,
                None,
                f"application {a!r} has no measurements folder {tdir / a}; profiles=DIR must hold "
                "<app>/placements*.csv and validation-*.csv for every application of the workload",
            )
    uniq, inv = np.unique(apps, return_inverse=True)
    model_of = np.array([model_index(APPLICATION_MODELS[str(a)]) for a in uniq], dtype=np.int16)
    inv = inv.reshape(-1)
    order = np.argsort(time, kind="stable")
    g = replicas[order].astype(np.int32)
    b = batch[order]
    duration = np.empty(len(order))
    for k, (a, n, bs) in enumerate(zip(uniq[inv[order]], g.tolist(), b.tolist(), strict=True)):
        app = load_application(tdir, str(a))
        try:
            duration[k] = app.ideal_duration(int(bs), int(n))
        except ValueError as e:
            raise ValueError(f"{p}: line {int(lines[order[k]])}: {e}") from None
    w = Workload(
        arrival=time[order],
        num_gpus=g,
        duration=duration,
        model=model_of[inv[order]],
        batch_size=batch[order].astype(np.int32),
        tenant=np.zeros(len(order), dtype=np.int16),
        models=MODEL_NAMES,
        tenants=("default",),
        source="pollux",
        meta={"path": str(p), "pollux_traces": str(tdir.resolve())},
        rigid=None if rigid is None else rigid[order],
    )
    return window(w, time_range=time_range, max_jobs=max_jobs, arrival_scale=arrival_scale)
