"""Results of one simulation: per-job outcomes, cluster timeline and the summary metrics.

Metrics are derived from the per-job arrays on demand, so the result object is the single source of
truth and a written ``metrics.json`` always agrees with the written ``jobs.csv``.
"""

from __future__ import annotations

import csv
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cluster_sim.workload import Workload
from topology.view import Level

METRIC_KEYS = (
    "jobs_total", "jobs_completed", "avg_jct", "p50_jct", "p95_jct", "p99_jct", "avg_queue_delay",
    "avg_first_start_delay", "makespan", "gpu_utilization", "fragmentation", "mean_slowdown",
    "mean_interference_slowdown", "preemptions", "preemptions_per_job", "resizes_per_job", "avg_gpus_held",
    "avg_goodput", "restarts_per_job", "jobs_per_gpu", "round_ms_p50", "round_ms_p95", "estimated_jobs", "events",
    "decisions",
    "decisions_per_second", "wall_seconds",
)  # fmt: skip


def sample_timeline(t: np.ndarray, values: np.ndarray, points: int) -> tuple[np.ndarray, np.ndarray]:
    """A step function (value from each time on) sampled at ``points`` evenly spaced times."""
    if len(t) == 0:
        return np.zeros(0), np.zeros(0)
    grid = np.linspace(float(t[0]), float(t[-1]), points)
    idx = np.clip(np.searchsorted(t, grid, side="right") - 1, 0, len(t) - 1)
    return grid, values[idx].astype(np.float64)


