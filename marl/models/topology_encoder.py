"""Hierarchical graph encoder of one partition: GPU -> server -> rack -> partition, and one embedding per GPU type.

Each level is a graph whose nodes are the children of one parent (the GPUs of a server, the servers of a
rack, the racks of the partition), all linked to each other: the links inside a level are alike (a
server's NVLink/PCIe fabric, a rack's switch), so their bandwidths enter as features of the parent
(:mod:`marl.env.topology_obs`) and the messages are torch-geometric's ``DenseGraphConv`` with mean
aggregation over a batched dense adjacency built from the padding masks. Every parent reads the mean of its
children's embeddings with its own features. The dense form keeps every shape dynamic (any number of racks,
servers per rack, GPUs per server, GPU types), batches over agents and observations, and scripts to
TorchScript, so the exported policy runs without torch-geometric.

The embedding of GPU type ``t`` is the mean of the embeddings of the partition's servers of that type:
what is free and what runs where on that type, which the placing head reads for each (job, type) pair.
"""

from __future__ import annotations

import torch
from torch import nn

from marl.env.topology_obs import GPU_FEATURES, RACK_FEATURES, SERVER_FEATURES


def _siblings(valid: torch.Tensor) -> torch.Tensor:
    """Dense adjacency linking every real node of a group to every other: ``valid`` (M, n, 1) -> (M, n, n)."""
    return valid * valid.transpose(1, 2)


def _pool(x: torch.Tensor, valid: torch.Tensor, dim: int) -> torch.Tensor:
    """Masked mean over ``dim`` (``valid`` has a trailing axis of 1)."""
    return (x * valid).sum(dim=dim) / valid.sum(dim=dim).clamp(min=1.0)


class TopologyEncoder(nn.Module):
    """``forward(gpus (B,R,S,G,Fg), servers (B,R,S,Fs), racks (B,R,Fr), server_type (B,R,S,T))`` ->
    ``(partition (B, H), types (B, T, H))``; ``gpu_features``: the GPU columns (more with an interference
    predictor's estimates, :func:`marl.env.topology_obs.topology_features`)."""

    def __init__(self, hidden: int = 64, gpu_features: int = len(GPU_FEATURES)) -> None:
        # imported here: building the network needs torch-geometric, running its TorchScript does not
        from torch_geometric.nn import DenseGraphConv

        super().__init__()
        h = hidden
        self.gpu_in = nn.Linear(gpu_features, h)
        self.gpu_conv = DenseGraphConv(h, h, aggr="mean")
        self.server_in = nn.Linear(h + len(SERVER_FEATURES), h)
        self.server_conv = DenseGraphConv(h, h, aggr="mean")
        self.rack_in = nn.Linear(h + len(RACK_FEATURES), h)
        self.rack_conv = DenseGraphConv(h, h, aggr="mean")
        self.out = nn.Sequential(nn.Linear(h, h), nn.ReLU())

    def forward(
        self, gpus: torch.Tensor, servers: torch.Tensor, racks: torch.Tensor, server_type: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        b, r, s, g = gpus.shape[0], gpus.shape[1], gpus.shape[2], gpus.shape[3]
        gv = gpus[..., :1]
        x = torch.relu(self.gpu_in(gpus)) * gv
        x, m = x.reshape(b * r * s, g, -1), gv.reshape(b * r * s, g, 1)
        x = ((x + torch.relu(self.gpu_conv(x, _siblings(m)))) * m).reshape(b, r, s, g, -1)  # residual steps
        sv = servers[..., :1]
        y = torch.relu(self.server_in(torch.cat([_pool(x, gv, 3), servers], dim=-1))) * sv
        y, m = y.reshape(b * r, s, -1), sv.reshape(b * r, s, 1)
        y = ((y + torch.relu(self.server_conv(y, _siblings(m)))) * m).reshape(b, r, s, -1)
        rv = racks[..., :1]
        z = torch.relu(self.rack_in(torch.cat([_pool(y, sv, 2), racks], dim=-1))) * rv
        z = (z + torch.relu(self.rack_conv(z, _siblings(rv)))) * rv
        part = self.out(_pool(z, rv, 1))
        w = server_type * sv  # (B, R, S, T): a padded server belongs to no type
        types = torch.einsum("brst,brsh->bth", w, y) / w.sum(dim=(1, 2)).clamp(min=1.0).unsqueeze(-1)
        return part, types
