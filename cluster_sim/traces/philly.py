"""Loader for the Microsoft Philly job list as processed by Pollux (``pollux-osdi21/traces/philly.csv``).

Columns ``timestamp,duration,num_gpus,gpu_time,cluster`` and, in a log of one's own, optionally ``model`` (a
model of the zoo, :data:`cluster_sim.model_zoo.MODEL_NAMES`, or a unique start of one: ``resnet50``) and
``job_id`` (the log's own id, written beside the simulator's index in ``jobs.csv``); the file is not sorted by
submit time. Other columns are not read, and a warning names them. Philly itself has no model
types, so models (where a row names none) come from a seeded rule (:func:`cluster_sim.model_rules.assign_models`):
``independent`` (default) draws from each virtual cluster's model mix and never looks at a job's size;
``pollux`` is Pollux's GPU-time rule, which tells any model-based estimator the job's size. The draws are
made over the whole sorted file before any filter or window, so a job keeps its model whichever subset of
the trace is loaded.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

import numpy as np

from cluster_sim.model_rules import assign_models, default_batch_sizes, make_rng
from cluster_sim.model_zoo import MODEL_NAMES
from cluster_sim.protocol import SimulationWarning
from cluster_sim.traces.table import (
    TraceFormatError,
    float_column,
    int_column,
    open_trace,
    read_csv_columns,
    require,
    tenant_codes,
    unread_columns,
)
from cluster_sim.traces.window import check_window_options, window
from cluster_sim.workload import Workload

PHILLY_COLUMNS: tuple[str, ...] = ("timestamp", "duration", "num_gpus", "gpu_time", "cluster")
MODEL_COLUMN = "model"  # optional: the job's model, where the log knows it
ID_COLUMN = "job_id"  # optional: the job's id in the log, carried into jobs.csv
POLLUX_MIN_DURATION_S = 60.0
POLLUX_MAX_GPU_TIME_S = 1000 * 3600.0


_ZONE = re.compile(r"(Z|[+-]\d\d:?\d\d)$")  # a UTC offset at a time stamp's end: +01:00, -0500, Z


def _timestamps(values: np.ndarray, lines: np.ndarray, path: Path) -> np.ndarray:
    """``YYYY-MM-DD HH:MM:SS`` strings as int64 seconds since the epoch (timezone as written; an offset is refused:
    rows of several zones would be ordered wrong)."""
    text = values.astype(str)
    numbers = np.char.isdigit(np.char.replace(np.char.strip(text), ".", ""))  # numpy would read 1714953938 as a year
    if numbers.any():
        i = int(np.argmax(numbers))
        raise TraceFormatError(
            path, int(lines[i]), f"column timestamp={str(text[i])!r} is a number, not a date-time like 2017-10-09 "
            "07:01:55; seconds since 1970 (a Slurm export): write them as dates, e.g. pandas.to_datetime(column, "
            "unit='s'), or load the table with cluster_sim.traces.workload_from_frame"
        )  # fmt: skip
    for i in np.flatnonzero(np.char.str_len(text) > 19):  # longer than 2017-10-09 07:01:55
        if _ZONE.search(text[i].strip()):
            raise TraceFormatError(
                path, int(lines[i]), f"column timestamp={str(text[i])!r} carries a time zone; write every row in "
                "one zone, without an offset (2017-10-09 07:01:55)"
            )  # fmt: skip
    try:
        return values.astype("datetime64[s]").astype(np.int64)
    except ValueError:
        for v, line in zip(values, lines, strict=True):
            try:
                np.datetime64(str(v), "s")
            except ValueError:
                raise TraceFormatError(
                    path, int(line), f"column timestamp={str(v)!r} is not a date-time like 2017-10-09 07:01:55"
                ) from None
        raise


@lru_cache(maxsize=4)
def _parsed(path: str, mtime_ns: int, size: int) -> tuple:
    """The file's checked columns (timestamps, durations, GPUs, GPU-time, tenant codes and names), read once
    per process for each version of the file (``mtime_ns`` and ``size`` key it): a training env draws many
    windows of one trace, and parsing its 100,000 rows costs half a second each time. The arrays are
    read-only, so no caller can change what the next one gets."""
    p = Path(path)
    cols, lines = read_csv_columns(p, PHILLY_COLUMNS, header_check=_tenant_named(p), optional=(MODEL_COLUMN, ID_COLUMN))
    if unread := unread_columns(p, (*PHILLY_COLUMNS, MODEL_COLUMN, ID_COLUMN)):
        warnings.warn(
            f"{p}: column(s) {', '.join(unread)} not read: a philly: trace reads {', '.join(PHILLY_COLUMNS)} "
            f"and, where given, {MODEL_COLUMN} and {ID_COLUMN} (see docs/guide/workloads.md, Your own trace)",
            TraceColumnsWarning,
            stacklevel=2,
        )
    ts = _timestamps(cols["timestamp"], lines, p)
    duration = float_column(cols["duration"], "duration", lines, p)
    num_gpus = int_column(cols["num_gpus"], "num_gpus", lines, p)
    gpu_time = float_column(cols["gpu_time"], "gpu_time", lines, p)
    require(duration > 0, "must be > 0 seconds", cols["duration"], "duration", lines, p)
    require(num_gpus >= 1, "must be >= 1", cols["num_gpus"], "num_gpus", lines, p)
    require(gpu_time >= 0, "must be >= 0", cols["gpu_time"], "gpu_time", lines, p)
    _check_gpu_time(gpu_time, duration * num_gpus, lines, p)
    _check_duration_unit(duration, p)
    tenant, tenants = tenant_codes(cols["cluster"])
    given = model_codes(cols[MODEL_COLUMN], lines, p) if MODEL_COLUMN in cols else np.full(len(ts), -1, np.int16)
    ids = np.char.strip(cols[ID_COLUMN]) if ID_COLUMN in cols else None
    for a in (ts, duration, num_gpus, gpu_time, tenant, given, *([ids] if ids is not None else [])):
        a.flags.writeable = False
    return ts, duration, num_gpus, gpu_time, tenant, tenants, given, ids


def jobs_workload(
    stamp: np.ndarray,
    duration: np.ndarray,
    num_gpus: np.ndarray,
    gpu_time: np.ndarray,
    tenant: np.ndarray,
    tenants: tuple[str, ...],
    given: np.ndarray,
    ids: np.ndarray | None,
    *,
    source: str,
    meta: dict,
    pollux_filter: bool,
    model_rule: str,
    seed: int,
    gpu_scale: int,
) -> Workload:
    """The jobs of a log (checked columns, in the log's order; ``stamp``: submit times in seconds, a date's epoch
    seconds or any origin) as a workload: sorted by submit time (stable), arrivals from the first, models drawn
    where ``given`` is -1, batch = model default x GPUs. A log file and a table of jobs in Python
    (:func:`cluster_sim.traces.frame.workload_from_frame`) go through here, so the same jobs give the same run."""
    if int(gpu_scale) != gpu_scale or gpu_scale < 1:
        raise ValueError(f"gpu_scale={gpu_scale} must be an integer >= 1 (GPUs per Philly GPU)")
    n_rows = len(stamp)
    order = np.argsort(stamp, kind="stable")
    start = stamp[order[0]] if n_rows else 0.0
    # drawn for every row, so a row without a model draws the same one whether or not others name theirs
    model = assign_models(model_rule, tenant[order], gpu_time[order], make_rng(seed))
    model = np.where(given[order] >= 0, given[order], model).astype(model.dtype)
    keep = np.ones(n_rows, dtype=bool)
    if pollux_filter:
        keep = (duration[order] >= POLLUX_MIN_DURATION_S) & (gpu_time[order] < POLLUX_MAX_GPU_TIME_S)
    idx = order[keep]
    g = (num_gpus[idx] * int(gpu_scale)).astype(np.int32)
    return Workload(
        arrival=(stamp[idx] - start).astype(np.float64),
        num_gpus=g,
        duration=duration[idx],
        model=model[keep],
        batch_size=default_batch_sizes(model[keep], g),
        tenant=tenant[idx],
        models=MODEL_NAMES,
        tenants=tenants,
        source=source,
        job_ids=None if ids is None else ids[idx],
        meta={
            **meta,
            "trace_start": str(np.datetime64(int(start), "s")),
            "pollux_filter": pollux_filter,
            "model_rule": model_rule,
            "seed": seed,
            "gpu_scale": int(gpu_scale),
        },
    )


class TraceColumnsWarning(SimulationWarning):
    """A trace file has columns its loader does not read (a model or GPU type the simulation will not use)."""


class DurationUnitWarning(SimulationWarning):
    """A trace's jobs run under a minute in the median: its durations are likely hours or minutes, not seconds."""


