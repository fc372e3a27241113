"""Hierarchical graph network that scores one agent's candidate placements (GPU → server → rack).

Every agent owns a partition of the same shape, so the partition's graphs are fixed: the edges live in
the network as buffers and only node features travel in the observation. Message passing is a GCN
(Kipf & Welling; the same maths as ``torch_geometric.nn.GCNConv`` with edge weights, checked against it
in the tests) written in plain torch over the node axis of a ``(B, N, H)`` tensor. That needs no
batch-size-dependent edge index and no torch_geometric at run time, so the network traces to TorchScript,
exports with ``torch.export`` for any batch size, and the exported file runs in a process that has
neither torch_geometric nor ray.

Pooling follows the known hierarchy (scatter-mean of GPUs into their server, servers into their rack,
racks into the partition) as fixed averaging matrices, which is cheaper than learned pooling.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

from marl.env.obs_layout import OBS_KEYS, ObsLayout

# Same constant as ray.rllib.utils.torch_utils.FLOAT_MIN, so masking matches RLlib's own modules.
FLOAT_MIN = -3.4e38

HIERARCHY_FIELDS: tuple[str, ...] = (
    "gpu_edge_index",
    "gpu_edge_weight",
    "server_edge_index",
    "server_edge_weight",
    "rack_edge_index",
    "rack_edge_weight",
    "gpu_to_server",
    "server_to_rack",
)


def _field(hierarchy: Any, name: str) -> Any:
    if isinstance(hierarchy, Mapping):
        if name not in hierarchy:
            raise ValueError(f"hierarchy lacks field {name!r}; it needs {list(HIERARCHY_FIELDS)}")
        return hierarchy[name]
    if not hasattr(hierarchy, name):
        raise ValueError(
            f"hierarchy {type(hierarchy).__name__} lacks attribute {name!r}; pass a "
            f"topology.graph_tensors.HierarchyTensors or a mapping with {list(HIERARCHY_FIELDS)}"
        )
    return getattr(hierarchy, name)


def hierarchy_arrays(hierarchy: Any, layout: ObsLayout) -> dict[str, np.ndarray]:
    """Validated numpy copies of the partition graph (partition-local node ids) for ``layout``.

    ``hierarchy`` is a ``topology.graph_tensors.HierarchyTensors`` or any mapping/object with the fields
    in ``HIERARCHY_FIELDS`` (numpy arrays or nested lists, as stored in an RLModule's model_config).
    """
    counts = {"gpu": layout.G, "server": layout.S, "rack": layout.R}
    out: dict[str, np.ndarray] = {}
    for level, n in counts.items():
        ei = np.asarray(_field(hierarchy, f"{level}_edge_index"), dtype=np.int64).reshape(2, -1)
        w = np.asarray(_field(hierarchy, f"{level}_edge_weight"), dtype=np.float64).reshape(-1)
        if w.shape[0] != ei.shape[1]:
            raise ValueError(
                f"hierarchy.{level}_edge_weight has {w.shape[0]} entries but {level}_edge_index has "
                f"{ei.shape[1]} edges; give one weight per edge"
            )
        if ei.size and (ei.min() < 0 or ei.max() >= n):
            raise ValueError(
                f"hierarchy.{level}_edge_index holds ids in [{ei.min()}, {ei.max()}] but the layout has "
                f"{n} {level} nodes; use partition-local ids 0..{n - 1} and no padding"
            )
        if not np.all(np.isfinite(w)) or (w < 0).any():
            raise ValueError(f"hierarchy.{level}_edge_weight must be finite and >= 0")
        out[f"{level}_edge_index"] = ei
        out[f"{level}_edge_weight"] = w
    for name, n_child, n_parent, parent in (
        ("gpu_to_server", layout.G, layout.S, "server"),
        ("server_to_rack", layout.S, layout.R, "rack"),
    ):
        ids = np.asarray(_field(hierarchy, name), dtype=np.int64).reshape(-1)
        if ids.shape[0] != n_child:
            raise ValueError(f"hierarchy.{name} has {ids.shape[0]} entries, the layout needs {n_child}")
        if ids.min() < 0 or ids.max() >= n_parent:
            raise ValueError(
                f"hierarchy.{name} holds ids in [{ids.min()}, {ids.max()}]; use partition-local "
                f"{parent} ids 0..{n_parent - 1}"
            )
        empty = np.setdiff1d(np.arange(n_parent), ids)
        if empty.size:
            raise ValueError(f"hierarchy.{name}: {parent}s {empty[:5].tolist()} have no children")
        out[name] = ids
    return out


def hierarchy_to_config(hierarchy: Any) -> dict[str, list]:
    """Plain nested lists of the hierarchy fields, for an RLModule's (pickled, checkpointed) model_config."""
    return {name: np.asarray(_field(hierarchy, name)).tolist() for name in HIERARCHY_FIELDS}


def gcn_edges(
    edge_index: np.ndarray, edge_weight: np.ndarray, num_nodes: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(src, dst, coefficient) of D^-1/2 (A + I) D^-1/2, with torch_geometric's ``gcn_norm`` rules.

    Existing self-loops keep their weight, nodes without one get a loop of weight 1, and the degree is
    the weighted in-degree of the target node.
    """
    src, dst = edge_index
    keep = src != dst
    loop_w = np.ones(num_nodes, dtype=np.float64)
    loops = ~keep
    loop_w[src[loops]] = edge_weight[loops]
    nodes = np.arange(num_nodes, dtype=np.int64)
    src = np.concatenate([src[keep], nodes])
    dst = np.concatenate([dst[keep], nodes])
    w = np.concatenate([edge_weight[keep], loop_w])
    deg = np.bincount(dst, weights=w, minlength=num_nodes)
    with np.errstate(divide="ignore"):
        dinv = np.where(deg > 0, deg**-0.5, 0.0)
    return src, dst, dinv[src] * w * dinv[dst]


def _group_slots(groups: np.ndarray) -> tuple[int, int, np.ndarray, bool]:
    """Number of groups P, largest group size k, each node's flat slot g * k + rank, and whether the
    slots are simply 0..N-1 (groups contiguous and all of size k), so a reshape replaces the gather."""
    num_groups = int(groups.max()) + 1
    sizes = np.bincount(groups, minlength=num_groups)
    k = int(sizes.max())
    order = np.argsort(groups, kind="stable")
    first = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    rank = np.empty_like(groups)
    rank[order] = np.arange(groups.shape[0]) - first[groups[order]]
    slots = groups * k + rank
    return num_groups, k, slots, bool(np.array_equal(slots, np.arange(groups.shape[0])))


class FixedGCNConv(nn.Module):
    """GCN layer over a fixed graph, applied to every batch element: (B, N, in) → (B, N, out).

    The graphs of the hierarchy are block diagonal (GPUs link only inside their server, servers only
    inside their rack), so the normalised adjacency is stored as dense (P, k, k) blocks, one per group,
    and propagation is one batched matmul. That is much faster on CPU than gathering a message per edge
    and batch element, and it exports everywhere. ``groups`` gives each node's group; if an edge crosses
    groups (or no grouping is given) the whole graph is one dense block, which is still exact.
    """

    def __init__(
        self,
        in_dim: int,
        out_dim: int,
        edge_index: np.ndarray,
        edge_weight: np.ndarray,
        n: int,
        groups: np.ndarray | None = None,
    ):
        super().__init__()
        src, dst, coef = gcn_edges(edge_index, edge_weight, n)
        if groups is None or (groups[src] != groups[dst]).any():
            groups = np.zeros(n, dtype=np.int64)
        self.num_groups, self.k, slots, self.contiguous = _group_slots(np.asarray(groups, dtype=np.int64))
        pos = slots % self.k
        blocks = np.zeros((self.num_groups, self.k, self.k), dtype=np.float64)
        np.add.at(blocks, (groups[dst], pos[dst], pos[src]), coef)  # out[dst] += coef * x[src]
        self.lin = nn.Linear(in_dim, out_dim, bias=False)
        self.bias = nn.Parameter(torch.zeros(out_dim))
        self.register_buffer("blocks", torch.as_tensor(blocks, dtype=torch.float32))
        # General case: gather nodes into padded block slots (index n = a zero row) and back.
        gather = np.full(self.num_groups * self.k, n, dtype=np.int64)
        gather[slots] = np.arange(n)
        self.register_buffer("gather", torch.as_tensor(gather))
        self.register_buffer("scatter", torch.as_tensor(slots, dtype=torch.long))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lin(x)
        if not self.contiguous:
            h = torch.cat([h, torch.zeros_like(h[:, :1])], dim=1).index_select(1, self.gather)
        out = torch.matmul(self.blocks, h.unflatten(1, (self.num_groups, self.k))).flatten(1, 2)
        if not self.contiguous:
            out = out.index_select(1, self.scatter)
        return out + self.bias


class GroupPool(nn.Module):
    """Average (or sum) children into their parent along one axis: (…, N, …) → (…, P, …).

    Contiguous equal-sized groups (the usual dense numbering of the hierarchy) pool by a reshape;
    anything else by a fixed (P, N) averaging matrix.
    """

    def __init__(self, child_to_parent: np.ndarray, num_parents: int, dim: int = -2, reduce: str = "mean"):
        super().__init__()
        n = child_to_parent.shape[0]
        _, self.k, _, self.contiguous = _group_slots(child_to_parent)
        self.num_parents, self.dim, self.reduce = num_parents, dim, reduce
        m = np.zeros((num_parents, n), dtype=np.float64)
        m[child_to_parent, np.arange(n)] = 1.0
        if reduce == "mean":
            m /= m.sum(axis=1, keepdims=True)
        self.register_buffer("matrix", torch.as_tensor(m, dtype=torch.float32))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.contiguous:
            grouped = x.unflatten(self.dim, (self.num_parents, self.k))
            inner = self.dim + 1 if self.dim >= 0 else self.dim
            return grouped.mean(dim=inner) if self.reduce == "mean" else grouped.sum(dim=inner)
        if self.dim == -1:
            return torch.matmul(x, self.matrix.t())
        return torch.matmul(self.matrix, x)


def _mlp(in_dim: int, hidden: int, out_dim: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(in_dim, hidden), nn.ReLU(), nn.Linear(hidden, out_dim))


class _Level(nn.Module):
    """Input projection plus residual GCN layers of one hierarchy level."""

    def __init__(self, in_dim: int, hidden: int, layers: int, arrays: dict[str, np.ndarray], level: str, n: int):
        super().__init__()
        # Nodes sharing a parent form the dense blocks of the GCN; the top level is one block.
        groups = {"gpu": arrays["gpu_to_server"], "server": arrays["server_to_rack"]}.get(level)
        ei, w = arrays[f"{level}_edge_index"], arrays[f"{level}_edge_weight"]
        self.inp = nn.Linear(in_dim, hidden)
        self.convs = nn.ModuleList(FixedGCNConv(hidden, hidden, ei, w, n, groups) for _ in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.inp(x))
        for conv in self.convs:
            h = h + torch.relu(conv(h))
        return h


class HGNNPolicyNet(nn.Module):
    """Candidate-placement policy and value of one agent, shared by all agents of a cluster.

    ``forward`` takes the observation arrays in ``OBS_KEYS`` order, each with a leading batch axis, and
    returns masked logits ``(B, C + 1)`` (last = wait) and the value ``(B,)``.
    """

    def __init__(
        self,
        layout: ObsLayout,
        hierarchy: Any,
        hidden: int = 64,
        gpu_layers: int = 2,
        server_layers: int = 2,
        rack_layers: int = 1,
    ):
        super().__init__()
        arrays = hierarchy_arrays(hierarchy, layout)
        self.layout = layout
        self.hidden = hidden
        lay, h = layout, hidden
        self.gpu = _Level(lay.Fg, h, gpu_layers, arrays, "gpu", lay.G)
        self.server = _Level(h + lay.Fs, h, server_layers, arrays, "server", lay.S)
        self.rack = _Level(h + lay.Fr, h, rack_layers, arrays, "rack", lay.R)
        self.gpu_pool = GroupPool(arrays["gpu_to_server"], lay.S)
        self.server_pool = GroupPool(arrays["server_to_rack"], lay.R)
        # GPUs a candidate uses on each server: sums the last axis of cand_gpus (B, C, G) → (B, C, S).
        self.gpus_per_server = GroupPool(arrays["gpu_to_server"], lay.S, dim=-1, reduce="sum")
        self.partition = nn.Sequential(nn.Linear(h, h), nn.ReLU())
        self.queue = _mlp(lay.Fq, h, h)
        self.cand = nn.Sequential(
            nn.Linear(lay.Fc - lay.Q + 4 * h, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU(), nn.Linear(h, 1)
        )
        self.wait = _mlp(2 * h, h, 1)
        self.value_head = _mlp(2 * h, h, 1)

    def encode(
        self,
        gpu_feats: torch.Tensor,
        server_feats: torch.Tensor,
        rack_feats: torch.Tensor,
        queue_feats: torch.Tensor,
        cand_feats: torch.Tensor,
        cand_gpus: torch.Tensor,
        action_mask: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Masked logits (B, C + 1) and the critic embedding (B, 2H) the value head reads."""
        g = self.gpu(gpu_feats)  # (B, G, H)
        s = self.server(torch.cat([self.gpu_pool(g), server_feats], dim=-1))  # (B, S, H)
        r = self.rack(torch.cat([self.server_pool(s), rack_feats], dim=-1))  # (B, R, H)
        part = self.partition(r.mean(dim=1))  # (B, H)

        valid = queue_feats[..., :1]  # (B, Q, 1), structural column "valid"
        q = self.queue(queue_feats) * valid  # padded slots contribute nothing
        queue_summary = q.sum(dim=1) / valid.sum(dim=1).clamp(min=1.0)  # (B, H)
        critic = torch.cat([part, queue_summary], dim=-1)  # (B, 2H)

        used = cand_gpus.sum(dim=-1, keepdim=True).clamp(min=1.0)  # (B, C, 1)
        cand_gpu = torch.bmm(cand_gpus, g) / used
        share = self.gpus_per_server(cand_gpus)  # (B, C, S) GPUs used per server
        cand_server = torch.bmm(share, s) / used
        # The one-hot slot only picks the job's embedding; it is not an input itself, so scores do not
        # depend on where in the queue window a job sits (its wait time is a queue feature).
        q_slots = self.layout.Q
        cand_job = torch.bmm(cand_feats[..., :q_slots], q)
        ctx = torch.cat([cand_feats[..., q_slots:], cand_gpu, cand_server, cand_job], dim=-1)
        ctx = torch.cat([ctx, part.unsqueeze(1).expand(-1, cand_feats.shape[1], -1)], dim=-1)
        cand_logits = self.cand(ctx).squeeze(-1)  # (B, C)
        logits = torch.cat([cand_logits, self.wait(critic)], dim=-1)  # (B, C + 1)
        logits = logits + torch.clamp(torch.log(action_mask), min=FLOAT_MIN)
        return logits, critic

    def value(self, critic: torch.Tensor) -> torch.Tensor:
        return self.value_head(critic).squeeze(-1)

    def forward(
        self,
        gpu_feats: torch.Tensor,
        server_feats: torch.Tensor,
        rack_feats: torch.Tensor,
        queue_feats: torch.Tensor,
        cand_feats: torch.Tensor,
        cand_gpus: torch.Tensor,
        action_mask: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        logits, critic = self.encode(
            gpu_feats, server_feats, rack_feats, queue_feats, cand_feats, cand_gpus, action_mask
        )
        return logits, self.value(critic)

    def forward_obs(self, obs: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """``forward`` on a dict observation batch (the form RLlib and the environment use)."""
        return self(*(obs[k] for k in OBS_KEYS))


def example_inputs(layout: ObsLayout, batch: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """A valid random observation batch in ``OBS_KEYS`` order (for tracing, export and benchmarks)."""
    gen = torch.Generator().manual_seed(seed)
    shapes = layout.shapes()
    out = {k: torch.rand((batch, *shapes[k]), generator=gen) for k in OBS_KEYS}
    out["queue_feats"][..., 0] = (out["queue_feats"][..., 0] > 0.3).float()
    slot = torch.randint(0, layout.Q, (batch, layout.C), generator=gen)
    out["cand_feats"][..., : layout.Q] = nn.functional.one_hot(slot, layout.Q).float()
    out["cand_gpus"] = (out["cand_gpus"] > 0.9).float()
    out["action_mask"] = (out["action_mask"] > 0.4).float()
    out["action_mask"][:, -1] = 1.0
    return tuple(out[k] for k in OBS_KEYS)


def trace_policy(net: HGNNPolicyNet, batch: int = 2) -> torch.jit.ScriptModule:
    """TorchScript of ``net`` (eval mode) that accepts any batch size; save it with ``.save(path)``."""
    net = net.eval()
    with torch.no_grad():
        return torch.jit.trace(net, example_inputs(net.layout, batch))


def export_policy(net: HGNNPolicyNet, batch: int = 2) -> torch.export.ExportedProgram:
    """``torch.export`` program of ``net`` (eval mode) with a dynamic batch axis."""
    net = net.eval()
    b = torch.export.Dim("batch", min=1, max=1 << 16)
    shapes = {k: {0: b} for k in OBS_KEYS}
    return torch.export.export(net, example_inputs(net.layout, batch), dynamic_shapes=shapes)
