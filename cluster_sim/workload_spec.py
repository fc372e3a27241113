"""Workloads named by one command-line string, e.g. ``philly:traces/philly.csv,max_jobs=5000``.

Grammar: ``KIND:ARG[,OPTION=VALUE]...`` where ARG is a job count for ``synthetic`` and a trace path for
the loaders (a path therefore cannot contain a comma). Options every kind takes: ``max_jobs=N``,
``start=SECONDS``, ``end=SECONDS`` (the window ``[start, end)`` from the trace start; a date such as
``start=2017-11-01,end=2017-11-03`` for a trace whose loader records its start: Philly),
``arrival_scale=F``, ``load=F`` (arrivals rescaled so the window offers F x the cluster's GPUs) and
``apps=PATH`` (each job trains one of Pollux's applications measured in PATH for its trace length, so
elastic schedulers can resize it: :mod:`cluster_sim.traces.elastic_apps`); each kind in
:data:`WORKLOAD_KINDS` lists its own options. Add a kind (a new trace format) with
:func:`register_workload_kind`.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from cluster_sim.synthetic import synthetic_workload
from cluster_sim.traces import QuietWindowError, load_gavel, load_openb, load_philly, load_pollux, window
from cluster_sim.traces.dates import seconds_since
from cluster_sim.traces.elastic_apps import with_applications
from cluster_sim.workload import Workload

DEFAULT_SYNTHETIC_LOAD = 0.8
COMMON_OPTIONS: tuple[str, ...] = ("max_jobs", "start", "end", "arrival_scale", "load", "apps", "max_gpus")


@dataclass(frozen=True)
class WorkloadKind:
    """One ``KIND:ARG[,OPTION=VALUE]...`` workload source.

    ``load(arg, *, seed, cluster_gpus, **options) -> Workload`` reads or generates the whole workload;
    the common window options (:data:`COMMON_OPTIONS`) are applied to its result afterwards.
    ``options`` maps each kind-specific option to the function that converts its text (``int``,
    ``float``, ``str``, :func:`flag`); ``syntax`` is shown in help and errors.
    """

    load: Callable[..., Workload]
    syntax: str
    options: dict[str, Callable[[str], object]] = field(default_factory=dict)


WORKLOAD_KINDS: dict[str, WorkloadKind] = {}


def register_workload_kind(
    kind: str,
    load: Callable[..., Workload],
    *,
    syntax: str,
    options: dict[str, Callable[[str], object]] | None = None,
    replace: bool = False,
) -> None:
    """Add a workload kind (for example a new trace format) usable as ``KIND:ARG,...`` in every command
    and config. See :class:`WorkloadKind` for ``load`` and ``options``."""
    kind = kind.strip().lower()
    if not kind.isidentifier():
        raise ValueError(f"workload kind {kind!r} must be a plain word (letters, digits, _)")
    if kind in WORKLOAD_KINDS and not replace:
        raise ValueError(f"workload kind {kind!r} is already registered; pass replace=True to override it")
    clash = sorted(set(options or {}) & set(COMMON_OPTIONS) - {"load"})  # a generator may set its load itself
    if clash:
        raise ValueError(f"workload kind {kind!r}: options {clash} are common to every kind; rename them")
    WORKLOAD_KINDS[kind] = WorkloadKind(load, syntax, dict(options or {}))


def workload_syntax() -> dict[str, str]:
    """Kind name -> its syntax, for help texts."""
    return {k: v.syntax for k, v in WORKLOAD_KINDS.items()}


class WorkloadSpecError(ValueError):
    """A workload spec string that cannot be understood; the message quotes the spec and the fix."""


class QuietWorkloadSpecError(WorkloadSpecError):
    """A trace window with no jobs, or too few to offer its ``load=``: the spec is right, the window is quiet.

    Trainers that draw random windows draw another on this error and let every other one through.
    """


def _convert(spec: str, key: str, value: str, kind: Callable[[str], object]) -> object:
    try:
        out = kind(value)
    except ValueError:
        what = {
            int: "an integer",
            float: "a number",
            flag: "true/false (or 1/0)",
            trace_time: "seconds from the trace's start or a date (YYYY-MM-DD[THH:MM])",
        }.get(kind, "valid")
        raise WorkloadSpecError(f"workload spec {spec!r}: option {key}={value!r} is not {what}") from None
    if isinstance(out, float) and not math.isfinite(out):
        raise WorkloadSpecError(f"workload spec {spec!r}: option {key}={value!r} must be finite")
    return out


def trace_time(value: str) -> float | str:
    """Option converter for ``start``/``end``: seconds from the trace's start, or an ISO date (kept as text until
    the trace is read, since the date's seconds depend on the trace's first arrival)."""
    try:
        return float(value)
    except ValueError:
        seconds_since("1970-01-01", value)  # a ValueError naming the forms for anything that is not a date
        return value


def flag(value: str) -> bool:
    """Option converter for true/false (or 1/0, yes/no, on/off)."""
    v = value.strip().lower()
    if v in ("1", "true", "yes", "on"):
        return True
    if v in ("0", "false", "no", "off"):
        return False
    raise ValueError(value)


_WINDOW_TYPES: dict[str, Callable[[str], object]] = {
    "max_jobs": int,
    "start": trace_time,
    "end": trace_time,
    "arrival_scale": float,
    "load": float,
    "apps": str,
    "max_gpus": int,
}


def check_workload_spec(spec: str) -> None:
    """Refuse a spec whose kind, options or argument are wrong without loading anything (what a config
    check does before a run starts): the same errors :func:`parse_workload_spec` would raise first."""
    kind, _, arg, _ = _split(spec)
    if kind == "synthetic":
        if _convert(spec, "N_JOBS", arg, int) < 1:
            raise WorkloadSpecError(f"workload spec {spec!r}: no jobs (a job count must be >= 1)")
    elif not Path(arg).exists():
        raise WorkloadSpecError(f"workload spec {spec!r}: {arg} does not exist (paths are relative to the cwd)")


def _split(spec: str) -> tuple[str, WorkloadKind, str, dict[str, object]]:
    """(kind, its source, argument, converted options) of a spec string."""
    kind, sep, rest = spec.partition(":")
    kind = kind.strip().lower()
    if not sep or kind not in WORKLOAD_KINDS:
        first = spec.split(",")[0].strip()
        if not sep and (Path(first).suffix or Path(first).exists()):  # a file without its kind: say so first
            raise WorkloadSpecError(
                f"workload spec {spec!r}: a file needs its kind in front, KIND:PATH (e.g. philly:{first} for a "
                f"Philly trace); kinds: {', '.join(WORKLOAD_KINDS)}"
            )
        allowed = "; ".join(workload_syntax().values())
        raise WorkloadSpecError(
            f"workload spec {spec!r}: unknown kind {kind!r}; use one of: {allowed} "
            f"(each optionally followed by ,{'=...,'.join(COMMON_OPTIONS)}=...); a kind of a plugin's is known once it "
            "is imported: marlsched --plugin FILE, or a run config's plugins:"
        )
    source = WORKLOAD_KINDS[kind]
    arg, *items = rest.split(",")
    arg = arg.strip()
    if not arg:
        raise WorkloadSpecError(f"workload spec {spec!r}: missing argument; expected {source.syntax}")
    types = {**_WINDOW_TYPES, **source.options}
    opts: dict[str, object] = {}
    for item in items:
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or key not in types:
            close = difflib.get_close_matches(key, list(types), n=1)
            raise WorkloadSpecError(
                f"workload spec {spec!r}: unknown option {item.strip()!r} for {kind}; "
                + (f"did you mean {close[0]}=? " if close else "")
                + "allowed: "
                + ", ".join(f"{k}=..." for k in types)
            )
        if key in opts:
            raise WorkloadSpecError(f"workload spec {spec!r}: option {key} given twice")
        opts[key] = _convert(spec, key, value.strip(), types[key])
    _check_values(spec, opts)
    return kind, source, arg, opts


POSITIVE = ("load", "window_load", "arrival_scale", "max_jobs", "max_gpus", "tenants", "gpu_scale")


def _check_values(spec: str, opts: Mapping[str, object]) -> None:
    """Option values no window can have (a load of 0, an end before its start), named as typed."""
    for key in POSITIVE:
        if key in opts and not opts[key] > 0:
            what = "an integer >= 1" if isinstance(opts[key], int) else "a positive number"
            raise WorkloadSpecError(f"workload spec {spec!r}: {key}={opts[key]} must be {what}")
    start, end = opts.get("start"), opts.get("end")
    if start is None or end is None or isinstance(start, str) != isinstance(end, str):
        return  # seconds against a date: compared once the trace's start is read
    first, last = (seconds_since("1970-01-01", t) if isinstance(t, str) else t for t in (start, end))
    if first == last:
        raise WorkloadSpecError(
            f"workload spec {spec!r}: start={start} and end={end} hold no time; end the window later"
        )
    if first > last:
        raise WorkloadSpecError(f"workload spec {spec!r}: start={start} is after end={end}; swap them")


def trace_start(spec: str) -> str | None:
    """The date the trace of ``spec`` counts its seconds from (its first arrival, as its loader records it), or
    None where it records none (synthetic jobs, a loader without dates). Its window options are ignored: a
    window's dates count from the whole trace's start. Read once per file version."""
    kind, source, arg, opts = _split(spec)
    path = Path(arg)
    stamp = (path.stat().st_mtime_ns, path.stat().st_size) if path.is_file() else None
    return _trace_start(kind, arg, stamp, tuple(sorted((k, v) for k, v in opts.items() if k in source.options)))


@lru_cache(maxsize=8)
def _trace_start(kind: str, arg: str, stamp: tuple[int, int] | None, options: tuple) -> str | None:
    whole = WORKLOAD_KINDS[kind].load(arg, seed=0, cluster_gpus=1, **dict(options))
    origin = whole.meta.get("trace_start")
    return None if origin is None else str(origin)


def parse_workload_spec(spec: str, *, cluster_gpus: int, seed: int) -> Workload:
    """The workload a spec string names; ``seed`` drives every random choice (synthetic jobs, models)."""
    _, source, arg, opts = _split(spec)
    start, end = opts.pop("start", None), opts.pop("end", None)
    win = {"max_jobs": opts.pop("max_jobs", None), "max_gpus": opts.pop("max_gpus", None)}
    win["arrival_scale"] = opts.pop("arrival_scale", 1.0)
    apps = opts.pop("apps", None)
    if "load" in opts and "load" not in source.options:  # the window offers that load to the cluster
        win["load"] = opts.pop("load")
        win["cluster_gpus"] = cluster_gpus
    whole, in_seconds, given = None, not isinstance(start, str), (start, end)
    try:
        whole = source.load(arg, seed=seed, cluster_gpus=cluster_gpus, **opts)
        start, end = (_seconds(spec, whole, key, t) for key, t in (("start", start), ("end", end)))
        time_range = None if start is None and end is None else (start or 0.0, math.inf if end is None else end)
        workload = window(whole, time_range=time_range, **win)
        if not len(workload):
            raise (QuietWorkloadSpecError if time_range is not None else WorkloadSpecError)(
                f"workload spec {spec!r}: no jobs"
                + (f" in the window start={given[0]}" + (f", end={given[1]}" if given[1] is not None else "")
                   + (" (seconds from the trace's start; " if in_seconds else " (") + f"{_arrivals(whole)})"
                   if time_range is not None else " (a job count must be >= 1; a CSV needs rows after its header)")
            )  # fmt: skip
        return workload if apps is None else with_applications(workload, apps, seed=seed)
    except WorkloadSpecError:
        raise
    except QuietWindowError as e:
        where = f" ({_arrivals(whole)})" if whole is not None and (start is not None or end is not None) else ""
        dated = _dated(whole, start, end) if in_seconds else ""
        raise QuietWorkloadSpecError(f"workload spec {spec!r}{dated}: {e}{where}") from None
    except ValueError as e:
        if type(e) is not ValueError:
            raise
        raise WorkloadSpecError(f"workload spec {spec!r}: {e}") from None


def _dated(whole: Workload | None, start: float | None, end: float | None) -> str:
    """`` (the window 2019-01-01..2019-01-03)``: a window given in seconds, as its trace's dates (a trainer's window
    reads as its config's dates); '' where the trace records no start."""
    origin = None if whole is None else whole.meta.get("trace_start")
    if origin is None or start is None:
        return ""

    def day(t: float) -> str:
        return str(np.datetime64(origin, "s") + np.timedelta64(int(t), "s")).removesuffix("T00:00:00")

    return f" (the window {day(start)}..{day(end) if end is not None and math.isfinite(end) else ''})"