class GpuTimeWarning(SimulationWarning):
    """A trace's ``gpu_time`` is not its ``duration`` x ``num_gpus`` (often GPU-hours, or a job's measured busy
    time): the Pollux filter and ``model_rule=pollux`` read it, so their choices would differ from Pollux's."""


def _tenant_named(path: Path) -> Callable[[list[str]], None]:
    """A header without ``cluster`` is told that it is the tenant's column (a log names it user, team or queue)."""

    def check(header: list[str]) -> None:
        if "cluster" not in header:
            missing = [c for c in PHILLY_COLUMNS if c not in header]
            raise TraceFormatError(
                path, 1, f"header lacks column(s) {', '.join(missing)}; expected columns: {','.join(PHILLY_COLUMNS)} "
                f"(found: {','.join(header)}); cluster is each job's tenant (user, team or queue; Philly's virtual "
                "cluster): rename that column cluster, or write one name for all"
            )  # fmt: skip

    return check


def _check_duration_unit(duration: np.ndarray, path: Path) -> None:
    """Warn where the median job runs under a minute: a log in hours or minutes reads as seconds and runs silently,
    every figure a thousand times too small."""
    median = float(np.median(duration)) if len(duration) else 60.0
    if median < 60.0:
        warnings.warn(
            f"{path}: the median job runs {median:g} s; duration is read as seconds (a log in hours: multiply by "
            "3600, in minutes: by 60; gpu_time likewise)",
            DurationUnitWarning,
            stacklevel=3,
        )


