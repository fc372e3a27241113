"""Which source files are marlsched's own: its warnings are said as one line and kept with a run's results, and
an error's innermost frame outside them (and outside the libraries) is the user's code to point at."""

from __future__ import annotations

from pathlib import Path

PACKAGES = ("cluster_sim", "interference", "marl", "topology", "experiments")
_ROOT = Path(__file__).resolve().parents[1]


def is_ours(filename: str) -> bool:
    """Whether ``filename`` is a module of marlsched's own packages."""
    try:
        return Path(filename).resolve().relative_to(_ROOT).parts[0] in PACKAGES
    except (ValueError, IndexError):
        return False
