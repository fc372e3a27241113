"""Compact numpy view of a data center, derived once from the networkx graph.

The simulator, the placement strategies and the performance model read only this view on their hot
paths. Indices are dense and contiguous: the GPUs of a server, the servers of a rack and the racks of a
pod are consecutive ranges, so "the GPUs of server s" is ``range(server_first_gpu[s], server_first_gpu[s]
+ server_num_gpus[s])`` and no lookup table is needed.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from enum import IntEnum

import numpy as np

FEW_GPUS = 16  # GPU sets up to this size are looked up one by one in Python lists: cheaper than numpy calls


class Level(IntEnum):
    """The slowest topology level a set of GPUs spans; higher means slower synchronisation."""

    GPU = 0  # a single GPU: no synchronisation
    SOCKET = 1  # same PCIe switch / CPU socket, or any two GPUs of an NVSwitch server
    SERVER = 2  # same server, across sockets (PCIe through the CPU interconnect)
    RACK = 3  # several servers under one top-of-rack switch
    POD = 4  # several racks of one pod
    DATACENTER = 5  # several pods


@dataclass(frozen=True, eq=False)
class ClusterView:
    """Flat index arrays of the hierarchy GPU → socket → server → rack → pod, plus link bandwidths.

    Bandwidths are in GB/s, per direction. ``rack_uplink_bw`` and ``pod_uplink_bw`` are the capacities
    left after oversubscription (the sum of the downlinks divided by the oversubscription ratio).
    """

    name: str
    gpu_types: tuple[str, ...]  # index → GPU generation name, e.g. ("V100", "A100")
    # GPU level (G,)
    gpu_server: np.ndarray  # int32
    gpu_socket: np.ndarray  # int32, global socket / PCIe-switch id (one per server on NVSwitch servers)
    # server level (S,)
    server_rack: np.ndarray  # int32
    server_first_gpu: np.ndarray  # int32
    server_num_gpus: np.ndarray  # int32
    server_gpu_type: np.ndarray  # int16, index into gpu_types
    server_nvswitch: np.ndarray  # bool
    server_intra_bw: np.ndarray  # float64, GPU↔GPU bandwidth inside the server (NVLink/NVSwitch or PCIe)
    server_cross_socket_bw: np.ndarray  # float64, bandwidth between sockets (== intra on NVSwitch)
    server_nic_bw: np.ndarray  # float64, server → top-of-rack switch
    # rack level (R,)
    rack_pod: np.ndarray  # int32
    rack_first_server: np.ndarray  # int32
    rack_num_servers: np.ndarray  # int32
    rack_uplink_bw: np.ndarray  # float64, top-of-rack → pod spine, after oversubscription
    # pod level (P,)
    pod_first_rack: np.ndarray  # int32
    pod_num_racks: np.ndarray  # int32
    pod_uplink_bw: np.ndarray  # float64, pod spine → core, after oversubscription

    @property
    def num_gpus(self) -> int:
        return int(self.gpu_server.shape[0])

    @property
    def num_servers(self) -> int:
        return int(self.server_rack.shape[0])

    @property
    def num_racks(self) -> int:
        return int(self.rack_pod.shape[0])

    @property
    def num_pods(self) -> int:
        return int(self.pod_first_rack.shape[0])

    @property
    def gpu_rack(self) -> np.ndarray:
        return self.server_rack[self.gpu_server]

    def server_gpus(self, server: int) -> np.ndarray:
        first = int(self.server_first_gpu[server])
        return np.arange(first, first + int(self.server_num_gpus[server]), dtype=np.int32)

    def span_level(self, gpus: np.ndarray) -> Level:
        """Slowest level that the given GPU set spans (the level its all-reduce must cross)."""
        if len(gpus) <= 1:
            return Level.GPU
        if len(gpus) <= FEW_GPUS:
            return self._span_level_of_few(gpus.tolist() if isinstance(gpus, np.ndarray) else list(gpus))
        servers = self.gpu_server[gpus]
        s0 = servers[0]
        if (servers == s0).all():
            sockets = self.gpu_socket[gpus]
            return Level.SOCKET if (sockets == sockets[0]).all() else Level.SERVER
        racks = self.server_rack[servers]
        if (racks == racks[0]).all():
            return Level.RACK
        pods = self.rack_pod[racks]
        return Level.POD if (pods == pods[0]).all() else Level.DATACENTER

    def _span_level_of_few(self, ids: list[int]) -> Level:
        lists = index_lists(self)
        srv = lists.gpu_server
        s0 = srv[ids[0]]
        if all(srv[g] == s0 for g in ids):
            sock = lists.gpu_socket
            k0 = sock[ids[0]]
            return Level.SOCKET if all(sock[g] == k0 for g in ids) else Level.SERVER
        rack = lists.server_rack
        racks = [rack[srv[g]] for g in ids]
        if all(r == racks[0] for r in racks):
            return Level.RACK
        pod = lists.rack_pod
        p0 = pod[racks[0]]
        return Level.POD if all(pod[r] == p0 for r in racks) else Level.DATACENTER


@dataclass(frozen=True)
class IndexLists:
    """A view's GPU, server and rack index arrays as Python lists, for code that looks up a job's few
    GPUs one by one (a list lookup costs a fraction of a numpy call), and each server's GPU ids, for code
    that goes server by server. Built once per view."""

    gpu_server: list[int]
    gpu_socket: list[int]
    server_rack: list[int]
    rack_pod: list[int]
    server_gpus: tuple[np.ndarray, ...]


_LISTS: weakref.WeakKeyDictionary[ClusterView, IndexLists] = weakref.WeakKeyDictionary()


def index_lists(view: ClusterView) -> IndexLists:
    lists = _LISTS.get(view)
    if lists is None:
        lists = _LISTS[view] = IndexLists(
            view.gpu_server.tolist(),
            view.gpu_socket.tolist(),
            view.server_rack.tolist(),
            view.rack_pod.tolist(),
            tuple(np.flatnonzero(view.gpu_server == s) for s in range(view.num_servers)),
        )
    return lists
