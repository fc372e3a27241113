"""Observation features of partitions, vectorised over GPUs, servers, racks and over several agents at once.

Agents see no oracle facts: nothing here reads ``jobs.duration`` or ``remaining_time``. A job's length
is estimated online by :class:`DurationEstimator` from the executed times of jobs already completed.

Normalisation keeps every column O(1): times (seconds, GPU-seconds) enter as ``log1p(hours) / 5``
(1.0 at about six days), job facts as ``log1p(x) / c`` with ``c`` near the log of the largest value in
the model zoo, fractions and slowdowns as they are.

All partitions of one coordinator have the same shape, so the occupancy and queue features of ``B``
agents are computed in one pass over ``(B, G)`` / ``(B, S)`` / ``(B, R)`` / ``(B, Q)`` arrays.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from cluster_sim.job_descriptors import DescriptorCache
from cluster_sim.model_zoo import ZOO
from cluster_sim.workload import Workload
from interference.base import Sharing
from interference.queries import KeyedFactors
from marl.env.obs_layout import CAND_EXTRA_FEATURES, GPU_FEATURES, QUEUE_FEATURES, RACK_FEATURES, SERVER_FEATURES
from topology.partition import Partition
from topology.view import ClusterView, Level

HOUR_S = 3600.0
LOG_HOURS_NORM = 5.0  # log1p(148 h) ≈ 5
PRIOR_DURATION_S = 3600.0  # estimate before any job has completed


def log_hours(seconds: np.ndarray | float) -> np.ndarray:
    return np.log1p(np.maximum(seconds, 0.0) / HOUR_S) / LOG_HOURS_NORM


class DurationEstimator:
    """Mean executed time (and GPU-time) of the completed jobs of each model; the mean over all models for
    a model not seen yet, and :data:`PRIOR_DURATION_S` (one GPU) before the first completion. A history-based
    prior from job descriptors, as a real scheduler can keep: no job's own duration is read."""

    def __init__(self, num_models: int) -> None:
        self.total = np.zeros(num_models)
        self.gpu_total = np.zeros(num_models)
        self.count = np.zeros(num_models)
        self.version = 0  # bumped by every observation, so callers can cache what they derived

    def observe(self, models: np.ndarray, executed: np.ndarray, num_gpus: np.ndarray | None = None) -> None:
        self.version += 1
        np.add.at(self.total, models, executed)
        np.add.at(self.gpu_total, models, executed * (1.0 if num_gpus is None else num_gpus))
        np.add.at(self.count, models, 1.0)

    def estimate_gpu_time(self, models: np.ndarray) -> np.ndarray:
        """Estimated GPU-seconds of jobs of ``models``."""
        done = self.count.sum()
        fallback = self.gpu_total.sum() / done if done else PRIOR_DURATION_S
        c = self.count[models]
        return np.where(c > 0, self.gpu_total[models] / np.maximum(c, 1.0), fallback)

    def estimate(self, models: np.ndarray) -> np.ndarray:
        done = self.count.sum()
        fallback = self.total.sum() / done if done else PRIOR_DURATION_S
        c = self.count[models]
        return np.where(c > 0, self.total[models] / np.maximum(c, 1.0), fallback)