def _arrivals(workload: Workload) -> str:
    """When the trace's jobs arrive, as dates where the loader recorded its start, for a window that holds
    too few of them."""
    if not len(workload):
        return "the trace has no jobs"
    first, last = float(workload.arrival[0]), float(workload.arrival[-1])
    origin = workload.meta.get("trace_start")
    if origin is None:
        return f"the trace's jobs arrive from {first:.0f} to {last:.0f} s"
    at = [str(np.datetime64(origin, "s") + np.timedelta64(int(t), "s")) for t in (first, last)]
    return f"the trace's jobs arrive from {at[0]} to {at[1]}"


def _seconds(spec: str, workload: Workload, key: str, value: float | str | None) -> float | None:
    """A window bound in seconds from the trace's start; a date is read against the start the loader recorded."""
    if not isinstance(value, str):
        return value
    origin = workload.meta.get("trace_start")
    if origin is None:
        raise WorkloadSpecError(
            f"workload spec {spec!r}: {key}={value} is a date, but {workload.source} records no start time to "
            "count from; give seconds from its first arrival"
        )
    return max(0.0, seconds_since(origin, value))  # a date before the first arrival is the trace's start


def _synthetic(
    arg: str,
    *,
    seed: int,
    cluster_gpus: int,
    load: float | None = None,
    tenants: int = 4,
    model_rule: str = "independent",
    gpu_scale: int = 1,
    window_load: float | None = None,
) -> Workload:
    """``load`` rates arrivals by the jobs' mean GPU-time, so a heavy tail of jobs running far past the
    last arrival counts in full; ``window_load=F`` instead rescales the arrivals so that the jobs offer F x
    the cluster's GPUs while they arrive (as the common ``load`` does for traces): the regime where a
    queue really forms."""
    n = _convert(f"synthetic:{arg}", "N_JOBS", arg, int)
    if load is not None and window_load is not None:
        raise ValueError("give load=F or window_load=F, not both (window_load sets the arrival rate itself)")
    w = synthetic_workload(
        n,
        load=DEFAULT_SYNTHETIC_LOAD if load is None else load,
        cluster_gpus=cluster_gpus,
        seed=seed,
        n_tenants=tenants,
        model_rule=model_rule,
        gpu_scale=gpu_scale,
    )
    if window_load is None:
        return w
    try:
        return window(w, load=window_load, cluster_gpus=cluster_gpus)
    except ValueError as e:
        raise ValueError(f"window_load: {e}; for synthetic jobs: more jobs or a larger gpu_scale") from None


