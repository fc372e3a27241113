"""One entry point for the simulator's interference: ``--interference MODE`` with an optional data path.

Built-in modes are ``none``, ``oracle`` and ``learned``; :func:`register_interference_model` adds
another (a plugin module calls it on import), which then works in every command and config.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

from interference.base import InterferenceModel, NoInterference
from interference.gavel_data import load_gavel_pairs
from interference.ground_truth import GroundTruthInterference

InterferenceFactory = Callable[[str | None], InterferenceModel]
INTERFERENCE_MODELS: dict[str, InterferenceFactory] = {}


def register_interference_model(name: str, factory: InterferenceFactory, *, replace: bool = False) -> None:
    """Add an interference mode: ``factory(path_or_None) -> InterferenceModel`` (an object with
    ``throughput_factors(queries) -> sequence of floats in (0, 1]``, see :mod:`interference.base`);
    ``path`` is what the user passed as ``--interference-model`` / ``interference_data``."""
    if not name or not all(c.isalnum() or c in "-_" for c in name):
        raise ValueError(f"interference mode {name!r} must be a plain word (letters, digits, '-', '_')")
    if name in INTERFERENCE_MODELS and not replace:
        raise ValueError(f"interference mode {name!r} is already registered; pass replace=True to override it")
    INTERFERENCE_MODELS[name] = factory


def interference_modes() -> tuple[str, ...]:
    """The registered modes, built-in ones first."""
    return tuple(INTERFERENCE_MODELS)


def load_interference_model(mode: str, model_path: str | None = None) -> InterferenceModel:
    """The interference model of ``mode``.

    - ``none``: no slowdown; ``model_path`` is ignored.
    - ``oracle``: the ground truth. ``model_path`` is Gavel's throughput file (``gavel:PATH``, a JSON file
      or its folder) whose measured pairs it reproduces; without it every level is parametric.
    - ``learned``: the predictor ``marlsched interference train`` saved at ``model_path`` (a JSON file; the
      shipped one is ``experiments/policies/interference-gavel/model.json``).
    - any mode a plugin registered (:func:`interference_modes` lists them all).
    """
    if mode not in INTERFERENCE_MODELS:
        raise ValueError(f"unknown interference mode {mode!r}; choose one of {', '.join(interference_modes())}")
    return INTERFERENCE_MODELS[mode](model_path)


def _none(model_path: str | None) -> InterferenceModel:
    return NoInterference()


def _oracle(model_path: str | None) -> InterferenceModel:
    if model_path is None:
        warnings.warn(
            "oracle interference without Gavel's measured pairs: co-located jobs slow each other by the parametric "
            "model only; give Gavel's throughput file to use the measurements (--interference-model gavel:PATH; a "
            "run config's interference_data; a training config's interference_data where it has one)",
            stacklevel=3,
        )
        return GroundTruthInterference(None)
    return GroundTruthInterference(load_gavel_pairs(model_path))


def _learned(model_path: str | None) -> InterferenceModel:
    if model_path is None:
        raise ValueError(
            "--interference learned needs --interference-model MODEL; train one with "
            "`marlsched interference train --data gavel:PATH --seed 0 --out MODEL`"
        )
    from interference.learned import LearnedInterference  # torch only in learned mode

    return LearnedInterference.load(model_path)


register_interference_model("none", _none)
register_interference_model("oracle", _oracle)
register_interference_model("learned", _learned)
