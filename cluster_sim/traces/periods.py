"""The three periods of the Philly trace that every experiment keeps apart, named once.

A learned scheduler's figure means something only when the windows it is reported on chose nothing:

- ``train`` (the trace's start .. 2017-10-15): networks and heuristic settings are fitted here;
- ``select`` (2017-10-15 .. 2017-11-01): seeds, iterations, margins and recipes are chosen here;
- ``report`` (2017-11-01 .. 2017-11-15): figures are reported here and nothing is chosen.

Windows are given to the workload loaders as seconds from the trace's first arrival
(``start=4973359``) or as dates (``start=2017-11-01``, :mod:`cluster_sim.workload_spec`); every window string
in marlsched is built by :func:`window_spec` from these periods.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from cluster_sim.traces.dates import seconds_since
from cluster_sim.workload_spec import trace_start

DAY = 86_400.0
# first arrival of the Philly trace as Pollux's artifact ships it (pollux-osdi21/traces/philly.csv; its timestamps
# carry no zone); load_philly measures arrivals from it, so a date maps to the same seconds on every machine
PHILLY_START = np.datetime64("2017-09-04T10:30:41", "s")


def philly_seconds(date: str) -> float:
    """Seconds from the Philly trace's first arrival to ``date`` (ISO, e.g. ``2017-11-01`` or
    ``2017-11-01T12:00``)."""
    return seconds_since(PHILLY_START, date)


def philly_date(seconds: float) -> str:
    """The date of ``seconds`` from the Philly trace's first arrival (the inverse of :func:`philly_seconds`):
    ``2017-11-01`` at midnight, else ``2017-09-24T10:30:41``; a fraction of a second is dropped."""
    when = PHILLY_START + np.timedelta64(int(seconds), "s")
    text = str(when)
    return text.removesuffix("T00:00:00")


class TraceTime(float):
    """A config field in seconds from the Philly trace's first arrival that may also be written as a date
    (``train_end: 2017-10-15``), so that configs name the periods' boundaries instead of 3504559."""


