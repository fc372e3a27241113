"""Co-location interference: measured data (Gavel), ground truth, and a learned set-model predictor.

Kept light on import: the simulator needs :mod:`interference.base` on every run, torch only in learned
mode, so :func:`load_interference_model` is imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from interference.base import CoLocation, InterferenceModel, JobDescriptor, NoInterference, Sharing

if TYPE_CHECKING:
    from interference.loader import load_interference_model

__all__ = ["CoLocation", "InterferenceModel", "JobDescriptor", "NoInterference", "Sharing", "load_interference_model"]


def __getattr__(name: str):
    if name == "load_interference_model":
        from interference.loader import load_interference_model

        return load_interference_model
    raise AttributeError(f"module 'interference' has no attribute {name!r}")
