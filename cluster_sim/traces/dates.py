"""Dates as seconds: the one conversion the trace loaders, the window specs and the periods share."""

from __future__ import annotations

import numpy as np


def seconds_since(origin: np.datetime64 | str, date: str) -> float:
    """Seconds from ``origin`` to ``date`` (both ISO dates or date-times without a zone)."""
    try:
        when = np.datetime64(date, "s")
    except ValueError:
        raise ValueError(f"{date!r} is not a date; write YYYY-MM-DD or YYYY-MM-DDTHH:MM[:SS]") from None
    return float((when - np.datetime64(origin, "s")) / np.timedelta64(1, "s"))


__all__ = ["seconds_since"]
