"""Server hardware presets and the per-GPU-generation link speeds they are built from.

All bandwidths are GB/s per direction, the convention of :class:`topology.view.ClusterView`. A server
preset fixes the shape (GPUs, sockets, NVSwitch or PCIe, NIC); the GPU generation fixes how fast the
GPU links are, so the same ``nvswitch-8`` chassis is slower with V100s than with A100s.

A "socket" is a GPU locality domain: the GPUs behind one PCIe switch / CPU socket. All GPUs of an
NVSwitch server form one domain, since any two of them are one hop apart.
"""

from __future__ import annotations

from dataclasses import dataclass

GBIT = 1.0 / 8.0  # GB/s per Gb/s


@dataclass(frozen=True)
class GpuLinks:
    """Link speeds of one GPU generation (public datasheet figures, per direction)."""

    nvlink_bw: float | None  # all NVLink links of one GPU together; None = the part has no NVLink
    pcie_bw: float  # host link, PCIe x16 of the generation the part ships with


GPU_LINKS: dict[str, GpuLinks] = {
    "K80": GpuLinks(None, 15.75),  # PCIe 3.0 x16 (8 GT/s x 16 lanes, 128b/130b), no NVLink
    "T4": GpuLinks(None, 15.75),  # PCIe 3.0 x16
    "P100": GpuLinks(80.0, 15.75),  # NVLink 1: 4 links x 20 GB/s (160 GB/s bidirectional)
    "V100": GpuLinks(150.0, 15.75),  # NVLink 2: 6 links x 25 GB/s (300 GB/s bidirectional)
    "RTX2080Ti": GpuLinks(None, 15.75),  # PCIe 3.0 x16 (its 2-way NVLink bridge is not a server fabric)
    "RTX6000": GpuLinks(None, 15.75),  # Quadro RTX 6000, PCIe 3.0 x16 (2-way NVLink bridge only)
    "A10": GpuLinks(None, 31.5),  # PCIe 4.0 x16
    "A100": GpuLinks(300.0, 31.5),  # NVLink 3: 12 links x 25 GB/s (600 GB/s bidirectional), PCIe 4.0
    "H100": GpuLinks(450.0, 63.0),  # NVLink 4: 18 links x 25 GB/s (900 GB/s bidirectional), PCIe 5.0
    "H200": GpuLinks(450.0, 63.0),  # same links as H100
}

# GPU peer traffic between two sockets crosses QPI/UPI and the host bridges; it is slower than a
# PCIe link. 10 GB/s is a round figure below PCIe 3.0 x16; set ``cross_socket_bw`` to override.
CROSS_SOCKET_BW = 10.0


@dataclass(frozen=True)
class ServerLinks:
    """Bandwidths of one server model with one GPU generation."""

    intra_bw: float  # GPU <-> GPU in one socket (PCIe switch) or over NVSwitch
    cross_socket_bw: float  # GPU <-> GPU across sockets; equals intra_bw on single-domain servers
    nic_bw: float  # server -> top-of-rack switch
    host_bw: float  # GPU or socket <-> host / NIC (the PCIe link)


@dataclass(frozen=True)
class ServerSpec:
    """Shape of one server model; link speeds come from the GPU generation unless overridden."""

    name: str
    gpus: int
    sockets: int = 1
    nvswitch: bool = False
    nic_bw: float = 100 * GBIT
    intra_bw: float | None = None
    cross_socket_bw: float | None = None

    @property
    def gpus_per_socket(self) -> int:
        return self.gpus // self.sockets

    def problems(self) -> list[tuple[str, str]]:
        """(field, problem) pairs; empty when the shape is consistent."""
        out = []
        if self.gpus % self.sockets:
            out.append(("sockets", f"{self.gpus} GPUs do not split evenly over {self.sockets} sockets"))
        if self.nvswitch and self.sockets != 1:
            out.append(("sockets", "an NVSwitch server is one GPU domain, so sockets must be 1"))
        if self.nvswitch and self.gpus < 2:
            out.append(("gpus_per_server", "an NVSwitch server needs at least 2 GPUs"))
        return out

    def links(self, gpu_type: str) -> ServerLinks:
        """Resolve link speeds for ``gpu_type``; ValueError if that GPU cannot sit in this server."""
        gpu = GPU_LINKS.get(gpu_type)
        if gpu is None:
            raise ValueError(f"unknown GPU type {gpu_type!r}; known: {', '.join(GPU_LINKS)}")
        intra = self.intra_bw
        if intra is None:
            if self.nvswitch and gpu.nvlink_bw is None:
                with_nvlink = ", ".join(k for k, v in GPU_LINKS.items() if v.nvlink_bw)
                raise ValueError(
                    f"{gpu_type} has no NVLink, so it cannot sit in NVSwitch server {self.name!r}; "
                    f"use a PCIe server or a GPU with NVLink ({with_nvlink}), or set intra_bw"
                )
            intra = gpu.nvlink_bw if self.nvswitch else gpu.pcie_bw
        if self.sockets == 1:
            cross = intra
        else:
            cross = self.cross_socket_bw if self.cross_socket_bw is not None else CROSS_SOCKET_BW
        return ServerLinks(float(intra), float(cross), float(self.nic_bw), gpu.pcie_bw)


SERVER_PRESETS: dict[str, ServerSpec] = {
    s.name: s
    for s in (
        # DGX-class 8-GPU board, all GPUs one NVSwitch hop apart; 4 x 100 Gb/s InfiniBand like a DGX-1.
        ServerSpec("nvswitch-8", gpus=8, sockets=1, nvswitch=True, nic_bw=4 * 100 * GBIT),
        # Two sockets, one PCIe switch of 4 GPUs under each; one 100 Gb/s NIC.
        ServerSpec("pcie-8", gpus=8, sockets=2, nic_bw=100 * GBIT),
        # One socket with 4 GPUs on one PCIe switch; one 100 Gb/s NIC.
        ServerSpec("pcie-4", gpus=4, sockets=1, nic_bw=100 * GBIT),
        # AWS g4dn.12xlarge, where Pollux and Sia profiled their T4s: 4 GPUs, 50 Gb/s network.
        ServerSpec("g4dn-12xlarge", gpus=4, sockets=1, nic_bw=50 * GBIT),
        # Sia's RTX 2080 Ti nodes: 8 GPUs on two PCIe switches, 50 Gb/s network.
        ServerSpec("pcie-8-50g", gpus=8, sockets=2, nic_bw=50 * GBIT),
        # Sia's Quadro RTX 6000 node: 4 GPUs on one PCIe switch, 50 Gb/s network.
        ServerSpec("pcie-4-50g", gpus=4, sockets=1, nic_bw=50 * GBIT),
    )
}