class JobState:
    """Per-job facts the agents may know: static job facts, when and where the coordinator started it."""

    def __init__(self, workload: Workload, num_gpu_types: int) -> None:
        n = len(workload)
        self.workload = workload
        self.num_gpus = workload.num_gpus.astype(np.int64)
        self.arrival = workload.arrival
        self.model = workload.model.astype(np.int64)
        self.started_at = np.full(n, np.nan)
        self.span = np.zeros(n, dtype=np.int8)
        self.code = [-1] * n  # a started job's interference descriptor code (KeyedFactors.code)
        self.in_round = np.zeros(n, dtype=bool)  # started this round, not yet applied to the simulator
        self.pred_factor = np.ones(n)  # predicted interference factor at start (for in-round jobs)
        self.estimator = DurationEstimator(len(workload.models))
        specs = [ZOO[m] for m in workload.models]
        self.size_norm = (np.log1p([s.params_m for s in specs]) / 5.0)[self.model]  # bert 110 M -> 0.94
        self.flops_norm = (np.log1p([s.gflops for s in specs]) / 6.0)[self.model]  # bert 253 GFLOPs -> 0.92
        self.batch_norm = np.log1p(workload.batch_size.astype(np.float64)) / 10.0
        self.solo_norm = np.full((num_gpu_types, n), np.nan)  # filled on first use, per GPU type
        self.sync_sens = np.full(n, np.nan)

    def slowdown(self, jobs: np.ndarray, sim_factor: np.ndarray) -> np.ndarray:
        """Interference slowdown of running jobs: observed in the simulator, predicted for in-round ones."""
        return 1.0 - np.where(self.in_round[jobs], self.pred_factor[jobs], sim_factor[jobs])


@dataclass(frozen=True, eq=False)
class PartitionStatic:
    """One partition's local topology (a stand-alone sub-view) and where it sits in the cluster."""

    part: Partition
    sub: ClusterView
    gpu_type: int  # GPU type of its first server (for job descriptors)

    @cached_property
    def gpu_server_list(self) -> list[int]:
        """Local server of each local GPU, as a list (for per-candidate Python loops)."""
        return self.sub.gpu_server.tolist()

    @cached_property
    def server_gpu_ranges(self) -> list[slice]:
        """Local GPUs of each local server, as slices."""
        first, count = self.sub.server_first_gpu.tolist(), self.sub.server_num_gpus.tolist()
        return [slice(f, f + n) for f, n in zip(first, count, strict=True)]


@dataclass(frozen=True, eq=False)
class PartitionTables:
    """Static columns of all partitions, stacked along a leading partition axis."""

    gpu_server: np.ndarray  # (K, G) local server of each GPU
    server_rack: np.ndarray  # (K, S) local rack of each server
    gpu_speed: np.ndarray  # (K, G) GPU generation speed / fastest in the cluster
    server_cap: np.ndarray  # (K, S)
    server_cols: dict[str, np.ndarray]  # (K, S) nvswitch, intra_bw_norm, nic_bw_norm
    rack_gpus: np.ndarray  # (K, R)
    rack_servers: np.ndarray  # (K, R)
    rack_uplink_norm: np.ndarray  # (K, R)
    uniform_server_gpus: int  # GPUs per server if every server has as many, else 0

    @classmethod
    def build(cls, view: ClusterView, statics: Sequence[PartitionStatic], perf=None) -> PartitionTables:
        if perf is not None:
            type_speed = np.array([perf.gpu_speed(t) for t in view.gpu_types])
        else:
            type_speed = np.ones(len(view.gpu_types))
        type_speed = type_speed / type_speed[np.unique(view.server_gpu_type)].max()
        subs = [st.sub for st in statics]

        def stack(fn) -> np.ndarray:
            return np.stack([np.asarray(fn(v), dtype=np.float64) for v in subs])

        cap = stack(lambda v: v.server_num_gpus)
        return cls(
            uniform_server_gpus=int(cap.flat[0]) if (cap == cap.flat[0]).all() else 0,
            gpu_server=np.stack([v.gpu_server.astype(np.int64) for v in subs]),
            server_rack=np.stack([v.server_rack.astype(np.int64) for v in subs]),
            gpu_speed=stack(lambda v: type_speed[v.server_gpu_type][v.gpu_server]),
            server_cap=cap,
            server_cols={
                "nvswitch": stack(lambda v: v.server_nvswitch),
                "intra_bw_norm": stack(lambda v: v.server_intra_bw / view.server_intra_bw.max()),
                "nic_bw_norm": stack(lambda v: v.server_nic_bw / view.server_nic_bw.max()),
            },
            rack_gpus=stack(lambda v: np.bincount(v.server_rack, weights=v.server_num_gpus, minlength=v.num_racks)),
            rack_servers=stack(lambda v: v.rack_num_servers),
            rack_uplink_norm=stack(lambda v: v.rack_uplink_bw / view.rack_uplink_bw.max()),
        )


