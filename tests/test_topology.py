"""Tests of the topology package: presets, view invariants, graph/view agreement, specs, partitions."""

from __future__ import annotations

import time
from pathlib import Path

import networkx as nx
import numpy as np
import pytest

from topology import (
    Cluster,
    ClusterSpecError,
    ClusterView,
    Level,
    build_cluster,
    build_graph,
    hierarchy_tensors,
    parse_spec,
    partition,
    preset_spec,
    view_from_graph,
    view_from_spec,
)
from topology.graph_tensors import GPU_LINK_REF_BW, NET_REF_BW
from topology.spec import rack_counts

VIEW_FIELDS = [f for f in ClusterView.__dataclass_fields__ if f not in ("name", "gpu_types")]


@pytest.fixture(scope="module")
def small() -> Cluster:
    return build_cluster("small")


@pytest.fixture(scope="module")
def mixed() -> Cluster:
    return build_cluster("small-mixed")


def write_yaml(tmp_path: Path, text: str, name: str = "my-dc.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


CUSTOM_YAML = """
pods: 2
racks_per_pod: 3
servers_per_rack: 4
rack_oversubscription: 4
pod_oversubscription: 3
mix:
  - {gpu_type: V100, fraction: 0.5, server: nvswitch-8}
  - {gpu_type: K80, fraction: 0.5, server: {gpus_per_server: 6, sockets: 3, nic_bw: 3.125, cross_socket_bw: 7}}
"""


def assert_views_equal(a: ClusterView, b: ClusterView) -> None:
    assert a.name == b.name and a.gpu_types == b.gpu_types
    for field in VIEW_FIELDS:
        x, y = getattr(a, field), getattr(b, field)
        assert x.dtype == y.dtype, field
        np.testing.assert_array_equal(x, y, err_msg=field)


@pytest.mark.parametrize(
    ("name", "servers", "gpus", "racks", "pods"),
    [("small", 32, 256, 4, 2), ("dc-1k", 1024, 8192, 64, 4), ("dc-10k", 10240, 81920, 640, 20)],
)
def test_preset_sizes(name: str, servers: int, gpus: int, racks: int, pods: int) -> None:
    view = build_cluster(name).view
    assert (view.num_servers, view.num_gpus, view.num_racks, view.num_pods) == (servers, gpus, racks, pods)
    assert view.name == name and view.gpu_types == ("V100",)


@pytest.mark.parametrize("name", ["small", "small-mixed", "dc-1k"])
def test_view_contiguity(name: str) -> None:
    v = build_cluster(name).view
    for child_parent, first, count, n_children in (
        (v.gpu_server, v.server_first_gpu, v.server_num_gpus, v.num_gpus),
        (v.server_rack, v.rack_first_server, v.rack_num_servers, v.num_servers),
        (v.rack_pod, v.pod_first_rack, v.pod_num_racks, v.num_racks),
    ):
        assert first[0] == 0 and int(count.sum()) == n_children
        np.testing.assert_array_equal(first[1:], np.cumsum(count)[:-1])
        np.testing.assert_array_equal(child_parent, np.repeat(np.arange(len(first)), count))
    # sockets are numbered consecutively and never straddle servers
    assert np.all(np.diff(v.gpu_socket) >= 0) and v.gpu_socket[0] == 0
    sockets_per_server = np.array([len(np.unique(v.gpu_socket[v.server_gpus(s)])) for s in range(v.num_servers)])
    assert np.all(sockets_per_server[v.server_nvswitch] == 1)
    assert len(np.unique(v.gpu_socket)) == sockets_per_server.sum()
    for s in (0, v.num_servers - 1):
        np.testing.assert_array_equal(v.gpu_server[v.server_gpus(s)], s)


def test_span_level_hand_picked(small: Cluster, mixed: Cluster) -> None:
    v = small.view  # 8 GPUs per server, 8 servers per rack, 2 racks per pod
    assert v.span_level(np.array([5])) == Level.GPU
    assert v.span_level(np.arange(8)) == Level.SOCKET  # NVSwitch: one domain
    assert v.span_level(np.array([0, 8])) == Level.RACK  # servers 0 and 1
    assert v.span_level(np.array([0, 64])) == Level.POD  # racks 0 and 1
    assert v.span_level(np.array([0, 1, 128])) == Level.DATACENTER  # racks 0 and 2: pods 0 and 1
    m = mixed.view  # rack 1 holds the P100 pcie-8 servers: GPUs 64.. in sockets of 4
    assert m.gpu_types[m.server_gpu_type[8]] == "P100" and m.server_first_gpu[8] == 64
    assert m.span_level(np.array([64, 67])) == Level.SOCKET
    assert m.span_level(np.array([64, 68])) == Level.SERVER
    assert m.span_level(np.array([63, 64])) == Level.POD  # rack 0 (V100) and rack 1 (P100), pod 0


def test_span_level_is_the_highest_level_whose_groups_differ(mixed: Cluster) -> None:
    v = mixed.view  # sets of a few GPUs are looked up in Python, larger ones with numpy: both must agree
    rng = np.random.default_rng(0)
    for n in [1, 2, 3, 5, 8, 13, 16, 17, 24, 40] * 20:
        gpus = rng.choice(v.num_gpus, n, replace=False)
        if rng.random() < 0.5:  # also sets packed in one server or rack, where the lower levels show
            first = int(rng.integers(0, v.num_gpus - n + 1))
            gpus = np.arange(first, first + n)
        servers = v.gpu_server[gpus]
        distinct = [len(set(a.tolist())) for a in (v.rack_pod[v.server_rack[servers]], v.server_rack[servers])]
        distinct += [len(set(servers.tolist())), len(set(v.gpu_socket[gpus].tolist())), n]
        levels = [Level.DATACENTER, Level.POD, Level.RACK, Level.SERVER, Level.SOCKET]
        expect = next((lv for lv, d in zip(levels, distinct, strict=True) if d > 1), Level.GPU)
        assert v.span_level(gpus) == expect, gpus


def test_link_bandwidths_and_oversubscription(small: Cluster, mixed: Cluster) -> None:
    v = build_cluster("dc-1k").view  # 16 servers x 50 GB/s per rack, ratios 2 and 4
    np.testing.assert_array_equal(v.rack_uplink_bw, 16 * 50.0 / 2)
    np.testing.assert_array_equal(v.pod_uplink_bw, 16 * 400.0 / 4)
    np.testing.assert_array_equal(small.view.rack_uplink_bw, 8 * 50.0)  # 1:1
    np.testing.assert_array_equal(small.view.pod_uplink_bw, 2 * 400.0 / 2)
    m = mixed.view  # racks: V100 nvswitch-8, P100 pcie-8, A100 nvswitch-8, K80 pcie-4; ratios 2, 2
    np.testing.assert_array_equal(m.rack_uplink_bw, [200.0, 50.0, 200.0, 50.0])
    np.testing.assert_array_equal(m.pod_uplink_bw, [125.0, 125.0])
    first = m.rack_first_server
    np.testing.assert_array_equal(m.server_intra_bw[first], [150.0, 15.75, 300.0, 15.75])
    np.testing.assert_array_equal(m.server_cross_socket_bw[first], [150.0, 10.0, 300.0, 15.75])
    np.testing.assert_array_equal(m.server_nvswitch[first], [True, False, True, False])


def test_graph_and_spec_views_agree(mixed: Cluster, tmp_path: Path) -> None:
    for cluster in (build_cluster("small"), mixed, build_cluster(write_yaml(tmp_path, CUSTOM_YAML))):
        assert_views_equal(view_from_graph(cluster.graph), cluster.view)


def test_graph_structure(mixed: Cluster) -> None:
    g, v = mixed.graph, mixed.view
    kinds = [d["kind"] for _, d in g.nodes(data=True)]
    assert kinds.count("gpu") == v.num_gpus and kinds.count("server") == v.num_servers
    assert kinds.count("rack") == 4 and kinds.count("pod") == 2 and kinds.count("datacenter") == 1
    assert all(d["bandwidth"] > 0 for *_, d in g.edges(data=True))
    assert nx.is_connected(g)
    a100 = v.server_gpus(16)  # rack 2: A100 NVSwitch, every GPU pair one hop apart
    assert all(g.has_edge(("gpu", int(a)), ("gpu", int(b))) for a in a100 for b in a100 if a != b)
    assert g.edges[("gpu", int(a100[0])), ("gpu", int(a100[1]))]["bandwidth"] == 300.0
    p100 = v.server_gpus(8)  # rack 1: PCIe, GPU -> socket -> socket -> GPU across sockets
    assert nx.shortest_path_length(g, ("gpu", int(p100[0])), ("gpu", int(p100[3]))) == 2
    assert nx.shortest_path_length(g, ("gpu", int(p100[0])), ("gpu", int(p100[4]))) == 3
    assert g.nodes["gpu", int(p100[0])]["gpu_type"] == "P100"


def test_yaml_spec_good(tmp_path: Path) -> None:
    cluster = build_cluster(write_yaml(tmp_path, CUSTOM_YAML))
    v = cluster.view
    assert v.name == "my-dc" and v.gpu_types == ("V100", "K80")
    # 6 racks interleaved V100, K80, V100, ...; 4 servers per rack; K80 servers: 6 GPUs in 3 sockets
    np.testing.assert_array_equal(cluster.spec.rack_groups(), [0, 1, 0, 1, 0, 1])
    assert v.num_servers == 24 and v.num_gpus == 12 * 8 + 12 * 6
    k80 = v.server_gpus(4)
    assert v.span_level(k80[:2]) == Level.SOCKET and v.span_level(k80[1:3]) == Level.SERVER
    assert v.server_cross_socket_bw[4] == 7.0 and v.server_nic_bw[4] == 3.125
    np.testing.assert_array_equal(v.rack_uplink_bw, [4 * 50 / 4, 4 * 3.125 / 4] * 3)
    np.testing.assert_allclose(v.pod_uplink_bw, [(50 + 3.125 + 50) / 3, (3.125 + 50 + 3.125) / 3])
    assert "my-dc: 24 servers, 168 GPUs" in cluster.describe()
    assert "racks in order: V100, K80, V100, K80, V100, K80" in cluster.describe()  # as server_rack reads them
    assert [v.gpu_types[t] for t in v.server_gpu_type[:: v.num_servers // v.num_racks]] == ["V100", "K80"] * 3
    # a GPU type in any case is the datasheets' name
    lower = build_cluster(write_yaml(tmp_path, CUSTOM_YAML.replace("V100", "v100").replace("K80", "k80"), "lower.yaml"))
    assert lower.view.gpu_types == ("V100", "K80") and lower.spec.groups == cluster.spec.groups


def test_shipped_example_cluster_file_loads() -> None:
    path = Path(__file__).resolve().parents[1] / "experiments" / "configs" / "clusters" / "mixed_example.yaml"
    v = build_cluster(path).view
    assert v.num_gpus == 512 and set(v.gpu_types) == {"A100", "V100"}
    assert v.span_level(v.server_gpus(0)[:2]) <= Level.SERVER


def test_rack_assignment_is_deterministic_and_proportional() -> None:
    np.testing.assert_array_equal(rack_counts([1 / 3, 1 / 3, 1 / 3], 4), [2, 1, 1])
    spec = parse_spec(
        {
            "racks_per_pod": 8,
            "servers_per_rack": 1,
            "mix": [
                {"gpu_type": "V100", "fraction": 0.5, "server": "nvswitch-8"},
                {"gpu_type": "P100", "fraction": 0.25, "server": "pcie-8"},
                {"gpu_type": "K80", "fraction": 0.25, "server": "pcie-4"},
            ],
        }
    )
    np.testing.assert_array_equal(spec.rack_groups(), [0, 1, 2, 0, 0, 1, 2, 0])


# (text, its line, field path, what the message says): the line is the field's, where the file has it
BAD_SPECS = [
    ("pods: 1\nracks_per_pod: 2\nservers_per_rack: 2\nserver: pcie-4\ngpu_type: V100\nracks: 3\n", 6, "racks", "mix"),
    ("racks_per_pod: -1\nservers_per_rack: 2\nserver: pcie-4\ngpu_type: V100\n", 1, "racks_per_pod", ">= 1"),
    ("racks_per_pod: 2\nservers_per_rack: 0\nserver: pcie-4\ngpu_type: V100\n", 2, "servers_per_rack", ">= 1"),
    (
        "racks_per_pod: 4\nservers_per_rack: 2\nmix:\n  - {gpu_type: V100, fraction: 0.5, server: pcie-8}\n"
        "  - {gpu_type: K80, fraction: 0.4, server: pcie-4}\n",
        3,
        "mix",
        "sum to 0.9",
    ),
    (
        "racks_per_pod: 4\nservers_per_rack: 2\nmix:\n  - {gpu_type: V100, fraction: 0.5, server: pcie-8}\n"
        "  - {gpu_type: K80, fraction: 0.5, server: dgx-9}\n",
        5,
        "mix[1].server",
        "nvswitch-8, pcie-8, pcie-4",
    ),
    (
        "racks_per_pod: 4\nservers_per_rack: 2\nmix:\n  - {gpu_type: V100, fraction: 0.5, colour: red}\n",
        4,
        "mix[0].colour",
        "gpu_type, fraction, server",
    ),
    (
        "racks_per_pod: 4\nservers_per_rack: 2\nserver: pcie-8\nmix:\n  - {gpu_type: V100, fraction: 1.5}\n",
        5,
        "mix[0].fraction",
        "(0, 1]",
    ),
    (
        "racks_per_pod: 2\nservers_per_rack: 2\nserver: pcie-8\ngpu_type: V100\n"
        "mix:\n  - {gpu_type: A100, fraction: 1}\n",
        4,
        "gpu_type",
        "every mix entry gives its own",
    ),
    ("racks_per_pod: 2\nservers_per_rack: 2\nserver: nvswitch-8\ngpu_type: K80\n", 3, "server", "no NVLink"),
    ("racks_per_pod: 2\nservers_per_rack: 2\nserver: pcie-4\ngpu_type: X200\n", 4, "gpu_type", "A100"),
    (
        "racks_per_pod: 2\nservers_per_rack: 2\ngpu_type: V100\nserver: {gpus_per_server: 6, sockets: 4}\n",
        4,
        "server.sockets",
        "split evenly",
    ),
    (
        "racks_per_pod: 2\nservers_per_rack: 2\ngpu_type: V100\nrack_oversubscription: 0.5\n",
        4,
        "rack_oversubscription",
        ">= 1",
    ),
    ("racks_per_pod: [2\n", 2, "", "not valid YAML: expected ',' or ']'"),
    (
        "pods: 1\nrack_per_pod: 2\nservers_per_rack: 2\nserver: pcie-4\ngpu_type: V100\n",
        2,
        "rack_per_pod",
        "unknown key; did you mean 'racks_per_pod'? allowed: name",
    ),
    (
        "racks_per_pod: 2\nservers_per_rack: 2\nserver: pcie-4\nmix:\n  - gpu_type: a100-80gb\n    fraction: 1\n",
        5,
        "mix[0].gpu_type",
        "unknown GPU type 'a100-80gb'; did you mean 'A100'? allowed: K80",
    ),
    ("racks_per_pod: 2\nservers_per_rack: 2\nserver: pcie-44\ngpu_type: V100\n", 3, "server", "did you mean 'pcie-4'?"),
    ("racks_per_pod: 2\nserver: pcie-4\ngpu_type: V100\n", None, "servers_per_rack", "missing"),
]


@pytest.mark.parametrize(("text", "line", "path", "hint"), BAD_SPECS)
def test_yaml_spec_bad(tmp_path: Path, text: str, line: int | None, path: str, hint: str) -> None:
    file = write_yaml(tmp_path, text, "bad.yaml")
    with pytest.raises(ClusterSpecError) as err:
        build_cluster(file)
    msg = str(err.value)
    where = f"{file}, line {line}:" if line else f"{file}:"
    assert msg.startswith(f"{where} {path}:" if path else where), msg
    assert hint in msg, msg


def test_spec_errors_cross_process_pools_intact() -> None:
    import pickle

    with pytest.raises(ClusterSpecError) as err:
        build_cluster("dc-5k")
    back = pickle.loads(pickle.dumps(err.value))
    assert type(back) is ClusterSpecError and str(back) == str(err.value) and back.path == err.value.path


def test_unknown_preset_lists_presets() -> None:
    with pytest.raises(ClusterSpecError, match="small, small-mixed, dc-1k, dc-10k"):
        build_cluster("dc-5k")
    with pytest.raises(ClusterSpecError, match="cannot read"):
        build_cluster("/nonexistent/cluster.yaml")


@pytest.mark.parametrize(("name", "k", "unit"), [("small", 4, "rack"), ("small", 2, "pod"), ("dc-1k", 8, "rack")])
def test_partitions_cover_racks_once(name: str, k: int, unit: str) -> None:
    v = build_cluster(name).view
    parts = partition(v, k, unit)
    assert len(parts) == k
    racks = np.concatenate([np.arange(p.racks.start, p.racks.stop) for p in parts])
    np.testing.assert_array_equal(racks, np.arange(v.num_racks))
    assert [p.servers.start for p in parts[1:]] == [p.servers.stop for p in parts[:-1]]
    assert parts[-1].gpus.stop == v.num_gpus and sum(p.num_gpus for p in parts) == v.num_gpus
    for p in parts:
        assert set(v.server_rack[p.servers.start : p.servers.stop]) == set(p.racks)
        sub = p.sub_view(v)
        assert (sub.num_gpus, sub.num_servers, sub.num_racks) == (len(p.gpus), len(p.servers), len(p.racks))
        assert int(sub.pod_num_racks.sum()) == sub.num_racks and sub.gpu_socket[0] == 0
        np.testing.assert_array_equal(sub.gpu_server + p.servers.start, v.gpu_server[p.gpus.start : p.gpus.stop])
        np.testing.assert_array_equal(sub.server_rack + p.racks.start, v.server_rack[p.servers.start : p.servers.stop])


def test_partition_pods_are_whole_pods() -> None:
    v = build_cluster("dc-1k").view
    parts = partition(v, 2, unit="pod")
    assert [p.pods for p in parts] == [range(0, 2), range(2, 4)]
    assert [p.racks for p in parts] == [range(0, 32), range(32, 64)]


@pytest.mark.parametrize(
    ("k", "unit", "match"),
    [
        (3, "rack", r"3 does not divide 4.*\[1, 2, 4\]"),
        (5, "rack", "more partitions than racks"),
        (4, "pod", "more partitions than pods"),
        (0, "rack", "integer >= 1"),
        (2, "server", "unit must be"),
    ],
)
def test_partition_errors(small: Cluster, k: int, unit: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        partition(small.view, k, unit)


def test_hierarchy_tensors_mixed(mixed: Cluster) -> None:
    v = mixed.view
    t = hierarchy_tensors(v)
    n = v.server_num_gpus.astype(np.int64)
    assert t.gpu_edge_index.shape == (2, int((n * (n - 1)).sum())) and t.gpu_edge_index.dtype == np.int64
    assert t.server_edge_index.shape == (2, 4 * 8 * 7) and t.rack_edge_index.shape == (2, 4 * 3)
    for idx, w in (
        (t.gpu_edge_index, t.gpu_edge_weight),
        (t.server_edge_index, t.server_edge_weight),
        (t.rack_edge_index, t.rack_edge_weight),
    ):
        assert w.dtype == np.float32 and w.shape == (idx.shape[1],) and np.all(w > 0)
        assert np.all(idx[0] != idx[1])
    src, dst = t.gpu_edge_index
    np.testing.assert_array_equal(t.gpu_to_server[src], t.gpu_to_server[dst])  # edges stay in a server
    s_src, s_dst = t.server_edge_index
    np.testing.assert_array_equal(t.server_to_rack[s_src], t.server_to_rack[s_dst])  # and in a rack
    p100 = (src >= 64) & (src < 128)  # pcie-8: 12 same-socket + 16 cross-socket directed edges per GPU set
    cross = p100 & (v.gpu_socket[src] != v.gpu_socket[dst])
    assert cross.sum() == 8 * 32 and (p100 & ~cross).sum() == 8 * 24
    np.testing.assert_allclose(t.gpu_edge_weight[cross], 10.0 / GPU_LINK_REF_BW, rtol=1e-6)
    np.testing.assert_allclose(t.gpu_edge_weight[p100 & ~cross], 15.75 / GPU_LINK_REF_BW, rtol=1e-6)
    # rack 0 (200 GB/s uplink / 8) and rack 2 (other pod: 125 / 16 servers) -> narrowest share
    r01 = (t.rack_edge_index[0] == 0) & (t.rack_edge_index[1] == 2)
    np.testing.assert_allclose(t.rack_edge_weight[r01], 125.0 / 16 / NET_REF_BW, rtol=1e-6)


def test_hierarchy_tensors_partition_local() -> None:
    v = build_cluster("dc-1k").view
    part = partition(v, 8)[3]  # half of pod 1
    t = hierarchy_tensors(v, part)
    assert (t.num_gpus, t.num_servers, t.num_racks) == (1024, 128, 8)
    assert (t.first_gpu, t.first_server, t.first_rack) == (3072, 384, 24)
    assert t.gpu_edge_index.max() == 1023 and t.server_edge_index.max() == 127 and t.rack_edge_index.max() == 7
    np.testing.assert_array_equal(np.bincount(t.gpu_to_server), 8)
    np.testing.assert_array_equal(np.bincount(t.server_to_rack), 16)
    np.testing.assert_allclose(t.gpu_edge_weight, 150.0 / GPU_LINK_REF_BW, rtol=1e-6)
    np.testing.assert_allclose(t.rack_edge_weight, 400.0 / 16 / NET_REF_BW, rtol=1e-6)  # one pod, 2:1 ToR


def test_dc10k_view_is_fast_and_graph_is_lazy() -> None:
    spec = preset_spec("dc-10k")
    start = time.perf_counter()
    view = view_from_spec(spec)
    elapsed = time.perf_counter() - start
    print(f"dc-10k view built in {elapsed * 1e3:.1f} ms")
    assert elapsed < 1.0 and view.num_gpus == 81920
    cluster = build_cluster("dc-10k")
    assert "graph" not in cluster.__dict__  # not built until asked for


def test_small_graph_nodes_match_spec() -> None:
    g = build_graph(preset_spec("small"))
    assert g.graph["name"] == "small" and g.number_of_nodes() == 1 + 2 + 4 + 32 + 32 + 256
    assert g.edges[("rack", 0), ("pod", 0)]["bandwidth"] == 400.0
    assert g.edges[("pod", 1), ("datacenter", 0)]["bandwidth"] == 400.0
