"""What a placing priority agent sees of its partition's topology, and of each job on each GPU type.

The partition is laid out on a padded grid ``(R racks, S servers per rack, G GPUs per server)`` so that the
hierarchical encoder (:class:`marl.models.topology_encoder.TopologyEncoder`) pools GPUs into servers, servers
into racks and racks into the partition with no weight depending on any of these sizes:

- ``gpus`` ``(R, S, G, Fg)``: :data:`GPU_FEATURES`: whether the GPU is free, and what holds it (the running
  job's size, attained service and history estimate of remaining time);
- ``servers`` ``(R, S, Fs)``: :data:`SERVER_FEATURES`: free share, size, NVLink/PCIe and NIC bandwidth;
- ``racks`` ``(R, Fr)``: :data:`RACK_FEATURES`: free share and the uplink bandwidth per GPU after
  oversubscription;
- ``server_type`` ``(R, S, T)``: each server's GPU type, one-hot over the cluster's ``T`` types (the encoder
  pools the servers of each type into that type's embedding);
- ``cands`` ``(N, T, Fc)``: :data:`CAND_FEATURES` of every job slot on every GPU type: the job's measured
  speed there relative to its fastest type (profiled throughputs per model and type, as Gavel and Sia use;
  nothing from its duration), whether it fits, and the type's free share, size and demand.

Column 0 of each is ``valid`` (1 for a real element, 0 for padding).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from cluster_sim.protocol import SchedulerView
from cluster_sim.typed_placement import type_speeds
from topology.partition import Partition

if TYPE_CHECKING:
    from marl.env.interference_obs import InterferenceInputs
from topology.view import ClusterView

HOUR_S = 3600.0
LOG_HOURS_NORM = 5.0  # log1p(148 h) ~ 5: times stay O(1)


def log_hours(seconds: np.ndarray | float) -> np.ndarray:
    """A time (seconds) as ``log1p(hours) / 5``: 1.0 at about six days."""
    return np.log1p(np.maximum(seconds, 0.0) / HOUR_S) / LOG_HOURS_NORM


GPU_FEATURES: tuple[str, ...] = (
    "valid",
    "free",
    "holder_log_gpus",  # log2(GPUs) / 7 of the job holding it (0 when free)
    "holder_attained",  # its GPU-time so far (log hours)
    "holder_expected_remaining",  # its ln(E[remaining s]) / LOG_SCALE from its tenant's history
)
SERVER_FEATURES: tuple[str, ...] = (
    "valid",
    "free_frac",
    "gpus",  # GPUs / 8
    "intra_bw",  # log1p(GPU-GPU GB/s) / 8: NVLink/NVSwitch or PCIe
    "nic_bw",  # log1p(server-rack GB/s) / 8
)
RACK_FEATURES: tuple[str, ...] = (
    "valid",
    "free_frac",
    "uplink_per_gpu",  # log1p(rack uplink GB/s after oversubscription / the rack's GPUs) / 8
)
CAND_FEATURES: tuple[str, ...] = (
    "valid",  # the type has enough GPUs in the partition for the job
    "log_speed",  # ln(speed on the type / speed on its fastest type), >= -3
    "fits_now",  # the partition has that many GPUs of the type free now
    "free_frac",  # free GPUs of the type / the partition's GPUs of the type
    "share",  # GPUs of the type / the partition's GPUs
    "current",  # the job runs on this type now
    "pressure",  # log1p(GPUs asked by waiting jobs whose fastest type it is / the type's GPUs)
)
LOG_SPEED_FLOOR = -3.0


def cand_column(name: str) -> int:
    return CAND_FEATURES.index(name)


def topology_features(interference: bool = False) -> dict[str, tuple[str, ...]]:
    """The column names of every topology array; ``interference``: with the predictor's estimates
    (:mod:`marl.env.interference_obs`) after the GPU and candidate columns."""
    from marl.env.interference_obs import CAND_INTERFERENCE_FEATURES, GPU_INTERFERENCE_FEATURES

    extra_gpu, extra_cand = (GPU_INTERFERENCE_FEATURES, CAND_INTERFERENCE_FEATURES) if interference else ((), ())
    return {
        "gpu_features": GPU_FEATURES + extra_gpu,
        "server_features": SERVER_FEATURES,
        "rack_features": RACK_FEATURES,
        "cand_features": CAND_FEATURES + extra_cand,
    }


@dataclass(frozen=True, eq=False)
class PartitionGrid:
    """Every partition's racks, servers and GPUs on the padded grid (global ids, -1 for padding)."""

    gpu: np.ndarray  # (K, R, S, G)
    server: np.ndarray  # (K, R, S)
    rack: np.ndarray  # (K, R)
    server_static: np.ndarray  # (K, R, S, 3): gpus, intra_bw, nic_bw
    rack_uplink: np.ndarray  # (K, R)
    server_type: np.ndarray  # (K, R, S, T) float32 one-hot
    type_gpus: np.ndarray  # (K, T) GPUs of each type per partition
    server_part_type: np.ndarray  # (K, R, S) k * T + the server's type (padding: its partition's type 0)

    @property
    def shape(self) -> tuple[int, int, int, int]:
        """(R, S, G, T)."""
        _, r, s, g = self.gpu.shape
        return r, s, g, self.server_type.shape[-1]


