"""How jobs of traces that name no model get one, and their batch sizes: the seeded model rules.

Philly-like traces give GPU counts and durations, not what was trained. A rule assigns each job one of
Pollux's measured models: ``independent`` (the default) from its tenant's seeded mix, never reading a
job's size; ``pollux`` by the job's GPU-time, as Pollux's simulator did, which tells any model-based
estimator how long the job is; ``gavel``, as ``independent`` over Gavel's job types (measured on K80,
P100 and V100, for heterogeneous clusters of those). Both the synthetic generator and the trace loaders use these.
"""

from __future__ import annotations

import numpy as np

from cluster_sim.model_zoo import MODEL_NAMES, ZOO, model_index

# Pollux's model rule (adaptdl ``simulator/workload.py``): by a job's GPU-time, below 1 GPU-hour
# cifar10 or ncf, below 10 deepspeech2 or bert, below 100 yolov3, otherwise imagenet.
GPU_TIME_BUCKET_EDGES_S: tuple[float, ...] = (3600.0, 36000.0, 360000.0)
GPU_TIME_BUCKET_MODELS: tuple[tuple[str, str], ...] = (
    ("resnet18-cifar10", "ncf"),
    ("deepspeech2", "bert-squad"),
    ("yolov3", "yolov3"),
    ("resnet50-imagenet", "resnet50-imagenet"),
)


def make_rng(seed: int) -> np.random.Generator:
    """The project's seeded generator (PCG64), so one seed gives the same workload everywhere."""
    return np.random.Generator(np.random.PCG64(seed))


def gpu_time_bucket(gpu_time: np.ndarray) -> np.ndarray:
    """Pollux GPU-time bucket (0..3) of each job: < 1, < 10, < 100, >= 100 GPU-hours."""
    return np.searchsorted(np.asarray(GPU_TIME_BUCKET_EDGES_S), gpu_time, side="right")


def assign_models_by_gpu_time(gpu_time: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Zoo model index per job by Pollux's GPU-time rule; within a two-model bucket a fair coin picks.

    One coin is drawn per job whatever its bucket, so a job's model depends only on its own GPU-time and
    its position in the stream.
    """
    choices = np.array([[model_index(a), model_index(b)] for a, b in GPU_TIME_BUCKET_MODELS], dtype=np.int16)
    coin = rng.integers(0, 2, size=len(gpu_time))
    return choices[gpu_time_bucket(np.asarray(gpu_time, dtype=np.float64)), coin]


MODEL_RULES: tuple[str, ...] = ("independent", "pollux", "gavel")
# Gavel's job types the zoo holds, each measured on K80, P100 and V100 (Gavel's throughput table)
GAVEL_MODELS: tuple[str, ...] = (
    "resnet18-cifar10", "resnet50-imagenet", "transformer", "lstm-lm", "recommendation", "a3c", "cyclegan",
)  # fmt: skip


def assign_models_by_tenant(
    tenant: np.ndarray, rng: np.random.Generator, models: tuple[str, ...] | None = None
) -> np.ndarray:
    """Zoo model index per job from its tenant's model mix, for traces that name no model.

    Every tenant code gets a mix over ``models`` (default: the six models Pollux measured; a Dirichlet(0.5)
    draw, so tenants differ as teams do), and each job draws its model from its tenant's mix. Neither
    durations nor GPU-times are read, so a job's model tells nothing about its size; Pollux's rule
    (:func:`assign_models_by_gpu_time`) does, through the bucket its GPU-time falls in.
    """
    if models is None:
        models = tuple(m for pair in GPU_TIME_BUCKET_MODELS for m in pair)
    pool = np.array(sorted({model_index(m) for m in models}), dtype=np.int16)
    tenant = np.asarray(tenant, dtype=np.int64)
    mixes = rng.dirichlet(np.full(len(pool), 0.5), size=int(tenant.max(initial=0)) + 1)
    cum = np.cumsum(mixes, axis=1)
    u = rng.random(len(tenant))
    pick = (u[:, None] > cum[tenant]).sum(axis=1)
    return pool[np.minimum(pick, len(pool) - 1)]


def assign_models(rule: str, tenant: np.ndarray, gpu_time: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Models by ``rule``: ``independent`` (tenant mix, the default), ``pollux`` (GPU-time buckets) or
    ``gavel`` (tenant mix over Gavel's job types, measured on every GPU type of ``small-hetero``)."""
    if rule == "independent":
        return assign_models_by_tenant(tenant, rng)
    if rule == "gavel":
        return assign_models_by_tenant(tenant, rng, GAVEL_MODELS)
    if rule == "pollux":
        return assign_models_by_gpu_time(gpu_time, rng)
    raise ValueError(f"model_rule={rule!r}; choose one of {', '.join(MODEL_RULES)}")


def default_batch_sizes(model: np.ndarray, num_gpus: np.ndarray) -> np.ndarray:
    """Global batch = the model's default batch x GPUs: each data-parallel replica keeps the batch the
    model is tuned for on one GPU (weak scaling), as Gavel's per-worker batch sizes do."""
    default = np.array([ZOO[n].default_batch for n in MODEL_NAMES], dtype=np.int64)
    return (default[model] * num_gpus).astype(np.int32)