def _assemble(cols: dict[str, np.ndarray | float], names: Sequence[str], shape: tuple[int, ...]) -> np.ndarray:
    out = np.empty((*shape, len(names)), dtype=np.float32)
    for i, name in enumerate(names):
        out[..., i] = cols[name]
    return out


def check_layout_columns(names: dict[str, tuple[str, ...]]) -> None:
    """Fail early if the layout names columns this module does not fill."""
    known = {
        "gpu_feats": GPU_FEATURES,
        "server_feats": SERVER_FEATURES,
        "rack_feats": RACK_FEATURES,
        "queue_feats": QUEUE_FEATURES,
    }
    for key, cols in known.items():
        if tuple(names[key]) != cols:
            raise ValueError(
                f"marl.env.features fills {key} columns {cols}, the layout has {names[key]}; "
                "build the ObsLayout with default feature widths"
            )


def occupancy_features(
    tables: PartitionTables,
    parts: np.ndarray,
    occ: np.ndarray,
    server_free: np.ndarray,
    uplink_jobs: np.ndarray,
    jobs: JobState,
    sim_factor: np.ndarray,
    now: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """GPU (B, G, Fg), server (B, S, Fs) and rack (B, R, Fr) features of the partitions ``parts``.

    ``occ``: (B, G) global job id holding each local GPU (-1 free); ``server_free``: (B, S) free GPUs;
    ``uplink_jobs``: (B, R) jobs whose traffic crosses each rack's uplink.
    """
    b, g = occ.shape
    s, r = server_free.shape[1], uplink_jobs.shape[1]
    held = occ >= 0
    o = np.where(held, occ, 0)
    ran = now - jobs.started_at[o]
    need = jobs.num_gpus[o]
    slow = np.where(held, jobs.slowdown(o, sim_factor), 0.0)
    est = jobs.estimator.estimate(jobs.model[o])
    gpu = _assemble(
        {
            "free": ~held,
            "job_gpus_frac": np.where(held, need / g, 0.0),
            "job_span_level": np.where(held, jobs.span[o] / float(Level.DATACENTER), 0.0),
            "job_attained_norm": np.where(held, log_hours(need * ran), 0.0),
            "job_remaining_norm": np.where(held, log_hours(est - ran), 0.0),
            "pred_slowdown": slow,
            "gpu_speed": tables.gpu_speed[parts],
        },
        GPU_FEATURES,
        (b, g),
    )
    per_server, slow_sum = _jobs_per_server(tables, parts, occ, held, slow, jobs, sim_factor)
    cap = tables.server_cap[parts]
    free = server_free.astype(np.float64)
    server = _assemble(
        {
            "free_frac": free / cap,
            "num_jobs_norm": per_server / cap,
            **{k: v[parts] for k, v in tables.server_cols.items()},
            "pred_slowdown_mean": slow_sum / np.maximum(per_server, 1.0),
        },
        SERVER_FEATURES,
        (b, s),
    )
    row_rack = (tables.server_rack[parts] + (np.arange(b) * r)[:, None]).ravel()
    rack_free = np.bincount(row_rack, weights=free.ravel(), minlength=b * r).reshape(b, r)
    empty = np.bincount(row_rack, weights=(free == cap).ravel(), minlength=b * r).reshape(b, r)
    rack = _assemble(
        {
            "free_frac": rack_free / tables.rack_gpus[parts],
            "empty_servers_frac": empty / tables.rack_servers[parts],
            "uplink_bw_norm": tables.rack_uplink_norm[parts],
            "uplink_load": uplink_jobs / (uplink_jobs + 1.0),  # 0 unused, 1/2 one job, -> 1 as jobs share it
        },
        RACK_FEATURES,
        (b, r),
    )
    return gpu, server, rack


def _jobs_per_server(
    tables: PartitionTables,
    parts: np.ndarray,
    occ: np.ndarray,
    held: np.ndarray,
    slow: np.ndarray,
    jobs: JobState,
    sim_factor: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """(B, S) distinct jobs per server and the sum of their slowdowns."""
    b = occ.shape[0]
    s = tables.server_cap.shape[1]
    w = tables.uniform_server_gpus
    if w:  # equal servers: a GPU counts if no lower GPU of its server holds the same job (a (w, w) compare)
        o3 = occ.reshape(b * s, w)
        dup = ((o3[:, :, None] == o3[:, None, :]) & _strictly_lower(w)).any(axis=2)
        first = held.reshape(b * s, w) & ~dup
        per_server = first.sum(axis=1).reshape(b, s).astype(np.float64)
        return per_server, np.where(first, slow.reshape(b * s, w), 0.0).sum(axis=1).reshape(b, s)
    n_jobs = len(jobs.num_gpus)
    row_server = tables.gpu_server[parts] + (np.arange(b) * s)[:, None]
    keys = np.unique(row_server[held] * n_jobs + occ[held])
    pair_server, pair_job = np.divmod(keys, n_jobs)
    per_server = np.bincount(pair_server, minlength=b * s).reshape(b, s).astype(np.float64)
    slow_sum = np.bincount(pair_server, weights=jobs.slowdown(pair_job, sim_factor), minlength=b * s).reshape(b, s)
    return per_server, slow_sum


def _strictly_lower(w: int) -> np.ndarray:
    return np.tri(w, w, -1, dtype=bool)


class SyncSensitivity:
    """1 - speed of a job when its GPUs are split evenly over the cluster's first two racks (two servers
    in a one-rack cluster): 0 for jobs that do not care where their replicas are, near 1 for sync-bound
    ones. Cached per (model, batch, GPUs): it is a fact of the job and the hardware, not of the state."""

    def __init__(self, topo: ClusterView) -> None:
        if topo.num_racks >= 2:
            firsts = topo.server_first_gpu[topo.rack_first_server[:2]]
            last = int(topo.rack_first_server[1] + topo.rack_num_servers[1] - 1)
            ends = [int(firsts[1]), int(topo.server_first_gpu[last] + topo.server_num_gpus[last])]
        else:
            firsts = topo.server_first_gpu[:2]
            ends = firsts + topo.server_num_gpus[:2]
        self._groups = [np.arange(int(a), int(e), dtype=np.int32) for a, e in zip(firsts, ends, strict=False)]
        self._cache: dict[tuple[int, int, int], float] = {}

    def __call__(self, view, job: int) -> float:
        jobs = view.jobs
        n = int(jobs.num_gpus[job])
        key = (int(jobs.model[job]), int(jobs.batch_size[job]), n)
        value = self._cache.get(key)
        if value is None:
            a, b = -(-n // 2), n // 2
            groups = self._groups
            if n == 1 or len(groups) < 2 or len(groups[0]) < a or len(groups[1]) < b:
                value = 0.0
            else:
                gpus = np.concatenate([groups[0][:a], groups[1][:b]])
                value = float(np.clip(1.0 - view.estimated_speed(job, gpus), 0.0, 1.0))
            self._cache[key] = value
        return value


def queue_features(
    view,
    queued: np.ndarray,
    gpu_types: np.ndarray,
    first_gpus: np.ndarray,
    partition_gpus: int,
    jobs: JobState,
    descriptors: DescriptorCache,
    sync: SyncSensitivity,
) -> np.ndarray:
    """(B, Q, Fq) features of queued jobs ``queued`` (B, Q), padded with -1 (padding rows are zero).

    ``gpu_types``/``first_gpus``: (B,) GPU type and first global GPU of each partition.
    """
    valid = queued >= 0
    rows, _ = np.nonzero(valid)
    j = queued[valid]
    missing = np.isnan(jobs.solo_norm[gpu_types[rows], j])
    for row, job in zip(rows[missing].tolist(), j[missing].tolist(), strict=True):
        solo = descriptors.get(job, int(first_gpus[row])).solo_sps
        jobs.solo_norm[gpu_types[row], job] = np.log1p(solo) / 10.0  # ncf ~1e5 samples/s -> 1.2
    for job in j[np.isnan(jobs.sync_sens[j])].tolist():
        jobs.sync_sens[job] = sync(view, job)
    cols = {
        "valid": 1.0,
        "num_gpus_frac": jobs.num_gpus[j] / partition_gpus,
        "wait_norm": log_hours(view.now - jobs.arrival[j]),
        "attained_norm": log_hours(view.attained_services(j)),
        "est_duration_norm": log_hours(jobs.estimator.estimate(jobs.model[j])),
        "model_size_norm": jobs.size_norm[j],
        "flops_norm": jobs.flops_norm[j],
        "batch_norm": jobs.batch_norm[j],
        "solo_tput_norm": jobs.solo_norm[gpu_types[rows], j],
        "sync_sensitivity": jobs.sync_sens[j],
    }
    out = np.zeros((*queued.shape, len(QUEUE_FEATURES)), dtype=np.float32)
    out[valid] = _assemble(cols, QUEUE_FEATURES, (len(j),))
    return out


_SERVER = int(Sharing.SERVER)


def interference_key(
    job: int,
    gpus: np.ndarray,
    occ: Sequence[int],
    st: PartitionStatic,
    jobs: JobState,
    descriptors: DescriptorCache,
    keyed: KeyedFactors,
) -> tuple[int, ...]:
    """The co-location key (:class:`~interference.queries.KeyedFactors`) of ``job`` placed on local ``gpus``:
    every job holding a GPU of the same servers shares its server (their codes are in ``jobs.code``).
    ``occ``: the partition's GPU -> job (-1 free), best as a list (one per agent and scheduling point): a
    candidate touches one or two servers, which plain sets handle faster than numpy."""
    gpu_server, server_gpus = st.gpu_server_list, st.server_gpu_ranges
    near: set[int] = set()
    for s in set(map(gpu_server.__getitem__, gpus.tolist())):
        near.update(occ[server_gpus[s]])
    near.discard(-1)
    code = jobs.code
    items = sorted([3 * code[k] + _SERVER for k in near])
    return (keyed.code(descriptors.get(job, st.part.gpus.start + int(gpus[0]))), *items)


_EXTRA = {name: i for i, name in enumerate(CAND_EXTRA_FEATURES)}
_SPAN_COLUMN = {int(level): _EXTRA[f"span_{level.name.lower()}"] for level in Level}  # level -> one-hot column
_CAND_SCALARS = ("num_servers_norm", "pred_interference", "free_frac_after", "est_speed")


def candidate_features(
    view,
    cands: Sequence[tuple[int, np.ndarray] | None],
    factors: np.ndarray,
    slots: int,
    st: PartitionStatic,
    free: int,
    width: int,
) -> tuple[np.ndarray, np.ndarray]:
    """(C, Fc) candidate features and the (C, G) GPU indicator of each candidate; zero where infeasible.

    ``factors``: predicted interference factor per candidate (1.0 where infeasible).
    """
    c, g, s = len(cands), st.part.num_gpus, st.sub.num_servers
    feats = np.zeros((c, width), dtype=np.float32)
    on = np.zeros((c, g), dtype=np.float32)
    per_job = c // slots
    g0 = st.part.gpus.start
    sub, gpu_server = st.sub, st.gpu_server_list
    span_col = {level: slots + col for level, col in _SPAN_COLUMN.items()}
    servers_col, pred_col, free_col, speed_col = (slots + _EXTRA[k] for k in _CAND_SCALARS)
    for i, cand in enumerate(cands):
        if cand is None:
            continue
        job, gpus = cand
        feats[i, i // per_job] = 1.0
        feats[i, span_col[int(sub.span_level(gpus))]] = 1.0
        feats[i, servers_col] = len(set(map(gpu_server.__getitem__, gpus.tolist()))) / s
        feats[i, pred_col] = 1.0 - factors[i]
        feats[i, free_col] = (free - len(gpus)) / g
        feats[i, speed_col] = view.estimated_speed(job, gpus + g0)
        on[i, gpus] = 1.0
    return feats, on