def trace_seconds(value: object, trace: str | None = None) -> float:
    """``value`` as seconds from the first arrival of ``trace`` (a workload spec; None: the Philly trace): a number
    as it is; a date or date-time (a string, or what YAML reads ``2017-10-15`` as) counted from that trace's own
    start, as a window's ``start=DATE`` is (:func:`trace_origin`; a date before it is 0)."""
    import datetime as dt

    if isinstance(value, bool):
        raise ValueError(f"expected seconds from the trace's start or a date like 2017-10-15, got {value!r}")
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, dt.date):  # datetime is a date too
        value = value.isoformat(timespec="seconds") if isinstance(value, dt.datetime) else str(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
        seconds_since("1970-01-01", value.strip())  # not a date: the error names the forms
        # a date before the first arrival (its day's midnight) is the trace's start
        return max(0.0, seconds_since(trace_origin(trace, value), value.strip()))
    raise ValueError(f"expected seconds from the trace's start or a date like 2017-10-15, got {value!r}")


def trace_origin(trace: str | None, date: str = "") -> np.datetime64:
    """The first arrival that ``trace``'s seconds count from (None, or a Philly-format file not at hand: the Philly
    trace's); an error naming the trace where its loader records no date to count ``date`` from."""
    if trace is None:
        return PHILLY_START
    try:
        origin = trace_start(trace)
    except FileNotFoundError:
        if trace.partition(":")[0].strip().lower() != "philly":
            raise
        # a config is checked before its trace is at hand (a fresh clone without ../shared): Philly's calendar
        # until the file is there; loading it then reads windows from the file's own start
        return PHILLY_START
    if origin is None:
        raise ValueError(
            f"{date or 'a date'} is a date, but {trace} records no start time to count from; give seconds from its "
            "first arrival"
        )
    return np.datetime64(origin, "s")


def on_philly_calendar(trace: str | None) -> bool:
    """Whether ``trace``'s seconds are the Philly trace's (its periods apply): a Philly-format file whose first
    arrival is the shipped trace's. Another file in that format counts from its own first arrival."""
    if trace is None:
        return True
    if trace.partition(":")[0].strip().lower() != "philly":
        return False
    try:
        return trace_origin(trace) == PHILLY_START
    except (ValueError, OSError):
        return False


def trace_date(seconds: float, trace: str | None = None) -> str:
    """The date of ``seconds`` from ``trace``'s first arrival (None: Philly's; :func:`philly_date`'s format), or
    ``N s`` where the trace records no date."""
    try:
        origin = trace_origin(trace)
    except (ValueError, OSError):
        return f"{seconds:.0f} s"
    return str(origin + np.timedelta64(int(seconds), "s")).removesuffix("T00:00:00")


@dataclass(frozen=True)
class Period:
    """A span of the Philly trace with one use: ``[first, end)`` as dates (``first=None``: the trace's start)."""

    name: str
    first: str | None
    end: str
    use: str

    @property
    def start_s(self) -> float:
        return 0.0 if self.first is None else philly_seconds(self.first)

    @property
    def end_s(self) -> float:
        return philly_seconds(self.end)

    def windows(self, trace: str, days: float, stride: float, load: float | None) -> list[str]:
        """Workload specs of ``days``-long windows of ``trace`` every ``stride`` days inside the period."""
        return span_windows(trace, self.start_s, self.end_s, days, stride, load, f"the {self.name} period")


def span_windows(
    trace: str, start: float, end: float, days: float, stride: float, load: float | None, what: str = "the span"
) -> list[str]:
    """Workload specs of ``days``-long windows of ``trace`` every ``stride`` days from ``start`` to ``end``
    (seconds from its first arrival); ``what`` names the span in the error where none fits."""
    length, step = days * DAY, stride * DAY
    starts = np.arange(start, end - length + 1.0, step)
    if not len(starts):
        raise ValueError(f"{what} ({(end - start) / DAY:.1f} days) holds no {days:g}-day window")
    return [window_spec(trace, t, t + length, load) for t in starts]


PERIODS: dict[str, Period] = {
    "train": Period("train", None, "2017-10-15", "fit networks and heuristic settings"),
    "select": Period("select", "2017-10-15", "2017-11-01", "choose seeds, iterations, margins and recipes"),
    "report": Period("report", "2017-11-01", "2017-11-15", "report figures; never used for a choice"),
}
# 2017-11-01: where the windows the shipped policies were never trained on begin (train and select lie before it)
HELD_OUT_START = PERIODS["report"].start_s
REPORT_END = PERIODS["report"].end_s


def refuse_report_period(what: str, start: float, end: float, trace: str = "philly:") -> None:
    """Refuse a span of the Philly trace that fits or chooses something (training windows, the windows a margin
    is tuned on) where it reaches into the report period, whose figures would then be selection figures. Other
    traces (another file in Philly's format included: its seconds count from its own start) have no periods:
    nothing is refused."""
    if end <= HELD_OUT_START or start >= REPORT_END or not on_philly_calendar(trace):
        return
    report = PERIODS["report"]
    raise ValueError(
        f"{what}: the span {philly_date(start)}..{philly_date(end)} reaches into the report period ({report.first}.."
        f"{report.end}), which is never used for a choice; end it by {report.first} (train before 2017-10-15, "
        f"select in 2017-10-15..{report.first}; cluster_sim.traces.periods)"
    )


def period(name: str) -> Period:
    """The named period; an error listing the names otherwise."""
    if name not in PERIODS:
        raise ValueError(f"unknown period {name!r}; the periods are {', '.join(PERIODS)}")
    return PERIODS[name]


def window_spec(trace: str, start: float, end: float, load: float | None = None, extra: Sequence[str] = ()) -> str:
    """``TRACE,start=S,end=E[,load=L][,EXTRA...]``: one window of a trace spec (seconds from its first arrival,
    written as whole seconds; ``load`` as Python writes the float, so it reads back bit for bit)."""
    parts = [trace, f"start={start:.0f}", f"end={end:.0f}"]
    if load is not None:
        parts.append(f"load={load}")
    return ",".join([*parts, *extra])


def window_label(spec: str) -> str:
    """A window spec's ``start=S,end=E`` as dates of its trace (``2017-10-01..2017-10-08``) and its other options,
    for progress lines; a spec of a trace without dates keeps its seconds."""
    kind, _, rest = spec.partition(":")
    items = rest.split(",")
    options = dict(item.split("=", 1) for item in items[1:] if "=" in item)
    trace = f"{kind}:{items[0]}"
    if not {"start", "end"} <= options.keys() or kind.strip().lower() == "synthetic":
        return ",".join(items[1:]) or spec
    start, end = float(options.pop("start")), float(options.pop("end"))
    if trace_date(start, trace).endswith(" s"):
        return ",".join(items[1:])
    dates = f"{trace_date(start, trace)}..{trace_date(end, trace)}"
    return ",".join([dates, *(f"{k}={v}" for k, v in options.items())])
