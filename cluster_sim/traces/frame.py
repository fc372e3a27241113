"""A table of jobs built in Python (a pandas DataFrame, or a mapping of column name to values) as a workload.

It is read as a ``philly:`` log of one's own is (:mod:`cluster_sim.traces.philly`), through the same code, so the
same jobs give the same run from a notebook as from a CSV file: models drawn where a row names none, each job's
batch its model's default x its GPUs. Columns, by name:

- ``timestamp`` (date-times) or ``arrival`` (seconds from any origin): when the job was submitted;
- ``duration``: its run time in seconds (> 0) and ``num_gpus``: the GPUs it asks for (a whole number >= 1);
- optional: ``cluster`` or ``tenant`` (its tenant, default ``default``), ``model`` (a zoo name or a unique start
  of one; empty or missing: drawn by ``model_rule``), ``gpu_time`` (GPU-seconds, default ``duration`` x
  ``num_gpus``: read by ``model_rule=pollux`` and Pollux's filter) and ``job_id`` (your id, kept in ``jobs.csv``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from cluster_sim.traces.philly import jobs_workload, model_codes
from cluster_sim.traces.table import TraceFormatError, tenant_codes
from cluster_sim.traces.window import check_window_options, window
from cluster_sim.workload import Workload

REQUIRED = ("duration", "num_gpus")
OPTIONAL = ("timestamp", "arrival", "cluster", "tenant", "model", "gpu_time", "job_id")


class FrameError(ValueError):
    """A table of jobs that cannot be read: names the column, the row (its position and index label) and the fix."""


def _columns(frame: Any) -> dict[str, np.ndarray]:
    """The table's columns as arrays (a DataFrame's or a mapping's), with their names."""
    names = [str(c) for c in getattr(frame, "columns", frame.keys() if isinstance(frame, Mapping) else ())]
    if not names:
        raise FrameError(
            f"workload_from_frame: a {type(frame).__name__} is not a table of jobs; give a pandas DataFrame or a "
            f"mapping of column name to values, with columns {', '.join(REQUIRED)} and timestamp or arrival"
        )
    cols = {name: np.asarray(frame[name]) for name in names}
    lengths = {name: len(c) for name, c in cols.items()}
    if len(set(lengths.values())) > 1:
        raise FrameError(
            f"workload_from_frame: columns of different lengths: {lengths}; give one value per job in each"
        )
    return cols


def _row(frame: Any, i: int) -> str:
    """How a row is named in an error: its position and, for a DataFrame, its index label."""
    index = getattr(frame, "index", None)
    return f"row {i}" + (f" (index {index[i]!r})" if index is not None and index[i] != i else "")


def _number(frame: Any, cols: dict[str, np.ndarray], name: str, *, whole: bool, low: float, what: str) -> np.ndarray:
    """Column ``name`` as float64 (``whole``: int32), every value finite and at least ``low`` (``what``: the fix)."""
    try:
        values = cols[name].astype(np.float64)
    except (TypeError, ValueError):
        bad = next(i for i, v in enumerate(cols[name]) if not _is_number(v))
        raise FrameError(
            f"workload_from_frame: column {name!r}, {_row(frame, bad)}: {cols[name][bad]!r} is not a number; {what}"
        ) from None
    ok = np.isfinite(values) & (values >= low) & ((values == np.round(values)) if whole else True)
    if not ok.all():
        bad = int(np.argmin(ok))
        raise FrameError(f"workload_from_frame: column {name!r}, {_row(frame, bad)}: {values[bad].item()!r}; {what}")
    return values.astype(np.int32) if whole else values


def _is_number(value: Any) -> bool:
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True


