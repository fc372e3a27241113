"""Synthetic workloads with the job-size statistics of the Microsoft Philly trace, and the model rule.

The tables below are empirical distributions of ``philly.csv`` (Pollux's copy, see
``../shared/traces/README.md``) after Pollux's filter ``duration >= 60 s and gpu_time < 1000 GPU-hours``
(58,477 of 64,483 jobs). They were computed once by :func:`derive_philly_tables` (run this module as a
script with the path to ``philly.csv`` to print them) and are stored here so the installed package needs
no trace file; a test recomputes them from the file and checks they still agree.

Quantile tables hold the value at each probability of :data:`QUANTILE_PROBS`; a draw interpolates
linearly in log space between them, which keeps the heavy tails (a few jobs of weeks) without storing
the whole trace.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from cluster_sim.model_rules import (
    GAVEL_MODELS,
    GPU_TIME_BUCKET_EDGES_S,
    MODEL_RULES,
    assign_models_by_gpu_time,
    assign_models_by_tenant,
    default_batch_sizes,
    gpu_time_bucket,
    make_rng,
)
from cluster_sim.model_zoo import MODEL_NAMES, model_index
from cluster_sim.workload import Workload

QUANTILE_PROBS: tuple[float, ...] = (
    0.0, 0.01, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 0.999, 1.0,
)  # fmt: skip

# From philly.csv, Pollux filter (duration >= 60, gpu_time < 1000 h): number of jobs per GPU count.
PHILLY_GPU_COUNTS: dict[int, int] = {1: 55618, 2: 328, 4: 1401, 8: 1020, 12: 7, 16: 71, 24: 4, 32: 28}

# From philly.csv, Pollux filter: duration quantiles (s) per GPU-count bucket. A job of g GPUs uses the
# first bucket whose upper bound is >= g: 1, 2, 3-4, 5-8, more than 8.
DURATION_BUCKET_UPPER: tuple[int, ...] = (1, 2, 4, 8)
PHILLY_DURATION_QUANTILES: tuple[tuple[float, ...], ...] = (
    (
        60.0, 61.0, 68.0, 75.0, 212.0, 582.0, 980.0, 1470.0,
        1978.0, 2535.0, 3631.0, 8418.0, 17095.0, 125955.0, 1097758.0, 3256045.0,
    ),
    (
        73.0, 92.0, 99.0, 105.0, 203.0, 5736.0, 42251.0, 79533.0,
        112827.0, 169089.0, 249202.0, 359894.0, 526214.0, 1331614.0, 1502363.0, 1521148.0,
    ),
    (
        61.0, 70.0, 122.0, 156.0, 482.0, 1575.0, 8374.0, 18346.0,
        36133.0, 72230.0, 102746.0, 185256.0, 274339.0, 555929.0, 839256.0, 868158.0,
    ),
    (
        64.0, 72.0, 144.0, 196.0, 504.0, 1400.0, 6859.0, 20314.0,
        58466.0, 129146.0, 183831.0, 252987.0, 357621.0, 414458.0, 446908.0, 447772.0,
    ),
    (
        68.0, 69.0, 117.0, 200.0, 407.0, 1110.0, 7904.0, 42154.0,
        52911.0, 58086.0, 80457.0, 124887.0, 162592.0, 181158.0, 216423.0, 220684.0,
    ),
)  # fmt: skip

# From philly.csv, Pollux filter: GPU-time quantiles (GPU-seconds) within each of those four buckets
# ([0, 1 h), [1 h, 10 h), [10 h, 100 h), [100 h, 1000 h)).
PHILLY_GPU_TIME_QUANTILES: tuple[tuple[float, ...], ...] = (
    (
        60.0, 61.0, 66.0, 72.0, 146.0, 347.0, 648.0, 976.0,
        1389.0, 1759.0, 2155.0, 2611.0, 2812.0, 3485.0, 3585.0, 3599.0,
    ),
    (
        3600.0, 3630.0, 3801.0, 4000.0, 4350.0, 5055.0, 5757.0, 6212.0,
        8628.0, 10827.0, 13206.0, 19189.0, 24309.0, 31258.0, 35370.0, 35938.0,
    ),
    (
        36287.0, 37290.0, 42224.0, 46619.0, 55714.0, 63379.0, 74191.0, 90950.0,
        108579.0, 138302.0, 182531.0, 267516.0, 315416.0, 351481.0, 358948.0, 359488.0,
    ),
    (
        360064.0, 364025.0, 380945.0, 405064.0, 487518.0, 614303.0, 740179.0, 903484.0,
        1175716.0, 1512722.0, 1812158.0, 2426048.0, 2943624.0, 3364312.0, 3571933.0, 3582176.0,
    ),
)  # fmt: skip


def sample_log_quantiles(table: Sequence[Sequence[float]], bucket: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Inverse-CDF draw: row ``bucket[i]`` of ``table`` at probability ``u[i]``, log-linear between points."""
    probs = np.asarray(QUANTILE_PROBS)
    logq = np.log(np.asarray(table, dtype=np.float64))
    out = np.empty(len(u), dtype=np.float64)
    for b in range(len(logq)):
        m = bucket == b
        if m.any():
            out[m] = np.exp(np.interp(u[m], probs, logq[b]))
    return out


