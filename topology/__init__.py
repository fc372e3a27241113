"""Data-center and server topology: networkx graph, compact numpy view, partitions, encoder tensors."""

from topology.build_view import view_from_graph, view_from_spec
from topology.datacenter import CLUSTER_PRESETS, Cluster, build_cluster, build_graph, preset_spec
from topology.graph_tensors import HierarchyTensors, hierarchy_tensors
from topology.partition import Partition, partition
from topology.servers import GPU_LINKS, SERVER_PRESETS, ServerLinks, ServerSpec
from topology.spec import ClusterSpec, ClusterSpecError, GpuGroup, load_spec, parse_spec
from topology.view import ClusterView, Level

PRESETS = CLUSTER_PRESETS  # short alias used by the command line

__all__ = [
    "CLUSTER_PRESETS",
    "GPU_LINKS",
    "PRESETS",
    "SERVER_PRESETS",
    "Cluster",
    "ClusterSpec",
    "ClusterSpecError",
    "ClusterView",
    "GpuGroup",
    "HierarchyTensors",
    "Level",
    "Partition",
    "ServerLinks",
    "ServerSpec",
    "build_cluster",
    "build_graph",
    "hierarchy_tensors",
    "load_spec",
    "parse_spec",
    "partition",
    "preset_spec",
    "view_from_graph",
    "view_from_spec",
]