def _check_gpu_time(gpu_time: np.ndarray, expected: np.ndarray, lines: np.ndarray, path: Path) -> None:
    """Warn, naming the first line and how many rows differ, where ``gpu_time`` is off ``duration`` x ``num_gpus``
    by more than 1% (a rounded log is left alone)."""
    off = np.abs(gpu_time - expected) > 0.01 * expected + 1.0
    if off.any():
        i = int(np.argmax(off))
        warnings.warn(
            f"{path}, line {int(lines[i])}: gpu_time={gpu_time[i]:g} but duration x num_gpus = {expected[i]:g} "
            f"({int(off.sum())} of {len(off)} rows differ by more than 1%); gpu_time is read as GPU-seconds, "
            "duration x num_gpus: the Pollux filter and model_rule=pollux read it (write it so, or in GPU-hours "
            "multiply by 3600)",
            GpuTimeWarning,
            stacklevel=3,
        )


def model_codes(values: np.ndarray, lines: np.ndarray, path: Path) -> np.ndarray:
    """The ``model`` column as zoo indices (-1 where empty: the model rule draws one): a zoo name or a unique
    start of one, any case; another raises with its line and the zoo's names."""
    out = np.full(len(values), -1, dtype=np.int16)
    lowered = [m.lower() for m in MODEL_NAMES]
    for name in np.unique(np.char.strip(values)):
        if not name:
            continue
        key = str(name).lower()
        hits = [i for i, m in enumerate(lowered) if m == key] or [i for i, m in enumerate(lowered) if m.startswith(key)]
        if len(hits) != 1:
            i = int(np.argmax(np.char.strip(values) == name))
            raise TraceFormatError(
                path, int(lines[i]), f"column {MODEL_COLUMN}={str(values[i])!r} names "
                f"{'several' if hits else 'no'} model of the zoo; write one of {', '.join(MODEL_NAMES)} (or leave it "
                "empty for the model rule to draw one)"
            )  # fmt: skip
        out[np.char.strip(values) == name] = hits[0]
    return out


def load_philly(
    path: str | Path,
    *,
    time_range: tuple[float, float] | None = None,
    max_jobs: int | None = None,
    arrival_scale: float = 1.0,
    seed: int = 0,
    pollux_filter: bool = False,
    model_rule: str = "independent",
    gpu_scale: int = 1,
) -> Workload:
    """Philly jobs sorted by submit time (stable: ties keep file order).

    Arrival = seconds since the earliest timestamp in the file; tenant = the ``cluster`` column (the
    virtual cluster); batch = model default x GPUs. ``pollux_filter`` keeps only jobs with
    ``duration >= 60`` and ``gpu_time < 1000`` GPU-hours, as Pollux's simulator does; the trace start
    stays the earliest timestamp of the whole file, so a window means the same with or without it. See
    :func:`cluster_sim.traces.window.window` for ``time_range``, ``max_jobs``, ``arrival_scale``.

    ``gpu_scale=K`` gives every job K x its GPUs (and batch), keeping its duration, as the synthetic jobs'
    option does: Philly's jobs, 94% of them on one GPU, keep a thousand-server cluster about 5% busy at
    any arrival rate a window can offer, while K = 8 (a server per single-GPU job) at the trace's own
    rates keeps dc-1k about 45% busy with the trace's arrival pattern and tenants intact.
    """
    check_window_options(time_range, max_jobs, arrival_scale)
    p = open_trace(path, "philly")
    stat = p.stat()
    ts, duration, num_gpus, gpu_time, tenant, tenants, given, ids = _parsed(
        str(p.resolve()), stat.st_mtime_ns, stat.st_size
    )
    w = jobs_workload(
        ts.astype(np.float64), duration, num_gpus, gpu_time, tenant, tenants, given, ids,
        source="philly", meta={"path": str(p), "rows": len(ts)}, pollux_filter=pollux_filter,
        model_rule=model_rule, seed=seed, gpu_scale=gpu_scale,
    )  # fmt: skip
    return window(w, time_range=time_range, max_jobs=max_jobs, arrival_scale=arrival_scale)