def workload_from_frame(
    frame: Any,
    *,
    seed: int = 0,
    model_rule: str = "independent",
    pollux_filter: bool = False,
    gpu_scale: int = 1,
    time_range: tuple[float, float] | None = None,
    max_jobs: int | None = None,
    arrival_scale: float = 1.0,
) -> Workload:
    """The jobs of ``frame`` (see the module docstring for its columns) as a workload, as
    :func:`cluster_sim.traces.philly.load_philly` reads the same jobs from a CSV file (its options mean the same);
    a column that cannot be read raises :class:`FrameError` naming it, the row and the fix."""
    check_window_options(time_range, max_jobs, arrival_scale)
    cols = _columns(frame)
    missing = [c for c in REQUIRED if c not in cols]
    if not {"timestamp", "arrival"} & set(cols):
        missing.append("timestamp (date-times) or arrival (seconds)")
    if missing:
        raise FrameError(
            f"workload_from_frame: no column {', '.join(missing)}; it reads {', '.join(REQUIRED)}, timestamp or "
            f"arrival, and optionally {', '.join(OPTIONAL[2:])} (the table has {', '.join(cols)})"
        )
    if unread := [c for c in cols if c not in REQUIRED + OPTIONAL]:
        import warnings

        from cluster_sim.traces.philly import TraceColumnsWarning

        warnings.warn(
            f"workload_from_frame: column(s) {', '.join(unread)} not read; it reads {', '.join(REQUIRED + OPTIONAL)}",
            TraceColumnsWarning,
            stacklevel=2,
        )
    n = len(next(iter(cols.values())))
    if "timestamp" in cols:
        try:
            stamp = cols["timestamp"].astype("datetime64[s]").astype(np.int64).astype(np.float64)
        except (TypeError, ValueError):
            raise FrameError(
                "workload_from_frame: column 'timestamp' holds values that are not date-times (2017-10-09 07:01:55); "
                "give date-times, or seconds in a column named arrival"
            ) from None
        if np.isnat(cols["timestamp"].astype("datetime64[s]")).any():
            bad = int(np.argmax(np.isnat(cols["timestamp"].astype("datetime64[s]"))))
            raise FrameError(f"workload_from_frame: column 'timestamp', {_row(frame, bad)}: empty; give every job one")
    else:
        stamp = _number(frame, cols, "arrival", whole=False, low=-np.inf, what="give seconds from any origin")
    duration = _number(frame, cols, "duration", whole=False, low=1e-9, what="give seconds > 0")
    num_gpus = _number(frame, cols, "num_gpus", whole=True, low=1, what="give a whole number of GPUs >= 1")
    gpu_time = (
        _number(frame, cols, "gpu_time", whole=False, low=0, what="give GPU-seconds >= 0")
        if "gpu_time" in cols
        else duration * num_gpus
    )
    tenant_column = "cluster" if "cluster" in cols else "tenant" if "tenant" in cols else None
    names = cols[tenant_column].astype(str) if tenant_column else np.full(n, "default")
    tenant, tenants = tenant_codes(names)
    given = np.full(n, -1, np.int16)
    if "model" in cols:
        models = np.array(
            ["" if v is None or (isinstance(v, float) and np.isnan(v)) else str(v) for v in cols["model"]]
        )
        try:
            given = model_codes(models, np.arange(n), "frame")
        except TraceFormatError as err:
            raise FrameError(f"workload_from_frame: {_row(frame, int(err.line or 0))}: {err.reason}") from None
    ids = np.char.strip(cols["job_id"].astype(str)) if "job_id" in cols else None
    w = jobs_workload(
        stamp, duration, num_gpus, gpu_time, tenant, tenants, given, ids, source="frame", meta={"rows": n},
        pollux_filter=pollux_filter, model_rule=model_rule, seed=seed, gpu_scale=gpu_scale,
    )  # fmt: skip
    if "timestamp" not in cols:
        del w.meta["trace_start"]  # seconds from an origin of your own: no date to count windows from
    return window(w, time_range=time_range, max_jobs=max_jobs, arrival_scale=arrival_scale)


__all__ = ["FrameError", "workload_from_frame"]
