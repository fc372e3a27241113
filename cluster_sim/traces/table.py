"""Reading trace files into typed numpy columns, with errors that name the file, line and field.

A trace with one bad row among 64,000 is common (a truncated copy, a hand edit); the user needs the line
number to fix it, so every conversion here is vectorised on the good path and only on failure walks the
column to find the first bad value.
"""

from __future__ import annotations

import csv
import gc
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np


class TraceFormatError(ValueError):
    """A trace file that cannot be read: names the file, the 1-based line (header = line 1) and why."""

    def __init__(self, path: str | Path, line: int | None, reason: str) -> None:
        self.path = str(path)
        self.line = line
        self.reason = reason
        where = f"{self.path}: line {line}: " if line is not None else f"{self.path}: "
        super().__init__(where + reason)


def open_trace(path: str | Path, kind: str) -> Path:
    """``path`` as a Path; a missing file raises FileNotFoundError saying which loader wanted it."""
    p = Path(path)
    if not p.exists():
        where = "" if p.is_absolute() else f"read from {Path.cwd()}, where the command runs; "
        raise FileNotFoundError(f"{kind} trace not found: {p} ({where}check the path; traces are not shipped)")
    return p


@contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic garbage collector off for a block that allocates many small acyclic objects (a CSV's rows):
    in a process that already holds torch and Ray, its collections walk the whole heap again and again, and
    reading Philly's 64,000 rows takes 1-2.5 s instead of 0.15 s."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def read_csv_columns(
    path: Path,
    required: Sequence[str],
    *,
    header_check: Callable[[list[str]], None] | None = None,
    optional: Sequence[str] = (),
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The ``required`` columns of a headed CSV as string arrays, and those of ``optional`` that it has, plus each
    row's 1-based line number.

    Blank lines are skipped. A header lacking a required column, or a row with the wrong number of fields,
    raises :class:`TraceFormatError`. ``header_check`` may raise a more specific error first.
    """
    with gc_paused():
        return _read_columns(path, required, header_check, optional)


def unread_columns(path: Path, read: Sequence[str]) -> list[str]:
    """The columns of a headed CSV's header that are not among ``read`` (in file order)."""
    with open(path, newline="", encoding="utf-8") as f:
        header = next(csv.reader(f), [])
    return [h.strip().lstrip("\ufeff") for h in header if h.strip().lstrip("\ufeff") not in read]


def _read_columns(
    path: Path, required: Sequence[str], header_check: Callable[[list[str]], None] | None, optional: Sequence[str]
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    if not rows:
        raise TraceFormatError(path, None, f"file is empty; expected a header with columns {','.join(required)}")
    header = [h.strip().lstrip("\ufeff") for h in rows[0]]
    if header_check is not None:
        header_check(header)
    missing = [c for c in required if c not in header]
    if missing:
        raise TraceFormatError(
            path,
            1,
            f"header lacks column(s) {', '.join(missing)}; expected columns: {','.join(required)} "
            f"(found: {','.join(header)})",
        )
    body = rows[1:]
    lines = np.arange(2, len(body) + 2, dtype=np.int64)
    lens = np.fromiter(map(len, body), dtype=np.int64, count=len(body))
    blank = lens == 0
    wrong = (lens != len(header)) & ~blank
    if wrong.any():
        i = int(np.argmax(wrong))
        raise TraceFormatError(
            path, int(lines[i]), f"expected {len(header)} comma-separated fields as in the header, found {lens[i]}"
        )
    if blank.any():
        body = [r for r, b in zip(body, blank, strict=True) if not b]
        lines = lines[~blank]
    columns = list(zip(*body, strict=True)) if body else [() for _ in header]
    wanted = [*required, *(c for c in optional if c in header)]
    out = {name: np.array(columns[header.index(name)], dtype=str) for name in wanted}
    return out, lines


def float_column(values: np.ndarray, name: str, lines: np.ndarray, path: Path) -> np.ndarray:
    """``values`` as float64; the first non-numeric or non-finite entry raises with its line."""
    try:
        out = values.astype(np.float64)
    except ValueError:
        for v, line in zip(values, lines, strict=True):
            try:
                float(v)
            except ValueError:
                raise TraceFormatError(path, int(line), f"column {name}={str(v)!r} is not a number") from None
        raise
    bad = ~np.isfinite(out)
    if bad.any():
        i = int(np.argmax(bad))
        raise TraceFormatError(path, int(lines[i]), f"column {name}={str(values[i])!r} is not a finite number")
    return out


def int_column(values: np.ndarray, name: str, lines: np.ndarray, path: Path) -> np.ndarray:
    """``values`` as int64; the first entry that is not a plain integer raises with its line."""
    try:
        return values.astype(np.int64)
    except (ValueError, OverflowError):
        for v, line in zip(values, lines, strict=True):
            try:
                int(v)
            except ValueError:
                raise TraceFormatError(path, int(line), f"column {name}={str(v)!r} is not an integer") from None
        raise


def require(ok: np.ndarray, what: str, values: np.ndarray, name: str, lines: np.ndarray, path: Path) -> None:
    """Raise for the first row where ``ok`` is false: ``column name=value <what>``."""
    if not ok.all():
        i = int(np.argmin(ok))
        raise TraceFormatError(path, int(lines[i]), f"column {name}={str(values[i])!r} {what}")


def tenant_codes(names: np.ndarray) -> tuple[np.ndarray, tuple[str, ...]]:
    """Tenant index per row and the sorted tenant names (sorted so the numbering is file-order free)."""
    uniq, inv = np.unique(names, return_inverse=True)
    return inv.astype(np.int16), tuple(str(u) for u in uniq)
