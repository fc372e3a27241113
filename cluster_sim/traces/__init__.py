"""Loaders that turn public cluster traces, and tables of jobs built in Python, into
:class:`cluster_sim.workload.Workload` objects.

One module per format; all share the window options of :func:`cluster_sim.traces.window.window` and
raise :class:`TraceFormatError` (file, line, reason) on a malformed row.
"""

from cluster_sim.traces.frame import FrameError, workload_from_frame
from cluster_sim.traces.gavel import load_gavel
from cluster_sim.traces.openb import load_openb
from cluster_sim.traces.philly import load_philly
from cluster_sim.traces.pollux import load_pollux
from cluster_sim.traces.table import TraceFormatError
from cluster_sim.traces.window import QuietWindowError, window

__all__ = [
    "FrameError",
    "QuietWindowError",
    "TraceFormatError",
    "load_gavel",
    "load_openb",
    "load_philly",
    "load_pollux",
    "window",
    "workload_from_frame",
]
