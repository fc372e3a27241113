"""Reading job pairs given only by descriptors from CSV, and writing predictions next to them.

Columns (one row per pair; both jobs run on ``gpu_type``):

- ``a_params_m``, ``b_params_m``: parameters, millions;
- ``a_gflops``, ``b_gflops``: GFLOPs per training sample = 3 x the forward multiply-adds, in billions
  (forward + backward ~ 3 x forward; the convention of published model figures: ResNet-50 3 x 4.1 = 12.3);
- ``a_batch``, ``b_batch``: per-GPU batch size, samples;
- ``a_solo_sps``, ``b_solo_sps``: samples per second the job trains at alone on one GPU of ``gpu_type``;
- ``a_amp``, ``b_amp``: mixed precision, 0/1;
- ``gpu_type``: a known GPU (see ``--gpu-specs``); ``level``: ``gpu`` (same GPU), ``server`` or ``uplink``;
- optional, from a short solo profile, empty where unknown: ``a_gpu_util``/``b_gpu_util`` (% of time a
  kernel runs, as nvidia-smi reports), ``a_mem_util``/``b_mem_util`` (% of peak memory bandwidth),
  ``a_mem_gb``/``b_mem_gb`` (device memory held, GB).

Output adds ``pred_norm_a``/``pred_norm_b`` (throughput next to the partner / alone, in (0, 1]),
``pred_std_a``/``pred_std_b`` (the doubt of that figure: ensemble spread, calibrated, mixed with the
prior's out of range), ``out_of_range`` (1 if an input of either job lies outside the range the model was
fitted on) and ``ood`` (which inputs, e.g. ``a:amp;b:gpu_fp32_tflops``). Out of range the answer moves
toward a prior with no fitted part: 1.0 (no interference), or time slicing ``min(1, 100 / (u_a + u_b))``
where both jobs' ``gpu_util`` is given. A profile column the model was not fitted on is not used beyond
that prior (the model file's ``inputs`` says which it was fitted on).

Training on your own measurements (``marlsched interference train --data pairs:FILE``, alone or beside
``--data gavel:PATH``) reads the same columns plus the measured ``norm_a``, ``norm_b`` (each job's
throughput next to the other / alone; ``level`` must be ``gpu``). To measure a pair: run each job alone
on one GPU of ``gpu_type`` and note its samples/s after warm-up (``solo_sps``); while it runs alone, log
``nvidia-smi --query-gpu=utilization.gpu,utilization.memory,memory.used --format=csv,noheader,nounits
-lms 500 -i GPU`` for a minute, whose medians are ``gpu_util``, ``mem_util`` and ``mem_gb`` (MiB / 1024);
then run the two together on that GPU (one co-location run per pair) and divide each job's samples/s by
its solo figure for ``norm_a`` and ``norm_b``. A model fitted on profiled pairs uses the profile columns
for the jobs that have them (within the range of those it was fitted on).
"""

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
PROFILE = {"gpu_util": (0.0, 100.0), "mem_util": (0.0, 100.0), "mem_gb": (0.0, float("inf"))}
OPTIONAL = tuple(f"{p}_{c}" for p in "ab" for c in PROFILE)
OUTPUT_COLUMNS = ("pred_norm_a", "pred_norm_b", "pred_std_a", "pred_std_b", "out_of_range", "ood")
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
    prof = {c: np.full(n, np.nan) for c in OPTIONAL}
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
            raise _bad(
                path, line, "gpu_type", r["gpu_type"],
                "one of " + ", ".join(GPU_SPECS) + " (describe others in a YAML file: --gpu-specs FILE)",
            )  # fmt: skip
        gpu[i] = g
        lv = _LEVELS.get(r["level"].lower())
        if lv is None:
            raise _bad(path, line, "level", r["level"], "gpu, server or uplink (or 0, 1, 2)")
        level[i] = lv
        for c in OPTIONAL:
            raw = r.get(c, "")
            if raw == "":
                prof[c][i] = np.nan
                continue
            lo, hi = PROFILE[c[2:]]
            try:
                v = float(raw)
            except ValueError:
                raise _bad(path, line, c, raw, "a number or empty") from None
            if not (lo < v <= hi if c.endswith("mem_gb") else lo <= v <= hi):
                want = "a positive number of GB" if c.endswith("mem_gb") else "a percentage, 0-100"
                raise _bad(path, line, c, raw, want)
            prof[c][i] = v
    gpu = gpu.astype(str)

    def side(p: str) -> JobColumns:
        return JobColumns(
            params_m=num[f"{p}_params_m"],
            gflops=num[f"{p}_gflops"],
            batch=num[f"{p}_batch"],
            solo_sps=num[f"{p}_solo_sps"],
            amp=amp[f"{p}_amp"],
            gpu_type=gpu,
            **{c: prof[f"{p}_{c}"] for c in PROFILE},
        )

    return rows, header, side("a"), side("b"), level


