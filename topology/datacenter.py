"""Data-center presets, the networkx graph of a cluster, and :func:`build_cluster`.

The graph is the readable truth: datacenter -> pods -> racks (ToR switch) -> servers -> sockets (PCIe
switch / CPU socket, or the NVSwitch domain) -> GPUs, every edge carrying ``bandwidth`` in GB/s per
direction. Nodes are ``(kind, index)`` tuples with attributes ``kind``, ``index`` (dense, in hierarchy
order) and ``gpu_type`` (``None`` above the rack). NVSwitch servers also get a direct edge between every
pair of their GPUs; PCIe GPUs reach each other through their socket node, and sockets through an edge
at the cross-socket bandwidth.

The simulator reads :class:`~topology.view.ClusterView`, which :func:`build_cluster` derives straight from
the spec with numpy (milliseconds for 82k GPUs); the graph of dc-10k takes seconds and half a million
edges, so it is built only when someone asks for ``Cluster.graph``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from topology.build_view import view_from_spec
from topology.spec import ClusterSpec, ClusterSpecError, did_you_mean, load_spec, parse_spec
from topology.view import ClusterView

if TYPE_CHECKING:
    import networkx as nx  # imported where a graph is built: the simulator needs only the view

# Racks hold 16 servers (8 in ``small``). Top-of-rack uplinks are 2:1 oversubscribed and pod spines 4:1
# in the large presets, typical of Clos data-center fabrics; ``small`` keeps a non-blocking ToR so tests
# and quickstarts see every level without heavy contention.
CLUSTER_PRESETS: dict[str, dict[str, Any]] = {
    # 2 pods x 2 racks x 8 nvswitch-8 V100 servers = 32 servers, 256 GPUs.
    "small": {
        "name": "small",
        "pods": 2,
        "racks_per_pod": 2,
        "servers_per_rack": 8,
        "server": "nvswitch-8",
        "gpu_type": "V100",
        "rack_oversubscription": 1,
        "pod_oversubscription": 2,
    },
    # Same shape, one rack of each generation: 8 x (8 + 8 + 8 + 4) = 224 GPUs.
    "small-mixed": {
        "name": "small-mixed",
        "pods": 2,
        "racks_per_pod": 2,
        "servers_per_rack": 8,
        "rack_oversubscription": 2,
        "pod_oversubscription": 2,
        "mix": [
            {"gpu_type": "V100", "fraction": 0.25, "server": "nvswitch-8"},
            {"gpu_type": "P100", "fraction": 0.25, "server": "pcie-8"},
            {"gpu_type": "A100", "fraction": 0.25, "server": "nvswitch-8"},
            {"gpu_type": "K80", "fraction": 0.25, "server": "pcie-4"},
        ],
    },
    # 4 pods x 16 racks x 16 servers = 1,024 servers, 8,192 GPUs.
    "dc-1k": {
        "name": "dc-1k",
        "pods": 4,
        "racks_per_pod": 16,
        "servers_per_rack": 16,
        "server": "nvswitch-8",
        "gpu_type": "V100",
        "rack_oversubscription": 2,
        "pod_oversubscription": 4,
    },
    # 20 pods x 32 racks x 16 servers = 10,240 servers, 81,920 GPUs.
    "dc-10k": {
        "name": "dc-10k",
        "pods": 20,
        "racks_per_pod": 32,
        "servers_per_rack": 16,
        "server": "nvswitch-8",
        "gpu_type": "V100",
        "rack_oversubscription": 2,
        "pod_oversubscription": 4,
    },
    # Sia's (SOSP'23) heterogeneous cluster as its simulator configures it: 6 x 4 T4 (g4dn.12xlarge),
    # 3 x 8 RTX 2080 Ti, 2 x 8 A100 (DGX A100, NVLink) = 64 GPUs; one server per rack, non-blocking.
    "sia-hetero": {
        "name": "sia-hetero",
        "pods": 1,
        "racks_per_pod": 11,
        "servers_per_rack": 1,
        "rack_oversubscription": 1,
        "pod_oversubscription": 1,
        "mix": [
            {"gpu_type": "T4", "fraction": 6 / 11, "server": "g4dn-12xlarge"},
            {"gpu_type": "RTX2080Ti", "fraction": 3 / 11, "server": "pcie-8-50g"},
            {"gpu_type": "A100", "fraction": 2 / 11, "server": "nvswitch-8"},
        ],
    },
    # Sia's homogeneous comparison: 16 x 4 T4 (g4dn.12xlarge), 64 GPUs.
    "sia-homogeneous": {
        "name": "sia-homogeneous",
        "pods": 1,
        "racks_per_pod": 1,
        "servers_per_rack": 16,
        "server": "g4dn-12xlarge",
        "gpu_type": "T4",
        "rack_oversubscription": 1,
        "pod_oversubscription": 1,
    },
    # small's 32 servers x 8 GPUs with Gavel's three measured generations: 12 V100 (NVSwitch), 10 P100 and
    # 10 K80 servers (PCIe), two servers per rack, racks of each generation spread over both pods.
    "small-hetero": {
        "name": "small-hetero",
        "pods": 2,
        "racks_per_pod": 8,
        "servers_per_rack": 2,
        "rack_oversubscription": 1,
        "pod_oversubscription": 2,
        "mix": [
            {"gpu_type": "V100", "fraction": 1 / 3, "server": "nvswitch-8"},
            {"gpu_type": "P100", "fraction": 1 / 3, "server": "pcie-8"},
            {"gpu_type": "K80", "fraction": 1 / 3, "server": "pcie-8"},
        ],
    },
    # Pollux's testbed (OSDI'21): 16 nodes x 4 T4 GPUs, where its applications' step times were measured.
    "pollux-testbed": {
        "name": "pollux-testbed",
        "pods": 1,
        "racks_per_pod": 1,
        "servers_per_rack": 16,
        "server": "pcie-4",
        "gpu_type": "T4",
        "rack_oversubscription": 1,
        "pod_oversubscription": 1,
    },
}


def preset_spec(name: str) -> ClusterSpec:
    if name not in CLUSTER_PRESETS:
        raise ValueError(f"unknown cluster preset {name!r}; presets: {', '.join(CLUSTER_PRESETS)}")
    return parse_spec(CLUSTER_PRESETS[name], source=f"preset {name!r}", default_name=name)


def build_graph(spec: ClusterSpec) -> nx.Graph:
    """The full networkx graph of ``spec`` (one node per GPU; seconds for 80k GPUs)."""
    import networkx as nx

    g = nx.Graph(name=spec.name, gpu_types=spec.gpu_types)
    g.add_node(("datacenter", 0), kind="datacenter", index=0, gpu_type=None)
    rack_groups = spec.rack_groups()
    server = socket = gpu = 0
    for p in range(spec.pods):
        pod = ("pod", p)
        g.add_node(pod, kind="pod", index=p, gpu_type=None)
        pod_down = 0.0
        for r in range(p * spec.racks_per_pod, (p + 1) * spec.racks_per_pod):
            group = spec.groups[rack_groups[r]]
            srv, links, gtype = group.server, group.links, group.gpu_type
            rack = ("rack", r)
            g.add_node(rack, kind="rack", index=r, gpu_type=gtype)
            rack_down = 0.0
            for _ in range(spec.servers_per_rack):
                s_node = ("server", server)
                g.add_node(s_node, kind="server", index=server, gpu_type=gtype, preset=srv.name, nvswitch=srv.nvswitch)
                g.add_edge(s_node, rack, bandwidth=links.nic_bw)
                rack_down += links.nic_bw
                sockets = [("socket", socket + k) for k in range(srv.sockets)]
                gpu_bw = links.host_bw if srv.nvswitch else links.intra_bw
                for k, k_node in enumerate(sockets):
                    g.add_node(k_node, kind="socket", index=socket + k, gpu_type=gtype)
                    g.add_edge(k_node, s_node, bandwidth=links.host_bw)
                    for j in range(srv.gpus_per_socket):
                        i = gpu + k * srv.gpus_per_socket + j
                        g.add_node(("gpu", i), kind="gpu", index=i, gpu_type=gtype)
                        g.add_edge(("gpu", i), k_node, bandwidth=gpu_bw)
                for a in range(len(sockets)):
                    for b in range(a + 1, len(sockets)):
                        g.add_edge(sockets[a], sockets[b], bandwidth=links.cross_socket_bw)
                if srv.nvswitch:
                    for a in range(gpu, gpu + srv.gpus):
                        for b in range(a + 1, gpu + srv.gpus):
                            g.add_edge(("gpu", a), ("gpu", b), bandwidth=links.intra_bw)
                server, socket, gpu = server + 1, socket + srv.sockets, gpu + srv.gpus
            uplink = rack_down / spec.rack_oversubscription
            g.add_edge(rack, pod, bandwidth=uplink)
            pod_down += uplink
        g.add_edge(pod, ("datacenter", 0), bandwidth=pod_down / spec.pod_oversubscription)
    return g


@dataclass(eq=False)
class Cluster:
    """A cluster: its spec, its numpy view (built eagerly, fast) and its graph (built on first use)."""

    spec: ClusterSpec
    view: ClusterView

    @cached_property
    def graph(self) -> nx.Graph:
        return build_graph(self.spec)

    def describe(self) -> str:
        s, v = self.spec, self.view
        lines = [
            f"{s.name}: {v.num_servers:,} servers, {v.num_gpus:,} GPUs in {s.pods} pod{'s' * (s.pods != 1)} x "
            f"{s.racks_per_pod} racks x {s.servers_per_rack} servers"
        ]
        for group, racks in zip(s.groups, s.rack_counts().tolist(), strict=True):
            ln = group.links
            servers = racks * s.servers_per_rack
            lines.append(
                f"  {group.gpu_type} on {group.server.name}: {racks} rack{'s' * (racks != 1)}, {servers:,} servers, "
                f"{servers * group.server.gpus:,} GPUs; GPU links {ln.intra_bw:g} GB/s "
                f"(cross-socket {ln.cross_socket_bw:g}), NIC {ln.nic_bw:g} GB/s"
            )
        if len(s.groups) > 1:  # interleaved (ClusterSpec.rack_groups), so that every pod sees the same mix
            order = [s.groups[g].gpu_type for g in s.rack_groups().tolist()]
            lines.append(f"  racks in order: {', '.join(order[:24])}{', ...' * (len(order) > 24)}")
        lines.append(
            f"  rack uplink {_span(v.rack_uplink_bw)} GB/s ({s.rack_oversubscription:g}:1), "
            f"pod uplink {_span(v.pod_uplink_bw)} GB/s ({s.pod_oversubscription:g}:1)"
        )
        return "\n".join(lines)


def _span(values: np.ndarray) -> str:
    lo, hi = float(values.min()), float(values.max())
    return f"{lo:g}" if lo == hi else f"{lo:g}-{hi:g}"


def build_cluster(name_or_path: str | Path | ClusterSpec) -> Cluster:
    """Cluster from a preset name (see :data:`CLUSTER_PRESETS`), a YAML spec file, or a spec."""
    if isinstance(name_or_path, ClusterSpec):
        spec = name_or_path
    elif isinstance(name_or_path, str) and name_or_path in CLUSTER_PRESETS:
        spec = preset_spec(name_or_path)
    elif Path(name_or_path).suffix in (".yaml", ".yml") or Path(name_or_path).exists():
        spec = load_spec(name_or_path)
    else:
        guess = did_you_mean(str(name_or_path), CLUSTER_PRESETS)
        raise ClusterSpecError(
            str(name_or_path),
            "<cluster>",
            f"neither a preset name nor a YAML file; {guess}".rstrip("; "),
            ", ".join(CLUSTER_PRESETS),
        )
    return Cluster(spec, view_from_spec(spec))