def synthetic_workload(
    n_jobs: int,
    *,
    load: float,
    cluster_gpus: int,
    seed: int,
    models: Sequence[str] | None = None,
    n_tenants: int = 4,
    model_rule: str = "independent",
    gpu_scale: int = 1,
) -> Workload:
    """``n_jobs`` Philly-like jobs arriving as a Poisson process that offers ``load`` x ``cluster_gpus``.

    GPU counts follow :data:`PHILLY_GPU_COUNTS` restricted to counts that fit ``cluster_gpus`` (a job
    larger than the cluster could never run); durations follow :data:`PHILLY_DURATION_QUANTILES` for the
    job's GPU count. The arrival rate is set from the drawn jobs' mean GPU-time,
    ``rate = load * cluster_gpus / mean(num_gpus * duration)``, so even a short workload offers the
    requested load instead of depending on whether a rare week-long job happened to be drawn. The first
    job arrives at 0. ``load`` below about 1 is the realistic regime: a steady stream in which a queue
    forms and clears (give enough jobs to span several of the longest jobs); ``load`` far above 1 is a
    burst that queues everything at once, where schedulers hardly differ.

    ``models=None`` assigns models by ``model_rule`` (:mod:`cluster_sim.model_rules`): ``independent``
    (the default) from each tenant's seeded mix, never reading a job's size; ``pollux`` by the job's
    GPU-time, as Pollux's simulator did (a model then tells its job's size). A list of zoo names picks
    uniformly among them instead. Batch sizes follow :func:`default_batch_sizes`; tenants
    ``tenant-0..n_tenants-1`` are uniform.

    ``gpu_scale=K`` multiplies every job's GPU count by K (capped at ``cluster_gpus``), keeping its
    duration: Philly's jobs, 95% of them on one GPU, ask for about 124k GPUs all together per 100,000
    jobs and mostly finish within hours, so on a 10,000-server data center they never queue at any load;
    jobs of K GPUs per Philly GPU (K = 8: a server per single-GPU job) make that regime reachable.
    """
    if model_rule not in MODEL_RULES:
        raise ValueError(f"model_rule={model_rule!r}; choose one of {', '.join(MODEL_RULES)}")
    if n_jobs < 0:
        raise ValueError(f"n_jobs={n_jobs} must be >= 0")
    if not load > 0:
        raise ValueError(f"load={load} must be > 0 (1.0 keeps the cluster exactly busy on average)")
    if cluster_gpus < 1:
        raise ValueError(f"cluster_gpus={cluster_gpus} must be >= 1")
    if n_tenants < 1:
        raise ValueError(f"n_tenants={n_tenants} must be >= 1")
    if gpu_scale < 1:
        raise ValueError(f"gpu_scale={gpu_scale} must be an integer >= 1 (GPUs per Philly GPU)")
    rng = make_rng(seed)
    counts = np.array(list(PHILLY_GPU_COUNTS.items()), dtype=np.int64)
    counts = counts[counts[:, 0] <= cluster_gpus]
    probs = counts[:, 1] / counts[:, 1].sum()
    num_gpus = rng.choice(counts[:, 0], size=n_jobs, p=probs).astype(np.int32)
    bucket = np.searchsorted(np.asarray(DURATION_BUCKET_UPPER), num_gpus, side="left")
    duration = sample_log_quantiles(PHILLY_DURATION_QUANTILES, bucket, rng.random(n_jobs))
    if gpu_scale > 1:
        num_gpus = np.minimum(num_gpus.astype(np.int64) * gpu_scale, cluster_gpus).astype(np.int32)
    gpu_time = num_gpus * duration
    arrival = np.zeros(n_jobs, dtype=np.float64)
    if n_jobs > 1:
        rate = load * cluster_gpus / gpu_time.mean()
        arrival[1:] = np.cumsum(rng.exponential(1.0 / rate, size=n_jobs - 1))
    if models is not None:
        if not models:
            raise ValueError("models must name at least one model-zoo model (or be None for model_rule)")
        pool = np.array([model_index(m) for m in models], dtype=np.int16)
        model = pool[rng.integers(0, len(pool), size=n_jobs)]
        tenant = rng.integers(0, n_tenants, size=n_jobs).astype(np.int16)
    elif model_rule == "pollux":
        model = assign_models_by_gpu_time(gpu_time, rng)
        tenant = rng.integers(0, n_tenants, size=n_jobs).astype(np.int16)
    else:
        tenant = rng.integers(0, n_tenants, size=n_jobs).astype(np.int16)
        model = assign_models_by_tenant(tenant, rng, GAVEL_MODELS if model_rule == "gavel" else None)
    return Workload(
        arrival=arrival,
        num_gpus=num_gpus,
        duration=duration,
        model=model.astype(np.int16),
        batch_size=default_batch_sizes(model, num_gpus),
        tenant=tenant,
        models=MODEL_NAMES,
        tenants=tuple(f"tenant-{i}" for i in range(n_tenants)),
        source="synthetic",
        meta={
            "load": load,
            "cluster_gpus": cluster_gpus,
            "seed": seed,
            "model_rule": model_rule,
            "gpu_scale": gpu_scale,
        },
    )


