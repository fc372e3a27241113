"""One entry point for the simulator: ``--interference {none,oracle,learned}``."""

from __future__ import annotations

import warnings

from interference.base import InterferenceModel, NoInterference
from interference.gavel_data import load_gavel_pairs
from interference.ground_truth import GroundTruthInterference

MODES = ("none", "oracle", "learned")


def load_interference_model(mode: str, model_path: str | None = None) -> InterferenceModel:
    """The interference model of ``mode``.

    - ``none``: no slowdown; ``model_path`` is ignored.
    - ``oracle``: the ground truth. ``model_path`` is Gavel's throughput file (``gavel:PATH``, a JSON file
      or its folder) whose measured pairs it reproduces; without it every level is parametric.
    - ``learned``: the set model saved by ``marlsched interference train`` at ``model_path``.
    """
    if mode == "none":
        return NoInterference()
    if mode == "oracle":
        if model_path is None:
            warnings.warn(
                "oracle interference without Gavel's measured pairs: GPU sharing uses the parametric model "
                "only; pass the throughput file (gavel:PATH) to use the measurements",
                stacklevel=2,
            )
            return GroundTruthInterference(None)
        return GroundTruthInterference(load_gavel_pairs(model_path))
    if mode == "learned":
        if model_path is None:
            raise ValueError(
                "--interference learned needs --interference-model MODEL; train one with "
                "`marlsched interference train --data gavel:PATH --seed 0 --out MODEL`"
            )
        from interference.learned import LearnedInterference  # torch only in learned mode

        return LearnedInterference.load(model_path)
    raise ValueError(f"unknown interference mode {mode!r}; choose one of {', '.join(MODES)}")
