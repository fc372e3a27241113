"""Graph tensors of one partition for the hierarchical GNN encoder (numpy only; the encoder wraps them).

Three levels of graphs, all with local indices and both directions of every edge (no self loops):
GPUs inside each server, servers inside each rack, racks of the partition. Edge weights are bandwidths
divided by fixed reference figures, not by the cluster's own maximum, so the same weights mean the
same hardware in every partition and every cluster the shared encoder sees.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from topology.partition import Partition
from topology.servers import GPU_LINKS, SERVER_PRESETS
from topology.view import ClusterView

GPU_LINK_REF_BW = max(g.nvlink_bw or g.pcie_bw for g in GPU_LINKS.values())  # fastest GPU link known
NET_REF_BW = max(s.nic_bw for s in SERVER_PRESETS.values())  # fastest preset NIC


@dataclass(frozen=True)
class HierarchyTensors:
    """Edge lists (2, E) int64 with float32 weights per level, and the child -> parent index vectors."""

    gpu_edge_index: np.ndarray  # GPU pairs of one server: complete within a socket and across sockets
    gpu_edge_weight: np.ndarray  # intra or cross-socket bandwidth / GPU_LINK_REF_BW
    server_edge_index: np.ndarray  # server pairs of one rack (complete)
    server_edge_weight: np.ndarray  # min NIC bandwidth of the pair / NET_REF_BW
    rack_edge_index: np.ndarray  # rack pairs of the partition (complete)
    rack_edge_weight: np.ndarray  # per-server share of the narrowest uplink on the path / NET_REF_BW
    gpu_to_server: np.ndarray  # (G,) local server of each GPU
    server_to_rack: np.ndarray  # (S,) local rack of each server
    rack_to_partition: np.ndarray  # (R,) zeros: pooling target of the top level
    num_gpus: int
    num_servers: int
    num_racks: int
    first_gpu: int  # global index of local GPU 0 (likewise for servers and racks)
    first_server: int
    first_rack: int


def complete_blocks(first: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """(2, E) int64 directed edges of a complete graph on each block [first[b], first[b] + sizes[b])."""
    parts = []
    for n in np.unique(sizes):
        if n < 2:
            continue
        i, j = np.nonzero(~np.eye(n, dtype=bool))
        base = first[sizes == n].astype(np.int64)[:, None]
        parts.append(np.stack([(base + i).ravel(), (base + j).ravel()]))
    if not parts:
        return np.zeros((2, 0), dtype=np.int64)
    edges = np.concatenate(parts, axis=1)
    return edges[:, np.lexsort((edges[1], edges[0]))]


def hierarchy_tensors(view: ClusterView, part: Partition | None = None) -> HierarchyTensors:
    """Tensors of ``part`` (or of the whole view when ``part`` is None)."""
    v = view if part is None else part.sub_view(view)
    gpu_edges = complete_blocks(v.server_first_gpu, v.server_num_gpus)
    src, dst = gpu_edges
    server = v.gpu_server[src]
    same_socket = v.gpu_socket[src] == v.gpu_socket[dst]
    gpu_bw = np.where(same_socket, v.server_intra_bw[server], v.server_cross_socket_bw[server])

    server_edges = complete_blocks(v.rack_first_server, v.rack_num_servers)
    server_bw = np.minimum(v.server_nic_bw[server_edges[0]], v.server_nic_bw[server_edges[1]])

    # Uplink shares per server come from the whole view: a partition may hold only part of a pod.
    racks = slice(None) if part is None else slice(part.racks.start, part.racks.stop)
    rack_share = (view.rack_uplink_bw / view.rack_num_servers)[racks]
    pod_servers = np.add.reduceat(view.rack_num_servers, view.pod_first_rack)
    pod_share = (view.pod_uplink_bw / pod_servers)[view.rack_pod][racks]
    rack_edges = complete_blocks(np.zeros(1, np.int64), np.array([v.num_racks]))
    a, b = rack_edges
    rack_bw = np.minimum(rack_share[a], rack_share[b])
    cross_pod = v.rack_pod[a] != v.rack_pod[b]
    rack_bw = np.where(cross_pod, np.minimum(rack_bw, np.minimum(pod_share[a], pod_share[b])), rack_bw)
    return HierarchyTensors(
        gpu_edge_index=gpu_edges,
        gpu_edge_weight=(gpu_bw / GPU_LINK_REF_BW).astype(np.float32),
        server_edge_index=server_edges,
        server_edge_weight=(server_bw / NET_REF_BW).astype(np.float32),
        rack_edge_index=rack_edges,
        rack_edge_weight=(rack_bw / NET_REF_BW).astype(np.float32),
        gpu_to_server=v.gpu_server.astype(np.int64),
        server_to_rack=v.server_rack.astype(np.int64),
        rack_to_partition=np.zeros(v.num_racks, dtype=np.int64),
        num_gpus=v.num_gpus,
        num_servers=v.num_servers,
        num_racks=v.num_racks,
        first_gpu=0 if part is None else part.gpus.start,
        first_server=0 if part is None else part.servers.start,
        first_rack=0 if part is None else part.racks.start,
    )
