"""What every interference model speaks: job descriptors, sharing levels and the query protocol.

A job is described by numeric facts (size, compute per sample, batch size, solo speed, precision), never
only by a name, so that a learned model can generalise to job types that no table measured. The simulator
asks an interference model for the throughput factor (1.0 = as fast as alone) of a job given the jobs it
shares resources with.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Protocol, runtime_checkable

import numpy as np


class Sharing(IntEnum):
    """How closely two jobs share hardware. Lower values interfere more."""

    GPU = 0  # the same GPU (space sharing, as in Gavel's pairwise measurements)
    SERVER = 1  # different GPUs of one server: PCIe, host memory bandwidth, CPU
    UPLINK = 2  # different servers whose traffic crosses the same oversubscribed uplink


@dataclass(frozen=True)
class JobDescriptor:
    """Numeric facts about a training job that determine how it contends for resources.

    ``name`` is only used to look up measured tables; models must not depend on it.
    ``solo_sps`` is the job's isolated throughput in samples per second on one GPU of ``gpu_type``.
    The last three are optional facts from a short solo profile (as non-intrusive schedulers collect
    them); models use them when present and estimate them from the other fields when not.
    """

    params_m: float  # parameters, millions
    gflops: float  # forward+backward GFLOPs per sample
    batch: int  # per-GPU batch size
    solo_sps: float  # isolated samples/s on one GPU of gpu_type
    amp: bool = False  # mixed precision
    gpu_type: str = "V100"
    name: str = ""
    gpu_util: float | None = None  # solo GPU utilisation, % of time a kernel runs (nvidia-smi)
    mem_util: float | None = None  # solo memory-bandwidth utilisation, % of peak
    mem_gb: float | None = None  # device memory the job holds, GB

    def __post_init__(self) -> None:
        # queries are hashed at every scheduling event (prediction caches); hash the fields once
        object.__setattr__(self, "_hash", hash(self._key()))

    def _key(self) -> tuple:
        return (
            self.params_m, self.gflops, self.batch, self.solo_sps, self.amp, self.gpu_type, self.name,
            self.gpu_util, self.mem_util, self.mem_gb,
        )  # fmt: skip

    def __hash__(self) -> int:
        return self._hash


@dataclass(frozen=True)
class CoLocation:
    """One query: the throughput factor of ``job`` given its neighbours and how each is shared."""

    job: JobDescriptor
    neighbours: tuple[tuple[JobDescriptor, Sharing], ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.job, self.neighbours)))

    def __hash__(self) -> int:
        return self._hash


@runtime_checkable
class InterferenceModel(Protocol):
    """Maps co-location queries to throughput factors in (0, 1]; 1.0 means no slowdown.

    A model may set ``pure = True`` when its answer depends on the query alone (no state, no draws): the
    simulator then asks each distinct co-location once and reuses the answer. A model may also offer
    ``flat_factors(flat)``, the same answers for queries as :class:`interference.queries.FlatQueries`,
    which the simulator then builds directly instead of :class:`CoLocation` objects.
    """

    name: str

    def throughput_factors(self, queries: Sequence[CoLocation]) -> np.ndarray:
        """For each query, the job's speed beside its neighbours over its speed alone, in (0, 1]."""
        ...


class NoInterference:
    """Jobs never slow each other down: the ``--interference none`` mode."""

    name = "none"

    def throughput_factors(self, queries: Sequence[CoLocation]) -> np.ndarray:
        return np.ones(len(queries), dtype=np.float64)