def partition_grid(topo: ClusterView, parts: list[Partition]) -> PartitionGrid:
    """The grid of ``parts`` (contiguous blocks of racks of ``topo``)."""
    k_n = len(parts)
    r_n = max(len(p.racks) for p in parts)
    s_n = int(np.asarray(topo.rack_num_servers).max())
    g_n = int(np.asarray(topo.server_num_gpus).max())
    t_n = len(topo.gpu_types)
    gpu = np.full((k_n, r_n, s_n, g_n), -1, dtype=np.int64)
    server = np.full((k_n, r_n, s_n), -1, dtype=np.int64)
    rack = np.full((k_n, r_n), -1, dtype=np.int64)
    for k, p in enumerate(parts):
        for i, r in enumerate(p.racks):
            rack[k, i] = r
            first = int(topo.rack_first_server[r])
            for j in range(int(topo.rack_num_servers[r])):
                s = first + j
                server[k, i, j] = s
                g0, gn = int(topo.server_first_gpu[s]), int(topo.server_num_gpus[s])
                gpu[k, i, j, :gn] = np.arange(g0, g0 + gn)
    sv = server >= 0
    si = np.where(sv, server, 0)
    static = (
        np.stack(
            [
                topo.server_num_gpus[si] / 8.0,
                np.log1p(topo.server_intra_bw[si]) / 8.0,
                np.log1p(topo.server_nic_bw[si]) / 8.0,
            ],
            axis=-1,
        )
        * sv[..., None]
    )
    ri = np.where(rack >= 0, rack, 0)
    rack_gpus = np.add.reduceat(topo.server_num_gpus, topo.rack_first_server)[ri]
    uplink = np.log1p(topo.rack_uplink_bw[ri] / np.maximum(rack_gpus, 1)) / 8.0 * (rack >= 0)
    stype = np.eye(t_n, dtype=np.float32)[np.asarray(topo.server_gpu_type)[si]] * sv[..., None]
    type_gpus = np.einsum("krst,krs->kt", stype, topo.server_num_gpus[si] * sv).astype(np.int64)
    part_type = np.arange(k_n)[:, None, None] * t_n + np.asarray(topo.server_gpu_type)[si] * sv
    return PartitionGrid(gpu, server, rack, static, uplink, stype, type_gpus, part_type.astype(np.int64))


class SpeedCache:
    """Each job's speed on every GPU type relative to its fastest (constant for a rigid job: computed once)."""

    def __init__(self) -> None:
        self._rel = np.zeros((0, 0))
        self._known = np.zeros(0, dtype=bool)

    def reset(self) -> None:
        self._rel = np.zeros((0, 0))
        self._known = np.zeros(0, dtype=bool)

    def relative(self, view: SchedulerView, jobs: np.ndarray) -> np.ndarray:
        """(len(jobs), T) relative speeds (0: the cluster has too few GPUs of the type for the job)."""
        t_n = len(view.topo.gpu_types)
        if t_n == 1:
            return np.ones((len(jobs), t_n))
        if len(self._known) != len(view.jobs):
            self._rel = np.ones((len(view.jobs), t_n))
            self._known = np.zeros(len(view.jobs), dtype=bool)
        need = view.jobs.num_gpus
        known = self._known[jobs]
        for j in [] if known.all() else np.unique(jobs[~known]).tolist():
            speed = type_speeds(view, j, int(need[j]))
            self._rel[j] = speed / max(float(speed.max()), 1e-12)
            self._known[j] = True
        return self._rel[jobs]