def _philly(
    arg: str,
    *,
    seed: int,
    cluster_gpus: int,
    pollux_filter: bool = False,
    model_rule: str = "independent",
    gpu_scale: int = 1,
    measured_on: str | None = None,
) -> Workload:
    w = load_philly(Path(arg), seed=seed, pollux_filter=pollux_filter, model_rule=model_rule, gpu_scale=gpu_scale)
    if measured_on is None:
        return w
    from cluster_sim.perf_model import durations_on_reference

    return durations_on_reference(w, measured_on)


def _openb(
    arg: str, *, seed: int, cluster_gpus: int, include_pending: bool = False, model_rule: str = "independent"
) -> Workload:
    return load_openb(Path(arg), seed=seed, include_pending=include_pending, model_rule=model_rule)


def _gavel(
    arg: str, *, seed: int, cluster_gpus: int, throughputs: str | None = None, worker_type: str = "v100"
) -> Workload:
    return load_gavel(Path(arg), seed=seed, throughputs_path=throughputs, worker_type=worker_type)


def _pollux(arg: str, *, seed: int, cluster_gpus: int, profiles: str | None = None) -> Workload:
    return load_pollux(Path(arg), seed=seed, traces=profiles)


register_workload_kind(
    "synthetic",
    _synthetic,
    syntax="synthetic:N_JOBS[,load=F|window_load=F][,model_rule=independent|pollux|gavel][,gpu_scale=K][,tenants=N]",
    options={"load": float, "window_load": float, "tenants": int, "model_rule": str, "gpu_scale": int},
)
register_workload_kind(
    "philly",
    _philly,
    syntax="philly:PATH/philly.csv[,model_rule=independent|pollux|gavel][,gpu_scale=K][,measured_on=GPU_TYPE]",
    options={"pollux_filter": flag, "model_rule": str, "gpu_scale": int, "measured_on": str},
)
register_workload_kind(
    "openb",
    _openb,
    syntax="openb:PATH/openb_pod_list_*.csv[,model_rule=independent|pollux|gavel]",
    options={"include_pending": flag, "model_rule": str},
)
register_workload_kind(
    "gavel",
    _gavel,
    syntax="gavel:PATH/<vc>.trace or a folder of .trace files",
    options={"throughputs": str, "worker_type": str},
)
register_workload_kind(
    "pollux",
    _pollux,
    syntax="pollux:PATH/workload-N.csv[,profiles=DIR] (DIR/<app>/placements[-<gpu>].csv; default: traces/ beside "
    "the workloads folder)",
    options={"profiles": str},
)
