"""Two ways to the same :class:`ClusterView`: vectorised from the spec, or read back from the graph.

The simulator uses :func:`view_from_spec` (no per-GPU Python work, so dc-10k takes milliseconds).
:func:`view_from_graph` walks the networkx graph edge by edge; tests check that both agree, which keeps
the fast path honest to the readable one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from topology.spec import ClusterSpec
from topology.view import ClusterView

if TYPE_CHECKING:
    import networkx as nx  # imported where a graph is built: the simulator needs only the view


def _starts(counts: np.ndarray) -> np.ndarray:
    """First index of each block when blocks of ``counts`` items are laid out one after another."""
    return (np.cumsum(counts) - counts).astype(np.int32)


def view_from_spec(spec: ClusterSpec) -> ClusterView:
    groups = spec.groups
    types = spec.gpu_types
    spr, rpp = spec.servers_per_rack, spec.racks_per_pod
    R, P = spec.num_racks, spec.pods
    S = R * spr

    def per_group(values: list, dtype) -> np.ndarray:
        return np.asarray(values, dtype=dtype)[server_group]

    server_group = np.repeat(spec.rack_groups(), spr)
    num_gpus = per_group([g.server.gpus for g in groups], np.int32)
    sockets = per_group([g.server.sockets for g in groups], np.int32)
    first_gpu = _starts(num_gpus)
    first_socket = _starts(sockets)
    gpu_server = np.repeat(np.arange(S, dtype=np.int32), num_gpus)
    local = np.arange(gpu_server.shape[0], dtype=np.int32) - first_gpu[gpu_server]
    gpu_socket = first_socket[gpu_server] + local // (num_gpus // sockets)[gpu_server]

    nic = per_group([g.links.nic_bw for g in groups], np.float64)
    rack_first_server = (np.arange(R) * spr).astype(np.int32)
    rack_uplink = np.add.reduceat(nic, rack_first_server) / spec.rack_oversubscription
    pod_first_rack = (np.arange(P) * rpp).astype(np.int32)
    return ClusterView(
        name=spec.name,
        gpu_types=types,
        gpu_server=gpu_server,
        gpu_socket=gpu_socket.astype(np.int32),
        server_rack=np.repeat(np.arange(R, dtype=np.int32), spr),
        server_first_gpu=first_gpu,
        server_num_gpus=num_gpus,
        server_gpu_type=per_group([types.index(g.gpu_type) for g in groups], np.int16),
        server_nvswitch=per_group([g.server.nvswitch for g in groups], bool),
        server_intra_bw=per_group([g.links.intra_bw for g in groups], np.float64),
        server_cross_socket_bw=per_group([g.links.cross_socket_bw for g in groups], np.float64),
        server_nic_bw=nic,
        rack_pod=np.repeat(np.arange(P, dtype=np.int32), rpp),
        rack_first_server=rack_first_server,
        rack_num_servers=np.full(R, spr, dtype=np.int32),
        rack_uplink_bw=rack_uplink,
        pod_first_rack=pod_first_rack,
        pod_num_racks=np.full(P, rpp, dtype=np.int32),
        pod_uplink_bw=np.add.reduceat(rack_uplink, pod_first_rack) / spec.pod_oversubscription,
    )


def view_from_graph(graph: nx.Graph) -> ClusterView:
    """Read the hierarchy back from the graph's edges (slow: one Python step per node)."""
    by_kind: dict[str, list] = {k: [] for k in ("datacenter", "pod", "rack", "server", "socket", "gpu")}
    for node, data in graph.nodes(data=True):
        by_kind[data["kind"]].append(node)
    for nodes in by_kind.values():
        nodes.sort(key=lambda n: graph.nodes[n]["index"])

    def parent(node, kind: str):
        return next(m for m in graph[node] if graph.nodes[m]["kind"] == kind)

    def idx(nodes, kind: str) -> np.ndarray:
        return np.array([graph.nodes[parent(n, kind)]["index"] for n in nodes], dtype=np.int32)

    gpus, sockets, servers = by_kind["gpu"], by_kind["socket"], by_kind["server"]
    racks, pods = by_kind["rack"], by_kind["pod"]
    gpu_socket = idx(gpus, "socket")
    gpu_server = idx(sockets, "server")[gpu_socket]
    server_rack, rack_pod = idx(servers, "rack"), idx(racks, "pod")
    types = tuple(graph.graph["gpu_types"])

    def bw(a, b) -> float:
        return graph.edges[a, b]["bandwidth"]

    intra, cross = [], []
    for s, node in enumerate(servers):
        own_gpus = [gpus[i] for i in np.flatnonzero(gpu_server == s)]
        own_sockets = [m for m in graph[node] if graph.nodes[m]["kind"] == "socket"]
        nvswitch = graph.nodes[node]["nvswitch"]
        intra.append(bw(own_gpus[0], own_gpus[1]) if nvswitch else bw(own_gpus[0], own_sockets[0]))
        cross.append(bw(own_sockets[0], own_sockets[1]) if len(own_sockets) > 1 else intra[-1])

    def first_and_count(child_parent: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
        if np.any(np.diff(child_parent) < 0):
            raise ValueError("graph indices are not contiguous: children of one parent must be consecutive")
        counts = np.bincount(child_parent, minlength=n).astype(np.int32)
        return _starts(counts), counts

    server_first_gpu, server_num_gpus = first_and_count(gpu_server, len(servers))
    rack_first_server, rack_num_servers = first_and_count(server_rack, len(racks))
    pod_first_rack, pod_num_racks = first_and_count(rack_pod, len(pods))
    return ClusterView(
        name=graph.graph["name"],
        gpu_types=types,
        gpu_server=gpu_server,
        gpu_socket=gpu_socket,
        server_rack=server_rack,
        server_first_gpu=server_first_gpu,
        server_num_gpus=server_num_gpus,
        server_gpu_type=np.array([types.index(graph.nodes[n]["gpu_type"]) for n in servers], dtype=np.int16),
        server_nvswitch=np.array([graph.nodes[n]["nvswitch"] for n in servers], dtype=bool),
        server_intra_bw=np.array(intra, dtype=np.float64),
        server_cross_socket_bw=np.array(cross, dtype=np.float64),
        server_nic_bw=np.array([bw(n, parent(n, "rack")) for n in servers], dtype=np.float64),
        rack_pod=rack_pod,
        rack_first_server=rack_first_server,
        rack_num_servers=rack_num_servers,
        rack_uplink_bw=np.array([bw(n, parent(n, "pod")) for n in racks], dtype=np.float64),
        pod_first_rack=pod_first_rack,
        pod_num_racks=pod_num_racks,
        pod_uplink_bw=np.array([bw(n, ("datacenter", 0)) for n in pods], dtype=np.float64),
    )
