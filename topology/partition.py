"""Split a cluster into contiguous groups of racks (or pods), one per scheduling agent.

Contiguity keeps a partition's servers and GPUs a single index range each, so an agent's slice of any
view array is a plain slice, and :func:`Partition.sub_view` re-indexes it from zero.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from topology.view import ClusterView


@dataclass(frozen=True)
class Partition:
    """Global index ranges owned by one agent; ``pods`` are the pods it touches (fully or in part)."""

    index: int
    racks: range
    servers: range
    gpus: range
    pods: range

    @property
    def num_gpus(self) -> int:
        return len(self.gpus)

    def sub_view(self, view: ClusterView) -> ClusterView:
        """The partition as a stand-alone view with local indices (GPU types keep the parent's indices)."""
        r0, r1 = self.racks.start, self.racks.stop
        s0, s1 = self.servers.start, self.servers.stop
        g0, g1 = self.gpus.start, self.gpus.stop
        p0, p1 = self.pods.start, self.pods.stop
        pod_start = np.maximum(view.pod_first_rack[p0:p1], r0)
        pod_stop = np.minimum(view.pod_first_rack[p0:p1] + view.pod_num_racks[p0:p1], r1)
        return ClusterView(
            name=f"{view.name}/p{self.index}",
            gpu_types=view.gpu_types,
            gpu_server=view.gpu_server[g0:g1] - s0,
            gpu_socket=view.gpu_socket[g0:g1] - view.gpu_socket[g0],
            server_rack=view.server_rack[s0:s1] - r0,
            server_first_gpu=view.server_first_gpu[s0:s1] - g0,
            server_num_gpus=view.server_num_gpus[s0:s1],
            server_gpu_type=view.server_gpu_type[s0:s1],
            server_nvswitch=view.server_nvswitch[s0:s1],
            server_intra_bw=view.server_intra_bw[s0:s1],
            server_cross_socket_bw=view.server_cross_socket_bw[s0:s1],
            server_nic_bw=view.server_nic_bw[s0:s1],
            rack_pod=view.rack_pod[r0:r1] - p0,
            rack_first_server=view.rack_first_server[r0:r1] - s0,
            rack_num_servers=view.rack_num_servers[r0:r1],
            rack_uplink_bw=view.rack_uplink_bw[r0:r1],
            pod_first_rack=(pod_start - r0).astype(np.int32),
            pod_num_racks=(pod_stop - pod_start).astype(np.int32),
            pod_uplink_bw=view.pod_uplink_bw[p0:p1],
        )


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def partition_counts(view: ClusterView, unit: str = "rack", at_most: int | None = None) -> list[int]:
    """The partition counts :func:`partition` accepts for ``view`` (those up to ``at_most``)."""
    n = view.num_racks if unit == "rack" else view.num_pods
    return [d for d in _divisors(n) if at_most is None or d <= at_most]


def partition(view: ClusterView, k: int, unit: str = "rack") -> list[Partition]:
    """``k`` partitions of equally many consecutive racks (``unit="rack"``) or whole pods (``"pod"``)."""
    if unit not in ("rack", "pod"):
        raise ValueError(f"unit must be 'rack' or 'pod', got {unit!r}")
    n = view.num_racks if unit == "rack" else view.num_pods
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"number of partitions must be an integer >= 1, got {k!r}")
    if k > n or n % k:
        why = f"more partitions than {unit}s" if k > n else f"{k} does not divide {n}"
        raise ValueError(
            f"cannot split {view.name}'s {n} {unit}s into {k} equal contiguous partitions ({why}); "
            f"choose k among {_divisors(n)}"
        )
    if unit == "rack":
        bounds = [i * (n // k) for i in range(k + 1)]
    else:
        firsts = [int(x) for x in view.pod_first_rack] + [view.num_racks]
        bounds = [firsts[i * (n // k)] for i in range(k + 1)]
    server_bounds = [*(int(x) for x in view.rack_first_server), view.num_servers]
    gpu_bounds = [*(int(x) for x in view.server_first_gpu), view.num_gpus]
    parts = []
    for i in range(k):
        r0, r1 = bounds[i], bounds[i + 1]
        s0, s1 = server_bounds[r0], server_bounds[r1]
        parts.append(
            Partition(
                index=i,
                racks=range(r0, r1),
                servers=range(s0, s1),
                gpus=range(gpu_bounds[s0], gpu_bounds[s1]),
                pods=range(int(view.rack_pod[r0]), int(view.rack_pod[r1 - 1]) + 1),
            )
        )
    return parts