def observe_topology(
    grid: PartitionGrid,
    view: SchedulerView,
    job_ids: np.ndarray,
    running: np.ndarray,
    speeds: SpeedCache,
    expected_remaining: Any,
    log_scale: float,
    inputs: InterferenceInputs | None = None,
    placed_on: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """The topology arrays of every agent (leading axis K) at this scheduling point. ``job_ids``/``running``:
    the job slots ``(K, N)`` of :func:`marl.env.priority_features.observe_partitions`;
    ``expected_remaining(view, ids)``: the tenants' history estimate (seconds); ``inputs``: the interference
    predictor whose estimates join the GPU and candidate columns (:func:`topology_features`); ``placed_on``: a
    GPU of each running job, by job id (None: read from the view)."""
    jobs = view.jobs
    need = jobs.num_gpus.astype(np.int64)
    gpu_job = np.asarray(view.gpu_job)
    gv = grid.gpu >= 0
    holder = np.where(gv, gpu_job[np.where(gv, grid.gpu, 0)], -1)
    held = holder >= 0
    # features first, so that each is one contiguous block; the arrays come out as (..., features)
    feats = np.zeros((len(GPU_FEATURES) + (inputs is not None), *grid.gpu.shape))
    feats[0] = gv
    feats[1] = gv & ~held
    if held.any():
        h = holder[held]  # the job on each held GPU
        feats[2][held] = np.log2(need[h]) / 7.0
        feats[3][held] = log_hours(view.attained_services(h))
        feats[4][held] = np.log(np.maximum(expected_remaining(view, h), 1.0)) / log_scale
    if inputs is not None:
        feats[5] = np.where(gv, inputs.holder_factors(view, holder, grid.gpu), 0.0)

    sv = grid.server >= 0
    free_gpus = (gv & ~held).sum(axis=-1)  # (K, R, S)
    size = np.maximum(gv.sum(axis=-1), 1)
    servers = np.concatenate([sv[..., None], (free_gpus / size * sv)[..., None], grid.server_static], axis=-1)
    rv = grid.rack >= 0
    rack_free = free_gpus.sum(axis=-1) / np.maximum(gv.sum(axis=(-1, -2)), 1)
    racks = np.stack([rv, rack_free * rv, grid.rack_uplink], axis=-1)

    # candidates: every job slot on every type
    k_n, n_n = job_ids.shape
    t_n = grid.server_type.shape[-1]
    valid = job_ids >= 0
    flat = np.where(valid, job_ids, 0).reshape(-1)
    rel = speeds.relative(view, flat).reshape(k_n, n_n, t_n)
    g = need[flat].reshape(k_n, n_n)
    # (K, T) free GPUs of each type (padding servers have none)
    type_free = np.bincount(grid.server_part_type.reshape(-1), weights=free_gpus.reshape(-1),
                            minlength=k_n * t_n).reshape(k_n, t_n)  # fmt: skip
    tg = grid.type_gpus.astype(np.float64)
    ok = valid[..., None] & (tg[:, None, :] >= g[..., None]) & (rel > 0)
    cands = np.empty((len(CAND_FEATURES) + (inputs is not None), k_n, n_n, t_n))
    cands[5] = False
    if running.any():
        if placed_on is not None:
            first = placed_on[job_ids[running]]
        else:
            first = np.array([int(view.placement(j)[0]) for j in job_ids[running].tolist()], dtype=np.int64)
        cur_type = np.asarray(view.topo.server_gpu_type)[np.asarray(view.topo.gpu_server)[first]]
        cands[5][running] = np.eye(t_n, dtype=bool)[cur_type]
    waiting = valid & ~running
    fastest = np.argmax(rel, axis=-1)
    demand = np.bincount((np.nonzero(waiting)[0] * t_n + fastest[waiting]), weights=g[waiting],
                         minlength=k_n * t_n).reshape(k_n, t_n)  # fmt: skip
    cands[0] = ok
    cands[1] = np.maximum(np.log(np.maximum(rel, 1e-12)), LOG_SPEED_FLOOR)
    cands[2] = type_free[:, None, :] >= g[..., None]
    cands[3] = (type_free / np.maximum(tg, 1))[:, None, :]
    cands[4] = (tg / tg.sum(axis=1, keepdims=True))[:, None, :]
    cands[6] = np.log1p(demand / np.maximum(tg, 1))[:, None, :]
    if inputs is not None:
        stype = np.argmax(grid.server_type, axis=-1)
        cands[7] = inputs.candidate_factors(view, grid.server, free_gpus, stype, job_ids)
    cands[:, ~ok] = 0.0
    feats = np.moveaxis(feats, 0, -1)
    cands = np.moveaxis(cands, 0, -1)
    return {
        "gpus": feats.astype(np.float32, order="C"),
        "servers": servers.astype(np.float32),
        "racks": racks.astype(np.float32),
        "server_type": grid.server_type,
        "cands": cands.astype(np.float32, order="C"),
    }
