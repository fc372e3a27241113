"""Numeric features of jobs, GPUs and sharing levels, computed column-wise for many jobs at once.

Learned models see only these numbers, never a job's name, so they apply to job types no table measured.
Besides the raw facts of :meth:`JobDescriptor.features` they include quantities relative to the GPU the
job runs on (achieved fraction of peak FLOP/s, parameter traffic relative to the host link, model state
relative to device memory): the same job is a heavy tenant on a K80 and a light one on an H100.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from interference.base import JobDescriptor, Sharing
from interference.gpu_specs import GPU_SPECS, gpu_spec

JOB_FEATURES = (
    "log1p_params_m",
    "log1p_gflops",
    "log1p_batch",
    "log1p_solo_sps",
    "amp",
    "log1p_achieved_gflops",
    "log_frac_peak_flops",
    "log_steps_per_s",
    "log_param_traffic_vs_pcie",
    "log_model_state_vs_mem",
)
GPU_FEATURES = ("log_fp32_tflops", "log_mem_bw", "log_mem_gb")
NUM_LEVELS = len(Sharing)
_EPS = 1e-6


@dataclass(frozen=True, eq=False)
class JobColumns:
    """Descriptor facts as columns (one row per job)."""

    params_m: np.ndarray
    gflops: np.ndarray
    batch: np.ndarray
    solo_sps: np.ndarray
    amp: np.ndarray
    gpu_type: np.ndarray  # str

    def __len__(self) -> int:
        return len(self.params_m)

    def take(self, idx: np.ndarray) -> JobColumns:
        """The rows at ``idx``."""
        return JobColumns(
            params_m=self.params_m[idx],
            gflops=self.gflops[idx],
            batch=self.batch[idx],
            solo_sps=self.solo_sps[idx],
            amp=self.amp[idx],
            gpu_type=self.gpu_type[idx],
        )

    @staticmethod
    def from_descriptors(jobs: Sequence[JobDescriptor]) -> JobColumns:
        return JobColumns(
            params_m=np.array([j.params_m for j in jobs], dtype=np.float64),
            gflops=np.array([j.gflops for j in jobs], dtype=np.float64),
            batch=np.array([j.batch for j in jobs], dtype=np.float64),
            solo_sps=np.array([j.solo_sps for j in jobs], dtype=np.float64),
            amp=np.array([float(j.amp) for j in jobs], dtype=np.float64),
            gpu_type=np.array([j.gpu_type.upper() for j in jobs]),
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


def job_features(cols: JobColumns, gpu: dict[str, np.ndarray] | None = None) -> np.ndarray:
    """(N, len(JOB_FEATURES)) float32; the first six equal :meth:`JobDescriptor.features`.

    ``gpu`` is ``gpu_table(cols.gpu_type)`` when the caller already has it.
    """
    gpu = gpu_table(cols.gpu_type) if gpu is None else gpu
    out = np.empty((len(cols), len(JOB_FEATURES)), dtype=np.float64)
    out[:, 0] = np.log1p(cols.params_m)
    out[:, 1] = np.log1p(cols.gflops)
    out[:, 2] = np.log1p(cols.batch)
    out[:, 3] = np.log1p(cols.solo_sps)
    out[:, 4] = cols.amp
    out[:, 5] = np.log1p(cols.gflops * cols.solo_sps)
    out[:, 6] = np.log(frac_peak_flops(cols, gpu) + _EPS)
    out[:, 7] = np.log(steps_per_s(cols) + _EPS)
    out[:, 8] = np.log(param_traffic_gbs(cols) / gpu["pcie_gbs"] + _EPS)
    out[:, 9] = np.log(16.0 * cols.params_m * 1e6 / (gpu["mem_gb"] * 1e9) + _EPS)  # weights+grads+Adam
    return out.astype(np.float32)


def gpu_features(gpu_types: np.ndarray, gpu: dict[str, np.ndarray] | None = None) -> np.ndarray:
    """(N, len(GPU_FEATURES)) float32 (``gpu``: ``gpu_table(gpu_types)`` if already computed)."""
    gpu = gpu_table(gpu_types) if gpu is None else gpu
    return np.stack([np.log(gpu["fp32_tflops"]), np.log(gpu["mem_bw_gbs"]), np.log(gpu["mem_gb"])], axis=1).astype(
        np.float32
    )


def level_onehot(levels: np.ndarray) -> np.ndarray:
    """(N, NUM_LEVELS) float32 one-hot of :class:`Sharing` values."""
    levels = np.asarray(levels, dtype=np.int64)
    if levels.size and (levels.min() < 0 or levels.max() >= NUM_LEVELS):
        raise ValueError(f"sharing level must be one of {[int(s) for s in Sharing]}, got {sorted(set(levels))}")
    out = np.zeros((len(levels), NUM_LEVELS), dtype=np.float32)
    out[np.arange(len(levels)), levels] = 1.0
    return out


def known_gpu_types() -> tuple[str, ...]:
    return tuple(GPU_SPECS)