def derive_philly_tables(philly_csv: str | Path) -> dict:
    """Recompute the tables of this module from ``philly.csv`` (Pollux filter applied)."""
    from cluster_sim.traces.philly import load_philly

    w = load_philly(philly_csv, pollux_filter=True)
    g, d = w.num_gpus.astype(np.int64), w.duration
    values, counts = np.unique(g, return_counts=True)
    bucket = np.searchsorted(np.asarray(DURATION_BUCKET_UPPER), g, side="left")
    dq = tuple(
        tuple(float(x) for x in np.round(np.quantile(d[bucket == b], QUANTILE_PROBS)))
        for b in range(len(DURATION_BUCKET_UPPER) + 1)
    )
    gt = g * d
    gb = gpu_time_bucket(gt)
    gq = tuple(
        tuple(float(x) for x in np.round(np.quantile(gt[gb == b], QUANTILE_PROBS)))
        for b in range(len(GPU_TIME_BUCKET_EDGES_S) + 1)
    )
    return {
        "gpu_counts": {int(v): int(c) for v, c in zip(values, counts, strict=True)},
        "duration_quantiles": dq,
        "gpu_time_quantiles": gq,
    }


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m cluster_sim.synthetic PATH/TO/philly.csv")
    for key, value in derive_philly_tables(sys.argv[1]).items():
        print(f"{key} = {value!r}")
