"""Co-location interference: measured data (Gavel), ground truth, and a learned set-model predictor.

Kept light on import: the simulator needs :mod:`interference.base` on every run, torch only in learned
mode, so :func:`load_interference_model` is imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from interference.base import CoLocation, InterferenceModel, JobDescriptor, NoInterference, Sharing

if TYPE_CHECKING:
    from interference.loader import interference_modes, load_interference_model, register_interference_model

__all__ = [
    "CoLocation", "InterferenceModel", "JobDescriptor", "NoInterference", "Sharing", "interference_modes",
    "load_interference_model", "register_interference_model",
]  # fmt: skip
_LAZY = ("interference_modes", "load_interference_model", "register_interference_model")


def __getattr__(name: str):
    if name in _LAZY:
        from interference import loader

        return getattr(loader, name)
    raise AttributeError(f"module 'interference' has no attribute {name!r}")