def write_predictions(
    path: str | Path,
    rows: list[dict[str, str]],
    header: list[str],
    pred_a: np.ndarray,
    pred_b: np.ndarray,
    std_a: np.ndarray,
    std_b: np.ndarray,
    out_of_range: np.ndarray,
    ood: list[str] | None = None,
) -> None:
    """The input rows with :data:`OUTPUT_COLUMNS` appended (written atomically)."""
    ood = ood if ood is not None else [""] * len(rows)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fields = [h for h in header if h not in OUTPUT_COLUMNS] + list(OUTPUT_COLUMNS)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        for r, a, b, sa, sb, oor, names in zip(rows, pred_a, pred_b, std_a, std_b, out_of_range, ood, strict=True):
            w.writerow(
                {**r, "pred_norm_a": f"{a:.6f}", "pred_norm_b": f"{b:.6f}", "pred_std_a": f"{sa:.6f}",
                 "pred_std_b": f"{sb:.6f}", "out_of_range": int(oor), "ood": names}
            )  # fmt: skip
    os.replace(tmp, path)


MEASURED = ("norm_a", "norm_b")  # measured throughput next to the partner / alone, for evaluation


def read_measured(
    path: str | Path, rows: list[dict[str, str]], purpose: str = "evaluating"
) -> tuple[np.ndarray, np.ndarray]:
    """The measured ``norm_a`` and ``norm_b`` of every row of a pairs CSV, each in (0, 1.5] (a pair may
    run slightly faster than alone within measurement noise)."""
    path = Path(path)
    if rows and any(c not in rows[0] for c in MEASURED):
        missing = ", ".join(c for c in MEASURED if c not in rows[0])
        raise ValueError(
            f"{path}: line 1: missing column(s) {missing}; {purpose} needs the measured columns "
            f"{', '.join(MEASURED)} (throughput of each job next to its partner / alone; see how to measure in "
            "`marlsched interference train --help`)"
        )
    out = np.empty((2, len(rows)))
    for i, r in enumerate(rows):
        for k, c in enumerate(MEASURED):
            try:
                v = float(r[c])
            except ValueError:
                raise _bad(path, i + 2, c, r[c], "a number") from None
            if not (np.isfinite(v) and 0.0 < v <= 1.5):
                raise _bad(path, i + 2, c, r[c], "a measured normalised throughput in (0, 1.5]")
            out[k, i] = v
    _warn_repeated(path, rows, out)
    return out[0], out[1]


def _warn_repeated(path: Path, rows: list[dict[str, str]], measured: np.ndarray) -> None:
    """Say where one pair (the same two jobs on one GPU type and level, in either order) was measured on several
    lines with throughputs more than 0.1 apart: both are fitted, as repeated measurements, which may be a typo."""
    import warnings

    seen: dict[tuple, int] = {}
    said = []
    for i, r in enumerate(rows):
        a, b = (tuple(r.get(f"{p}_{c}", "").strip() for c in (*JOB_COLUMNS, *PROFILE)) for p in "ab")
        where = (r.get("gpu_type", "").strip(), r.get("level", "").strip().lower())
        first = seen.get((a, b, *where))
        swapped = first is None and (first := seen.get((b, a, *where))) is not None
        if first is None:
            seen[(a, b, *where)] = i
            continue
        then = measured[::-1, first] if swapped else measured[:, first]
        if np.abs(then - measured[:, i]).max() > 0.1:
            said.append(f"lines {first + 2} and {i + 2} ({then[0]:g}/{then[1]:g} against "
                        f"{measured[0, i]:g}/{measured[1, i]:g})")  # fmt: skip
    if said:
        warnings.warn(
            f"{path}: the same pair measured again with other throughputs, on {'; '.join(said[:3])}"
            f"{f' and {len(said) - 3} more' if len(said) > 3 else ''}: both are fitted as repeated measurements; "
            "if one is a typo, correct or remove it",
            UserWarning,
            stacklevel=3,
        )
