"""Reading job pairs given only by descriptors from CSV, and writing predictions next to them."""

from __future__ import annotations

import csv
import os
from pathlib import Path

import numpy as np

from interference.base import Sharing
from interference.features import JobColumns
from interference.gpu_specs import GPU_SPECS

JOB_COLUMNS = ("params_m", "gflops", "batch", "solo_sps", "amp")
REQUIRED = (
    *(f"a_{c}" for c in JOB_COLUMNS),
    *(f"b_{c}" for c in JOB_COLUMNS),
    "gpu_type",
    "level",
)
OUTPUT_COLUMNS = ("pred_norm_a", "pred_norm_b")
_TRUE = {"1", "true", "yes", "y", "t"}
_FALSE = {"0", "false", "no", "n", "f"}
_LEVELS = {s.name.lower(): int(s) for s in Sharing} | {str(int(s)): int(s) for s in Sharing}


def _bad(path: Path, line: int, column: str, value: str, want: str) -> ValueError:
    return ValueError(f"{path}: line {line}: column {column!r} is {value!r}; expected {want}")


def read_pairs_csv(path: str | Path) -> tuple[list[dict[str, str]], list[str], JobColumns, JobColumns, np.ndarray]:
    """Rows, header, job A columns, job B columns and sharing levels of a pairs CSV.

    Both jobs run on ``gpu_type``; ``level`` is gpu, server or uplink (or 0, 1, 2).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"pairs file {path} not found")
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        header = [h.strip() for h in (reader.fieldnames or [])]
        missing = [c for c in REQUIRED if c not in header]
        if missing:
            raise ValueError(
                f"{path}: line 1: missing column(s) {', '.join(missing)}; a pairs CSV needs the header "
                + ",".join(REQUIRED)
            )
        rows = [{(k or "").strip(): (v or "").strip() for k, v in r.items()} for r in reader]
    if not rows:
        raise ValueError(f"{path}: no data rows after the header")

    n = len(rows)
    num = {c: np.empty(n) for c in REQUIRED if not c.endswith("amp") and c not in ("gpu_type", "level")}
    amp = {"a_amp": np.empty(n), "b_amp": np.empty(n)}
    gpu = np.empty(n, dtype=object)
    level = np.empty(n, dtype=np.int64)
    for i, r in enumerate(rows):
        line = i + 2
        for c in num:
            try:
                v = float(r[c])
            except ValueError:
                raise _bad(path, line, c, r[c], "a number") from None
            if not np.isfinite(v) or v <= 0:
                raise _bad(path, line, c, r[c], "a positive number")
            if c.endswith("batch") and v != int(v):
                raise _bad(path, line, c, r[c], "a whole number of samples")
            num[c][i] = v
        for c in amp:
            low = r[c].lower()
            if low not in _TRUE | _FALSE:
                raise _bad(path, line, c, r[c], "0/1 or true/false")
            amp[c][i] = 1.0 if low in _TRUE else 0.0
        g = r["gpu_type"].upper()
        if g not in GPU_SPECS:
            raise _bad(path, line, "gpu_type", r["gpu_type"], "one of " + ", ".join(GPU_SPECS))
        gpu[i] = g
        lv = _LEVELS.get(r["level"].lower())
        if lv is None:
            raise _bad(path, line, "level", r["level"], "gpu, server or uplink (or 0, 1, 2)")
        level[i] = lv
    gpu = gpu.astype(str)

    def side(p: str) -> JobColumns:
        return JobColumns(
            params_m=num[f"{p}_params_m"],
            gflops=num[f"{p}_gflops"],
            batch=num[f"{p}_batch"],
            solo_sps=num[f"{p}_solo_sps"],
            amp=amp[f"{p}_amp"],
            gpu_type=gpu,
        )

    return rows, header, side("a"), side("b"), level


def write_predictions(
    path: str | Path, rows: list[dict[str, str]], header: list[str], pred_a: np.ndarray, pred_b: np.ndarray
) -> None:
    """The input rows with ``pred_norm_a`` and ``pred_norm_b`` appended (written atomically)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fields = [h for h in header if h not in OUTPUT_COLUMNS] + list(OUTPUT_COLUMNS)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        for r, a, b in zip(rows, pred_a, pred_b, strict=True):
            w.writerow({**r, "pred_norm_a": f"{a:.6f}", "pred_norm_b": f"{b:.6f}"})
    os.replace(tmp, path)
