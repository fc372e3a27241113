"""One learning-curve plot for every training loop: a run folder's ``learning_curve.png``.

Each loop records rows (one per iteration or round) in ``progress.csv``; the curve draws chosen columns of
those rows against an x column, with the references they are judged against as horizontal lines. Points
whose value is missing (``""`` or NaN: an iteration that evaluated nothing) are skipped, and a curve with
fewer than ``min_points`` says so on the plot instead of letting a dot pass for a trend.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Series:
    """One line of the curve: column ``y`` (times ``scale``) against column ``x`` of the rows ``where`` keeps."""

    y: str
    label: str | None = None
    x: str = "iteration"
    scale: float = 1.0
    marker: str = "o"
    where: Callable[[Mapping[str, Any]], bool] | None = None
    x_of: Callable[[list[Mapping[str, Any]]], list[float]] | None = None  # x values computed from the kept rows


def _value(v: Any) -> float | None:
    if v == "" or v is None:
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def plot_learning_curve(
    rows: Sequence[Mapping[str, Any]],
    path: Path,
    series: Sequence[Series],
    *,
    xlabel: str,
    ylabel: str,
    references: Mapping[str, float] | None = None,
    title: str | None = None,
    min_points: int = 0,
) -> None:
    """Draw ``series`` of ``rows`` with ``references`` (label -> value, dashed) and save ``path`` atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from cluster_sim.results import save_figure

    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    drawn = 0
    for s in series:
        kept = [r for r in rows if (s.where is None or s.where(r)) and _value(r.get(s.y)) is not None]
        xs = s.x_of(kept) if s.x_of is not None else [float(r[s.x]) for r in kept]
        ys = [s.scale * float(_value(r[s.y]) or 0.0) for r in kept]
        if xs:
            ax.plot(xs, ys, marker=s.marker, ms=3 if len(xs) > 20 else 5, label=s.label)
        drawn = max(drawn, len(xs))
    for k, (name, value) in enumerate((references or {}).items()):
        ax.axhline(value, ls="--", lw=1, color=f"C{k + 3}" if k else "grey", label=name)
    if drawn < min_points:
        ax.text(0.5, 0.6, f"{drawn} of {len(rows)} iterations have a figure:\ntoo few points for a curve",
                transform=ax.transAxes, ha="center", va="center", fontsize=9, color="0.3")  # fmt: skip
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(textwrap.fill(title, 72), fontsize=10)  # a long reference (a class of one's own) wraps
    ax.grid(alpha=0.3)
    if any(s.label for s in series) or references:
        ax.legend(fontsize=8)
    save_figure(fig, path)
