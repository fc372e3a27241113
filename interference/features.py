"""Numeric facts of jobs on their GPU, computed column-wise for many jobs at once.

Predictors see only these numbers, never a job's name, so they apply to job types no table measured.
Each is relative to the GPU the job runs on (the same job is a heavy tenant on a K80 and a light one on
an H100):

- ``INTENSITY_FEATURES``: how hard a job uses the resources a GPU's tenants share. Achieved fraction of
  peak FLOP/s (compute), GPU seconds of work per step at peak (how long it holds the GPU each time it
  runs), and FLOPs per parameter (activation volume relative to the weights: memory traffic).
  Interference predictors are monotone in a partner's intensity.
- ``OWN_FEATURES``: what else shapes how much a job suffers (batch size, step rate, mixed precision).
- Profile columns (``gpu_util``, ``mem_util`` in %, ``mem_gb``), NaN where the user has none.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from interference.base import JobDescriptor
from interference.gpu_specs import GPU_SPECS, gpu_spec

INTENSITY_FEATURES = ("log_frac_peak_flops", "log_step_gpu_seconds", "log_flops_per_param")
OWN_FEATURES = ("log_batch", "log_steps_per_s", "amp")
# what each derived input is made of, in the columns a user writes (for messages about them)
FEATURE_SOURCES = {
    "log_frac_peak_flops": "share of the GPU's peak FLOP/s, from solo_sps x gflops",
    "log_step_gpu_seconds": "GPU seconds per step at peak, from gflops x batch",
    "log_flops_per_param": "FLOPs per parameter, from gflops / params_m",
    "log_batch": "batch",
    "log_steps_per_s": "steps/s, from solo_sps / batch",
}
PROFILE_COLUMNS = ("gpu_util", "mem_util", "mem_gb")
_EPS = 1e-9


@dataclass(frozen=True, eq=False)
class JobColumns:
    """Descriptor facts as columns (one row per job); profile columns are NaN where unknown."""

    params_m: np.ndarray
    gflops: np.ndarray
    batch: np.ndarray
    solo_sps: np.ndarray
    amp: np.ndarray
    gpu_type: np.ndarray  # str
    gpu_util: np.ndarray | None = None  # %, NaN = not profiled
    mem_util: np.ndarray | None = None  # %
    mem_gb: np.ndarray | None = None  # GB

    def __post_init__(self) -> None:
        for c in PROFILE_COLUMNS:
            if getattr(self, c) is None:
                object.__setattr__(self, c, np.full(len(self.params_m), np.nan))

    def __len__(self) -> int:
        return len(self.params_m)

    def take(self, idx: np.ndarray) -> JobColumns:
        """The rows at ``idx``."""
        return JobColumns(**{f: getattr(self, f)[idx] for f in self.__dataclass_fields__})

    @staticmethod
    def from_descriptors(jobs: Sequence[JobDescriptor]) -> JobColumns:
        def opt(field: str) -> np.ndarray:
            return np.array([np.nan if getattr(j, field) is None else getattr(j, field) for j in jobs], dtype=float)

        return JobColumns(
            params_m=np.array([j.params_m for j in jobs], dtype=np.float64),
            gflops=np.array([j.gflops for j in jobs], dtype=np.float64),
            batch=np.array([j.batch for j in jobs], dtype=np.float64),
            solo_sps=np.array([j.solo_sps for j in jobs], dtype=np.float64),
            amp=np.array([float(j.amp) for j in jobs], dtype=np.float64),
            gpu_type=np.array([j.gpu_type.upper() for j in jobs]),
            **{c: opt(c) for c in PROFILE_COLUMNS},
        )


def gpu_table(gpu_types: np.ndarray) -> dict[str, np.ndarray]:
    """Per-row datasheet figures for an array of GPU type names.

    One vectorised comparison per known type rather than a sort of the strings: this sits on the
    latency path of batched prediction.
    """
    gpu_types = np.asarray(gpu_types).astype(str, copy=False)
    code = np.full(len(gpu_types), -1, dtype=np.int64)
    names, columns = _spec_columns()
    for i, name in enumerate(names):
        code[gpu_types == name] = i
    if (code < 0).any():  # other spellings: case-insensitive lookup, a clear error for unknown types
        for u in np.unique(gpu_types[code < 0]):
            code[gpu_types == u] = names.index(gpu_spec(str(u)).name)
    return {field: column[code] for field, column in columns.items()}


_SPEC_COLUMNS: dict[tuple, tuple[list[str], dict[str, np.ndarray]]] = {}


def _spec_columns() -> tuple[list[str], dict[str, np.ndarray]]:
    """The datasheet as one array per figure (rebuilt only if the known GPUs change)."""
    key = tuple((name, id(spec)) for name, spec in GPU_SPECS.items())
    hit = _SPEC_COLUMNS.get(key)
    if hit is None:
        specs = list(GPU_SPECS.values())
        fields = ("fp32_tflops", "mem_bw_gbs", "mem_gb", "pcie_gbs")
        hit = (list(GPU_SPECS), {f: np.array([getattr(s, f) for s in specs], dtype=np.float64) for f in fields})
        _SPEC_COLUMNS.clear()
        _SPEC_COLUMNS[key] = hit
    return hit


def steps_per_s(cols: JobColumns) -> np.ndarray:
    return cols.solo_sps / np.maximum(cols.batch, 1.0)


def frac_peak_flops(cols: JobColumns, gpu: dict[str, np.ndarray]) -> np.ndarray:
    """Achieved training FLOP/s as a fraction of the GPU's FP32 peak."""
    return cols.gflops * cols.solo_sps / (gpu["fp32_tflops"] * 1e3)


def param_traffic_gbs(cols: JobColumns) -> np.ndarray:
    """Bytes per second a data-parallel job moves for gradients: 2 x fp32 parameters per step (ring all-reduce)."""
    return 8.0 * cols.params_m * 1e6 * steps_per_s(cols) / 1e9


def intensity_features(cols: JobColumns, gpu: dict[str, np.ndarray] | None = None) -> np.ndarray:
    """(N, len(INTENSITY_FEATURES)) float64 (``gpu``: ``gpu_table(cols.gpu_type)`` if already computed)."""
    gpu = gpu_table(cols.gpu_type) if gpu is None else gpu
    return np.stack(
        [
            np.log(frac_peak_flops(cols, gpu) + _EPS),
            np.log(cols.gflops * cols.batch / (gpu["fp32_tflops"] * 1e3) + _EPS),
            np.log(cols.gflops * 1e3 / cols.params_m + _EPS),
        ],
        axis=1,
    )


def own_features(cols: JobColumns) -> np.ndarray:
    """(N, len(OWN_FEATURES)) float64."""
    return np.stack([np.log(np.maximum(cols.batch, 1.0)), np.log(steps_per_s(cols) + _EPS), cols.amp], axis=1)


def known_gpu_types() -> tuple[str, ...]:
    return tuple(GPU_SPECS)
