"""Workloads named by one command-line string, e.g. ``philly:traces/philly.csv,max_jobs=5000``.

Grammar: ``KIND:ARG[,OPTION=VALUE]...`` where ARG is a job count for ``synthetic`` and a trace path for
the loaders (a path therefore cannot contain a comma). Options every kind takes: ``max_jobs=N``,
``start=SECONDS``, ``end=SECONDS`` (the window ``[start, end)`` from the trace start) and
``arrival_scale=F``; per-kind options are listed in :data:`KIND_OPTIONS`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

from cluster_sim.synthetic import synthetic_workload
from cluster_sim.traces import load_gavel, load_openb, load_philly, load_pollux, window
from cluster_sim.workload import Workload

DEFAULT_SYNTHETIC_LOAD = 0.8
COMMON_OPTIONS: tuple[str, ...] = ("max_jobs", "start", "end", "arrival_scale")
KIND_OPTIONS: dict[str, tuple[str, ...]] = {
    "synthetic": ("load", "tenants"),
    "philly": ("pollux_filter",),
    "openb": ("include_pending",),
    "gavel": ("throughputs", "worker_type"),
    "pollux": (),
}
KIND_SYNTAX: dict[str, str] = {
    "synthetic": "synthetic:N_JOBS[,load=F]",
    "philly": "philly:PATH/philly.csv",
    "openb": "openb:PATH/openb_pod_list_*.csv",
    "gavel": "gavel:PATH/<vc>.trace or a folder of .trace files",
    "pollux": "pollux:PATH/workload-N.csv",
}


class WorkloadSpecError(ValueError):
    """A workload spec string that cannot be understood; the message quotes the spec and the fix."""


def _convert(spec: str, key: str, value: str, kind: Callable[[str], object]) -> object:
    try:
        out = kind(value)
    except ValueError:
        what = {int: "an integer", float: "a number", _flag: "true/false (or 1/0)"}.get(kind, "valid")
        raise WorkloadSpecError(f"workload spec {spec!r}: option {key}={value!r} is not {what}") from None
    if isinstance(out, float) and not math.isfinite(out):
        raise WorkloadSpecError(f"workload spec {spec!r}: option {key}={value!r} must be finite")
    return out


def _flag(value: str) -> bool:
    v = value.strip().lower()
    if v in ("1", "true", "yes", "on"):
        return True
    if v in ("0", "false", "no", "off"):
        return False
    raise ValueError(value)


_OPTION_TYPES: dict[str, Callable[[str], object]] = {
    "max_jobs": int,
    "start": float,
    "end": float,
    "arrival_scale": float,
    "load": float,
    "tenants": int,
    "pollux_filter": _flag,
    "include_pending": _flag,
    "throughputs": str,
    "worker_type": str,
}


def parse_workload_spec(spec: str, *, cluster_gpus: int, seed: int) -> Workload:
    """The workload a spec string names; ``seed`` drives every random choice (synthetic jobs, models)."""
    kind, sep, rest = spec.partition(":")
    kind = kind.strip().lower()
    if not sep or kind not in KIND_OPTIONS:
        allowed = "; ".join(KIND_SYNTAX.values())
        raise WorkloadSpecError(
            f"workload spec {spec!r}: unknown kind {kind!r}; use one of: {allowed} "
            f"(each optionally followed by ,{'=...,'.join(COMMON_OPTIONS)}=...)"
        )
    arg, *items = rest.split(",")
    arg = arg.strip()
    if not arg:
        raise WorkloadSpecError(f"workload spec {spec!r}: missing argument; expected {KIND_SYNTAX[kind]}")
    allowed = COMMON_OPTIONS + KIND_OPTIONS[kind]
    opts: dict[str, object] = {}
    for item in items:
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or key not in allowed:
            raise WorkloadSpecError(
                f"workload spec {spec!r}: unknown option {item.strip()!r} for {kind}; allowed: "
                + ", ".join(f"{k}=..." for k in allowed)
            )
        if key in opts:
            raise WorkloadSpecError(f"workload spec {spec!r}: option {key} given twice")
        opts[key] = _convert(spec, key, value.strip(), _OPTION_TYPES[key])

    start, end = opts.pop("start", None), opts.pop("end", None)
    time_range = None if start is None and end is None else (start or 0.0, math.inf if end is None else end)
    win = {"time_range": time_range, "max_jobs": opts.pop("max_jobs", None)}
    win["arrival_scale"] = opts.pop("arrival_scale", 1.0)
    try:
        if kind == "synthetic":
            n = _convert(spec, "N_JOBS", arg, int)
            w = synthetic_workload(
                n,
                load=opts.get("load", DEFAULT_SYNTHETIC_LOAD),
                cluster_gpus=cluster_gpus,
                seed=seed,
                n_tenants=opts.get("tenants", 4),
            )
            return window(w, **win)
        path = Path(arg)
        if kind == "philly":
            return load_philly(path, seed=seed, pollux_filter=opts.get("pollux_filter", False), **win)
        if kind == "openb":
            return load_openb(path, seed=seed, include_pending=opts.get("include_pending", False), **win)
        if kind == "gavel":
            return load_gavel(
                path,
                seed=seed,
                throughputs_path=opts.get("throughputs"),
                worker_type=opts.get("worker_type", "v100"),
                **win,
            )
        return load_pollux(path, seed=seed, **win)
    except WorkloadSpecError:
        raise
    except ValueError as e:
        if type(e) is not ValueError:
            raise
        raise WorkloadSpecError(f"workload spec {spec!r}: {e}") from None
