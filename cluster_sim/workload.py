"""A workload: the static facts of every job of a run, as columns of numpy arrays.

Jobs are numbered 0..N-1 in arrival order; that index is the job id everywhere in the simulator. The
``duration`` column is the run time under the job's ideal placement (the reference placement of the
performance model), which is what traces record; the simulator turns it into work.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

# each column's kind: a value of another kind that holds the same numbers (a float column of whole GPU counts, as
# pandas makes from a column with a gap, a list) is converted; one that does not is named with its row
_COLUMN_KINDS: dict[str, tuple[type, str]] = {
    "arrival": (np.float64, "f"),
    "num_gpus": (np.int32, "i"),
    "duration": (np.float64, "f"),
    "model": (np.int16, "i"),
    "batch_size": (np.int32, "i"),
    "tenant": (np.int16, "i"),
}


def _column(name: str, values: object) -> np.ndarray:
    """``values`` as a 1-D array of column ``name``'s kind (an array of that kind is kept as it is)."""
    dtype, kind = _COLUMN_KINDS[name]
    a = np.asarray(values)
    if a.ndim != 1:
        raise ValueError(f"Workload column {name!r}: a {a.ndim}-dimensional array; give one value per job")
    if (a.dtype.kind == kind and (kind == "i" or np.isfinite(a).all())) or (kind == "i" and a.dtype.kind == "u"):
        return a
    try:
        floats = a.astype(np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"Workload column {name!r}: values of type {a.dtype} are not numbers") from None
    bad = ~np.isfinite(floats) | ((floats != np.round(floats)) if kind == "i" else False)
    if np.any(bad):
        i = int(np.argmax(bad))
        whole = "a whole number" if kind == "i" else "a finite number"
        raise ValueError(f"Workload column {name!r}, job {i}: {a[i].item()!r} is not {whole}")
    return floats.astype(dtype)


@dataclass(frozen=True, eq=False)
class Workload:
    """The jobs of a run, one row per job in arrival order (the row is the job's id in the simulator and its
    results). A table of jobs in Python is best made one with
    :func:`cluster_sim.traces.workload_from_frame`, which fills models and batch
    sizes as a trace file's loader does; built by hand, columns of another kind that hold the same numbers (a
    float column of whole GPU counts, a list) are converted, others are refused with the job's row."""

    arrival: np.ndarray  # float64 (N,), seconds from the start, non-decreasing
    num_gpus: np.ndarray  # int32 (N,), GPUs requested (>= 1)
    duration: np.ndarray  # float64 (N,), seconds under the ideal placement (> 0)
    model: np.ndarray  # int16 (N,), index into ``models``
    batch_size: np.ndarray  # int32 (N,), global batch size
    tenant: np.ndarray  # int16 (N,), index into ``tenants`` (virtual cluster / user group)
    models: tuple[str, ...]  # model-zoo names
    tenants: tuple[str, ...] = ("default",)
    source: str = "synthetic"
    meta: dict = field(default_factory=dict)
    # bool (N,) or None: jobs that keep their GPU count even under an elastic scheduler (Sia's ``category``
    # column: ``rigid``); their GPU type is still the scheduler's to choose
    rigid: np.ndarray | None = None
    # str (N,) or None: each job's id in the log it came from (a log's ``job_id`` column), written beside the
    # simulator's own index in ``jobs.csv`` so that results join back to the log
    job_ids: np.ndarray | None = None

    def __post_init__(self) -> None:
        for name in _COLUMN_KINDS:
            object.__setattr__(self, name, _column(name, getattr(self, name)))
        n = len(self.arrival)
        for name in ("rigid", "job_ids"):
            if (column := getattr(self, name)) is not None and len(column) != n:
                raise ValueError(f"Workload column {name!r} has {len(column)} rows, expected {n}")
        for name in ("num_gpus", "duration", "model", "batch_size", "tenant"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"Workload column {name!r} has {len(getattr(self, name))} rows, expected {n}")
        if n and np.any(np.diff(self.arrival) < 0):
            raise ValueError("Workload arrivals must be sorted; sort the jobs by arrival before building it")
        if n and (self.num_gpus.min() < 1 or not np.all(self.duration > 0)):
            raise ValueError("Workload needs num_gpus >= 1 and duration > 0 for every job")
        for name, names in (("model", self.models), ("tenant", self.tenants)):
            column = getattr(self, name)
            if n and (column.min() < 0 or column.max() >= len(names)):
                i = int(np.argmax((column < 0) | (column >= len(names))))
                raise ValueError(
                    f"Workload column {name!r}, job {i}: {column[i]} is no index into {name}s (0..{len(names) - 1}); "
                    f"it holds indices into the {name}s tuple, not names"
                )

    def __len__(self) -> int:
        return len(self.arrival)

    def subset(self, idx: np.ndarray) -> Workload:
        """The jobs at ``idx`` (sorted), renumbered from 0; arrivals keep their times."""
        idx = np.sort(np.asarray(idx))
        return Workload(
            arrival=self.arrival[idx],
            num_gpus=self.num_gpus[idx],
            duration=self.duration[idx],
            model=self.model[idx],
            batch_size=self.batch_size[idx],
            tenant=self.tenant[idx],
            models=self.models,
            tenants=self.tenants,
            source=self.source,
            meta=dict(self.meta),
            rigid=None if self.rigid is None else self.rigid[idx],
            job_ids=None if self.job_ids is None else self.job_ids[idx],
        )