@dataclass(eq=False)
class SimResult:
    """One scheduler's run of a workload (what ``Simulator.run`` returns): per-job arrays indexed like the
    workload's jobs (``jct``, ``start``, ``end``, ``preemptions`` ...; nan where a job never started or finished),
    the run's totals, and :meth:`metrics` (the table ``simulate`` prints), :meth:`write` (``metrics.json`` and
    ``jobs.csv``) and :meth:`jobs_frame` (the per-job table as a pandas DataFrame)."""

    scheduler: str
    cluster: str
    num_gpus: int
    workload: Workload
    start: np.ndarray  # first start time per job (nan if never started)
    end: np.ndarray  # completion time per job (nan if unfinished)
    span: np.ndarray  # topology Level of the last placement
    preemptions: np.ndarray
    resizes: np.ndarray  # GPU-count changes of a running job (elastic)
    executed: np.ndarray  # wall seconds each job held GPUs (restart stalls included), over all its stints
    attained: np.ndarray  # GPU-seconds each job held
    interference_slowdown: np.ndarray  # mean fraction of throughput lost to interference while running
    busy_gpu_seconds: float
    fragmented_gpu_seconds: float
    events: int
    decisions: int
    scheduler_seconds: float
    wall_seconds: float
    timeline_t: np.ndarray
    timeline_busy: np.ndarray
    timeline_queue: np.ndarray
    restarts: np.ndarray  # allocations after the first: resumes after preemption, moves and resizes
    gpu_types: tuple[str, ...]  # the cluster's GPU types, the columns of attained_by_type
    attained_by_type: np.ndarray  # (jobs, GPU types) GPU-seconds each job held on each type
    round_seconds: np.ndarray  # the scheduler's wall time per call
    active_job_seconds: float  # ∫ (queued + running jobs) dt
    estimated_jobs: int = 0  # jobs that ran on a GPU type where their speed is an estimate, not a measurement

    def gpu_hours_by_type(self) -> dict[str, float]:
        """GPU-hours per finished job on each GPU type (Sia's per-type GPU-hours), mean over finished jobs."""
        done = ~np.isnan(self.end)
        if not done.any():
            return {t: 0.0 for t in self.gpu_types}
        mean = self.attained_by_type[done].mean(axis=0) / 3600.0
        return {t: float(mean[i]) for i, t in enumerate(self.gpu_types)}

    @property
    def jct(self) -> np.ndarray:
        """Job completion time per job, seconds from its arrival to its end (nan if unfinished)."""
        return self.end - self.workload.arrival

    @property
    def queue_delay(self) -> np.ndarray:
        """Seconds each job spent waiting, before its first start and after every preemption."""
        return self.jct - self.executed

    @property
    def first_start_delay(self) -> np.ndarray:
        return self.start - self.workload.arrival

    @property
    def gpus_held(self) -> np.ndarray:
        """Average GPUs each job held while it ran (its request, unless it was resized)."""
        return np.divide(self.attained, self.executed, out=np.zeros_like(self.executed), where=self.executed > 0)

    @property
    def goodput(self) -> np.ndarray:
        """Work each job did per second on GPUs, relative to its request placed ideally (its ideal run time
        over the seconds it held GPUs, restart stalls included). Above 1: resizing and batch tuning trained
        it faster than it asked; below 1: placement, interference and restarts slowed it."""
        return np.divide(
            self.workload.duration, self.executed, out=np.full_like(self.executed, np.nan), where=self.executed > 0
        )

    @property
    def slowdown(self) -> np.ndarray:
        """JCT relative to the run time the workload gives the job, on the type its times are given for (V100 for
        Philly-like traces, T4 for Pollux's and Sia's workloads; 1.0 = ran at once, ideally placed; below 1 on a
        faster type or with more GPUs than it asked for)."""
        return self.jct / self.workload.duration

    def plot_series(self, points: int) -> dict[str, np.ndarray]:
        """What the plots draw (finished jobs' JCTs; queue and busy fraction at ``points`` times from the
        first event), small enough to keep per run of an experiment."""
        grid, busy = sample_timeline(self.timeline_t, self.timeline_busy, points)
        _, queue = sample_timeline(self.timeline_t, self.timeline_queue, points)
        jct = self.jct
        return {
            "jct": jct[~np.isnan(jct)].astype(np.float64),
            "t": grid - (grid[0] if len(grid) else 0.0),
            "utilization": busy / self.num_gpus,
            "queue": queue,
        }

    def metrics(self) -> dict[str, float | int | str]:
        """The run's figures (seconds unless said): ``avg_jct``, ``p50_jct``, ``p95_jct``, ``p99_jct`` over finished
        jobs; ``avg_queue_delay`` (time waiting, all stints) and ``avg_first_start_delay``; ``makespan`` (first
        arrival to last end); ``gpu_utilization`` and ``fragmentation`` (shares of GPU-time over the makespan);
        ``mean_slowdown`` (JCT over the trace's run time) and ``mean_interference_slowdown``; ``preemptions``,
        ``preemptions_per_job``, ``restarts_per_job``, ``resizes_per_job``; ``avg_gpus_held``, ``avg_goodput``,
        ``jobs_per_gpu``; ``gpu_hours_per_job_<TYPE>``; the scheduler's cost (``round_ms_p50``, ``round_ms_p95``,
        ``decisions``, ``decisions_per_second``) and the simulation's (``events``, ``wall_seconds``); and
        ``jobs_total``, ``jobs_completed``, ``estimated_jobs`` (jobs run at an estimated speed)."""
        done = ~np.isnan(self.end)
        jct = self.jct[done]
        n = len(self.workload)
        t0 = float(self.workload.arrival[0]) if n else 0.0
        makespan = float(np.nanmax(self.end) - t0) if done.any() else 0.0
        capacity = self.num_gpus * makespan

        def pct(q: float) -> float:
            return float(np.percentile(jct, q)) if len(jct) else float("nan")

        return {
            "scheduler": self.scheduler,
            "cluster": self.cluster,
            "jobs_total": n,
            "jobs_completed": int(done.sum()),
            "avg_jct": float(jct.mean()) if len(jct) else float("nan"),
            "p50_jct": pct(50),
            "p95_jct": pct(95),
            "p99_jct": pct(99),
            "avg_queue_delay": float(self.queue_delay[done].mean()) if done.any() else float("nan"),
            "avg_first_start_delay": float(np.nanmean(self.first_start_delay)) if n else float("nan"),
            "makespan": makespan,
            "gpu_utilization": float(self.busy_gpu_seconds) / capacity if capacity > 0 else 0.0,
            "fragmentation": float(self.fragmented_gpu_seconds) / capacity if capacity > 0 else 0.0,
            "mean_slowdown": float(self.slowdown[done].mean()) if done.any() else float("nan"),
            "mean_interference_slowdown": float(self.interference_slowdown[done].mean()) if done.any() else 0.0,
            "preemptions": int(self.preemptions.sum()),
            "preemptions_per_job": float(self.preemptions.mean()) if n else 0.0,
            "resizes_per_job": float(self.resizes.mean()) if n else 0.0,
            "avg_gpus_held": float(self.gpus_held[done].mean()) if done.any() else float("nan"),
            "avg_goodput": float(self.goodput[done].mean()) if done.any() else float("nan"),
            "restarts_per_job": float(self.restarts.mean()) if n else 0.0,
            # contention: jobs waiting or running per GPU, averaged over the run (Sia reports jobs per round)
            "jobs_per_gpu": self.active_job_seconds / (makespan * self.num_gpus) if makespan > 0 else 0.0,
            "round_ms_p50": float(np.median(self.round_seconds)) * 1e3 if len(self.round_seconds) else 0.0,
            "round_ms_p95": float(np.percentile(self.round_seconds, 95)) * 1e3 if len(self.round_seconds) else 0.0,
            **{f"gpu_hours_per_job_{t}": h for t, h in self.gpu_hours_by_type().items()},
            "estimated_jobs": self.estimated_jobs,
            "events": self.events,
            "decisions": self.decisions,
            "decisions_per_second": self.decisions / self.scheduler_seconds if self.scheduler_seconds > 0 else 0.0,
            "wall_seconds": self.wall_seconds,
        }

    def job_columns(self) -> dict[str, np.ndarray | list]:
        """One entry per job in every column of ``jobs.csv`` (times in seconds, GPU-hours per type): what
        :meth:`write` formats and :meth:`jobs_frame` holds."""
        w = self.workload
        cols: dict[str, np.ndarray | list] = {
            "id": np.arange(len(w)), "arrival": w.arrival, "start": self.start, "end": self.end,
            "gpus": w.num_gpus.astype(np.int64), "jct": self.jct, "queue_delay": self.queue_delay,
            "slowdown": self.slowdown,
            "placement_span": [Level(int(s)).name.lower() if s >= 0 else "" for s in self.span],
            "preemptions": self.preemptions, "model": [w.models[int(m)] for m in w.model],
            "tenant": [w.tenants[int(t)] for t in w.tenant], "first_start_delay": self.first_start_delay,
            "executed": self.executed, "gpus_held": self.gpus_held, "resizes": self.resizes,
            "goodput": self.goodput, "restarts": self.restarts, "interference_slowdown": self.interference_slowdown,
        }  # fmt: skip
        for i, t in enumerate(self.gpu_types):
            cols[f"gpu_hours_{t}"] = self.attained_by_type[:, i] / 3600.0
        if w.job_ids is not None:  # the log's own ids, after the simulator's index
            cols = {"id": cols.pop("id"), "job_id": [str(x) for x in w.job_ids], **cols}
        return cols

    def jobs_frame(self) -> Any:
        """The per-job table of ``jobs.csv`` as a pandas DataFrame, unrounded (for a notebook or a paper's figure)."""
        import pandas as pd

        return pd.DataFrame(self.job_columns()).set_index("id")

    def job_rows(self) -> list[list]:
        """``jobs.csv``'s header and rows: times to the millisecond, slowdown to 6 decimals, goodput and GPU-hours
        to 4."""
        cols = self.job_columns()
        digits = {"slowdown": 6, "goodput": 4, "interference_slowdown": 4}
        digits |= {k: 4 for k in cols if k.startswith("gpu_hours_")}
        ints = ("id", "gpus", "preemptions", "resizes", "restarts")
        out: list[list] = [list(cols)]
        for j in range(len(self.workload)):
            row: list = []
            for k, v in cols.items():
                x = v[j]
                if k in ints:
                    row.append(int(x))
                elif isinstance(x, str):
                    row.append(x)
                else:
                    row.append(f"{float(x):.{digits.get(k, 3)}f}")
            out.append(row)
        return out

    def write(self, out_dir: str | Path) -> dict:
        """Write ``metrics.json`` and ``jobs.csv`` into ``out_dir`` atomically; returns the metrics."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        metrics = self.metrics()
        write_atomic(out / "metrics.json", json.dumps(metrics, indent=2) + "\n")
        write_atomic(out / "jobs.csv", self.job_rows())
        return metrics


def write_atomic(path: Path, content: str | bytes | list[list]) -> None:
    """Write text, bytes or CSV rows to a temporary file beside ``path`` and rename it into place, readable
    as any file the user creates (the umask's mode, not the temporary file's private 0600)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        if isinstance(content, bytes):
            with os.fdopen(fd, "wb") as fb:
                fb.write(content)
        else:
            with os.fdopen(fd, "w", newline="") as f:
                if isinstance(content, str):
                    f.write(content)
                else:
                    csv.writer(f).writerows(content)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def write_dict_rows(rows: list[dict[str, Any]], path: Path) -> None:
    """CSV of dict rows (the first row's keys are the header; an empty list gives an empty file), atomically."""
    if not rows:
        write_atomic(path, "")
        return
    header = list(rows[0])
    write_atomic(path, [header, *([row.get(k, "") for k in header] for row in rows)])


def _umask() -> int:
    mask = os.umask(0o022)  # reading the umask means setting it; put it straight back
    os.umask(mask)
    return mask


def save_figure(fig, path: Path, dpi: int = 110) -> None:
    """Save a matplotlib figure as PNG atomically (no half-written plot if the run is killed) and close it."""
    import io

    import matplotlib.pyplot as plt

    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    plt.close(fig)
    write_atomic(Path(path), buf.getvalue())
