"""The priority agents' network: a hierarchical set encoder (jobs -> partition -> partitions) that scores jobs.

Levels, each a shared per-element MLP followed by pooling, so no weight depends on how many jobs,
GPUs or partitions there are (one network for any topology and queue):

- job level: every job slot is embedded from its features; the partition's job set is summarised by a
  masked mean and max (padding never counts);
- partition level: every partition's summary row is embedded; the agent's own row (row 0) and the mean
  over all partitions (the top level, what the others are doing) join the job-set summary as context;
- scores: each job's score is QSSF's rank key (``-LOG_SCALE`` times its ``log_expected_remaining``
  column) plus a learned residual of the job's embedding and the context. The residual's last layer
  starts at zero, so the untrained network *is* QSSF: the warm start from the strongest non-oracle
  heuristic is exact, and training only has to learn where to deviate.

The value head reads the pooled context of all partitions and the agent's own job set: a centralised
critic, shared by all agents (they share one reward).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from marl.env.priority_features import JOB_FEATURES, PART_FEATURES, JobSetLayout
from marl.env.topology_obs import cand_column, topology_features
from marl.models.inference import cpu_inference, subnormals_flushed
from marl.models.topology_encoder import TopologyEncoder

_QSSF_COLUMN = JOB_FEATURES.index("log_expected_remaining")


def _mlp(i: int, h: int, o: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(i, h), nn.ReLU(), nn.Linear(h, o))


def _head_of_gathered(head: nn.Sequential, pieces: list[tuple[torch.Tensor, torch.Tensor | None]]) -> torch.Tensor:
    """``head(cat([x[idx] for x, idx in pieces], -1))`` with each piece multiplied by its columns of the first
    layer *before* it is gathered (``idx`` None: the piece has a row per output row already): a piece that many
    rows share (an agent's context, a GPU type's embedding) is multiplied once per agent, not once per job.
    The same function to a few ulps; at dc-1k it is 3x fewer multiply-adds in the score head."""
    first, col, out = head[0], 0, None
    for x, idx in pieces:
        y = nn.functional.linear(x, first.weight[:, col : col + x.shape[-1]])
        col += x.shape[-1]
        y = y if idx is None else y[idx]
        out = y if out is None else out + y
    return head[1:](out + first.bias)


def score_regression_loss(
    scores: torch.Tensor, label: torch.Tensor, valid: torch.Tensor, rank_weight: float = 0.0
) -> torch.Tensor:
    """The imitation loss of the order scores: mean squared error of ``scores`` against ``-label`` (a
    privileged ln remaining time) over the ``valid`` slots (``(B, N)`` each, valid as 0/1), plus
    ``rank_weight`` times the error's spread within each row: an agent only orders its own jobs, so an
    error shared by all of them costs nothing there. DAgger's fit and PPO's imitation term both use it."""
    err = (scores + label) * valid
    loss = (err**2).sum() / valid.sum().clamp(min=1.0)
    if rank_weight > 0:
        per = valid.sum(dim=1, keepdim=True).clamp(min=1.0)
        centred = (err - err.sum(dim=1, keepdim=True) / per) * valid
        loss = loss + rank_weight * (centred**2).sum() / valid.sum().clamp(min=1.0)
    return loss


class PriorityNet(nn.Module):
    """``forward(jobs (B, N, Fj), parts (B, K, Fp)) -> (scores (B, N), value (B,))``; padded slots score 0."""

    def __init__(self, hidden: int = 64) -> None:
        super().__init__()
        h = hidden
        self.hidden = h
        self.log_scale = float(JobSetLayout.LOG_SCALE)
        self.qssf_column = _QSSF_COLUMN
        self.job = _mlp(len(JOB_FEATURES), h, h)
        self.part = _mlp(len(PART_FEATURES), h, h)
        self.score = nn.Sequential(nn.Linear(5 * h, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU(), nn.Linear(h, 1))
        nn.init.zeros_(self.score[-1].weight)
        nn.init.zeros_(self.score[-1].bias)
        self.value_head = _mlp(4 * h, h, 1)

    def job_context(self, jobs: torch.Tensor, parts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Every slot's embedding (B, N, H) (zero on padding) and the job-set and partitions context (B, 4H)."""
        valid = jobs[..., :1]  # (B, N, 1)
        e = torch.relu(self.job(jobs)) * valid
        count = valid.sum(dim=1).clamp(min=1.0)
        mean = e.sum(dim=1) / count
        peak = (e - (1.0 - valid) * 1e9).amax(dim=1).clamp(min=0.0)  # all-padding sets pool to 0
        return e, torch.cat([self._parts_context(parts), mean, peak], dim=-1)

    def _parts_context(self, parts: torch.Tensor) -> torch.Tensor:
        p = torch.relu(self.part(parts))  # (B, K, H)
        return torch.cat([p[:, 0], p.mean(dim=1)], dim=-1)

    def occupied_context(
        self, jobs: torch.Tensor, parts: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """:meth:`job_context` on the occupied slots only: their (batch, slot) indices (M, 2), embeddings
        (M, H) and the context (B, 4H), equal to the dense pass's to a few ulps. Several times faster where
        most slots are padding (a data center's first rounds: 1 to 2% occupied): no (B, N, H) tensor is made."""
        at = jobs[..., 0] > 0
        rows = torch.nonzero(at)  # row-major, the order of jobs[at]
        e = torch.relu(self.job(jobs[at]))  # (M, H), >= 0
        b = rows[:, 0].unsqueeze(1).expand(-1, e.shape[1])
        count = at.sum(dim=1, keepdim=True).clamp(min=1).to(e.dtype)
        mean = e.new_zeros(jobs.shape[0], e.shape[1]).scatter_add(0, b, e) / count
        peak = e.new_zeros(jobs.shape[0], e.shape[1]).scatter_reduce(0, b, e, "amax")  # include_self: 0 floor
        return rows, e, torch.cat([self._parts_context(parts), mean, peak], dim=-1)

    def job_scores(self, jobs: torch.Tensor, e: torch.Tensor, ctx: torch.Tensor) -> torch.Tensor:
        """QSSF's key plus the learned residual of each slot's embedding and the context (B, N)."""
        n = jobs.shape[1]
        residual = self.score(torch.cat([e, ctx.unsqueeze(1).expand(-1, n, -1)], dim=-1)).squeeze(-1)
        return (-self.log_scale * jobs[..., self.qssf_column] + residual) * jobs[..., 0]

    def occupied_scores(
        self, jobs: torch.Tensor, rows: torch.Tensor, e: torch.Tensor, ctx: torch.Tensor
    ) -> torch.Tensor:
        """:meth:`job_scores` from :meth:`occupied_context`'s rows: the residual head runs on them only."""
        residual = jobs.new_zeros(jobs.shape[0], jobs.shape[1])
        residual[rows[:, 0], rows[:, 1]] = _head_of_gathered(self.score, [(e, None), (ctx, rows[:, 0])]).squeeze(-1)
        return (-self.log_scale * jobs[..., self.qssf_column] + residual) * jobs[..., 0]

    def encode(
        self, jobs: torch.Tensor, parts: torch.Tensor, skip_padding: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-slot scores (B, N) and the critic's context (B, 4H). ``skip_padding``: run the job MLP and the
        score head on the occupied slots only (:meth:`occupied_context`), as the rollouts and the learner do;
        off, the dense pass that ``forward`` and so the exported files hold."""
        if skip_padding and not torch.jit.is_scripting():  # TorchScript compiles the dense pass only
            rows, e, ctx = self.occupied_context(jobs, parts)
            return self.occupied_scores(jobs, rows, e, ctx), ctx
        e, ctx = self.job_context(jobs, parts)
        return self.job_scores(jobs, e, ctx), ctx

    def value(self, ctx: torch.Tensor) -> torch.Tensor:
        return self.value_head(ctx).squeeze(-1)

    def forward(self, jobs: torch.Tensor, parts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        scores, ctx = self.encode(jobs, parts)
        return scores, self.value(ctx)


class PlacingPriorityNet(PriorityNet):
    """The priority network of agents that also choose each started job's GPU type (one network, one encoder).

    ``forward(jobs, parts, gpus, servers, racks, server_type, cands)`` (:data:`PLACING_INPUTS`, the keys of
    :mod:`marl.env.topology_obs` after the job set's) returns ``(scores (B, N), type_scores (B, N, T), value
    (B,))``. The partition's topology goes through :class:`~marl.models.topology_encoder.TopologyEncoder`;
    its partition embedding joins the job scores' context, and each (slot, type) pair is scored from the
    job's embedding, the type's embedding, the partition's and the pair's features. Both heads start at
    their priors, the type head at the job's log speed on the type relative to its fastest: untrained, the
    agents are QSSF's order with each job on its fastest type that holds it (``@fastest``), and
    :meth:`load_order_head` starts the order head from a :class:`PriorityNet` exactly.

    ``interference``: the inputs carry an interference predictor's estimates (a GPU column, the holder's
    predicted factor, and a candidate column, the job's predicted factor on the type;
    :mod:`marl.env.interference_obs`). They enter the learned parts only, so the untrained network is the
    same ``@fastest`` order with or without them.
    """

    def __init__(self, hidden: int = 64, interference: bool = False) -> None:
        super().__init__(hidden)
        h = hidden
        cols = topology_features(interference)
        self.interference = bool(interference)
        self.topology = TopologyEncoder(h, len(cols["gpu_features"]))
        self.score = nn.Sequential(nn.Linear(6 * h, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU(), nn.Linear(h, 1))
        self.place = nn.Sequential(
            nn.Linear(3 * h + len(cols["cand_features"]), h), nn.ReLU(), nn.Linear(h, h), nn.ReLU(), nn.Linear(h, 1)
        )
        for head in (self.score, self.place):
            nn.init.zeros_(head[-1].weight)
            nn.init.zeros_(head[-1].bias)
        self.value_head = _mlp(5 * h, h, 1)
        self.speed_column = cand_column("log_speed")

    def encode_all(
        self,
        jobs: torch.Tensor,
        parts: torch.Tensor,
        gpus: torch.Tensor,
        servers: torch.Tensor,
        racks: torch.Tensor,
        server_type: torch.Tensor,
        cands: torch.Tensor,
        skip_padding: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Job scores (B, N), type scores (B, N, T; 0 where the type cannot hold the job) and the context (B, 5H);
        ``skip_padding``: score the occupied slots and the types that hold them only (see :meth:`occupied_context`)."""
        part, types = self.topology(gpus, servers, racks, server_type)
        if skip_padding and not torch.jit.is_scripting():  # TorchScript compiles the dense pass only
            scores, learned, ctx = self._occupied_all(jobs, parts, part, types, cands)
            return scores, (cands[..., self.speed_column] + learned) * cands[..., 0], ctx
        e, ctx = self.job_context(jobs, parts)
        ctx = torch.cat([ctx, part], dim=-1)
        scores = self.job_scores(jobs, e, ctx)
        n, t = cands.shape[1], cands.shape[2]
        pair = torch.cat(
            [
                e.unsqueeze(2).expand(-1, -1, t, -1),
                types.unsqueeze(1).expand(-1, n, -1, -1),
                part.unsqueeze(1).unsqueeze(1).expand(-1, n, t, -1),
                cands,
            ],
            dim=-1,
        )
        learned = self.place(pair).squeeze(-1)
        type_scores = (cands[..., self.speed_column] + learned) * cands[..., 0]
        return scores, type_scores, ctx

    def _occupied_all(
        self, jobs: torch.Tensor, parts: torch.Tensor, part: torch.Tensor, types: torch.Tensor, cands: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """:meth:`encode_all`'s job scores, learned type residuals and context on the occupied slots and the
        (slot, type) pairs that hold a job only."""
        rows, e, ctx = self.occupied_context(jobs, parts)
        ctx = torch.cat([ctx, part], dim=-1)
        scores = self.occupied_scores(jobs, rows, e, ctx)
        at = torch.nonzero(cands[..., 0] > 0)  # (M', 3): batch, slot, type
        b, j, k = at[:, 0], at[:, 1], at[:, 2]
        slot = torch.full(jobs.shape[:2], e.shape[0], dtype=torch.long)  # a padded slot reads the zero row
        slot[rows[:, 0], rows[:, 1]] = torch.arange(e.shape[0])
        e0 = torch.cat([e, e.new_zeros(1, e.shape[1])])
        types_flat = types.flatten(0, 1)  # (B * T, H): a (batch, type) pair's row is b * T + k
        pieces = [(e0, slot[b, j]), (types_flat, b * types.shape[1] + k), (part, b), (cands[b, j, k], None)]
        learned = cands.new_zeros(cands.shape[0], cands.shape[1], cands.shape[2])
        learned[b, j, k] = _head_of_gathered(self.place, pieces).squeeze(-1)
        return scores, learned, ctx

    def forward(  # type: ignore[override]
        self,
        jobs: torch.Tensor,
        parts: torch.Tensor,
        gpus: torch.Tensor,
        servers: torch.Tensor,
        racks: torch.Tensor,
        server_type: torch.Tensor,
        cands: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        scores, type_scores, ctx = self.encode_all(jobs, parts, gpus, servers, racks, server_type, cands)
        return scores, type_scores, self.value(ctx)

    @torch.jit.unused
    def load_order_head(self, state: dict[str, torch.Tensor]) -> None:
        """Start from a smaller network's ``state``: a :class:`PriorityNet`'s (the context's topology columns
        get zero weights) or a placing network's without the interference columns (zero weights on them),
        so the scores are that network's exactly."""
        own = self.state_dict()
        for key, value in state.items():
            if key not in own:
                raise ValueError(f"{key!r} is not a parameter of the placing network; give a PriorityNet's state")
            mine = own[key]
            if mine.shape == value.shape:
                own[key] = value.clone()
            elif value.dim() == 2 and mine.shape[0] == value.shape[0] and mine.shape[1] > value.shape[1]:
                own[key] = torch.cat([value, value.new_zeros(value.shape[0], mine.shape[1] - value.shape[1])], 1)
            else:
                raise ValueError(f"{key}: shape {tuple(value.shape)} does not fit {tuple(mine.shape)} (hidden size?)")
        self.load_state_dict(own)


PLACING_INPUTS: tuple[str, ...] = ("jobs", "parts", "gpus", "servers", "racks", "server_type", "cands")


class NetScorer:
    """A :class:`PriorityNet` (or its TorchScript) as the scorer of :class:`marl.env.priority_agents.PriorityAgents`."""

    def __init__(
        self, net: nn.Module, num_threads: int | None = 1, placing: bool | None = None, skip_padding: bool = False
    ) -> None:
        """``skip_padding``: score as the training rollouts do (:meth:`PriorityNet.occupied_context`); off, the
        network's ``forward``, which the exported files hold."""
        self.net = net.eval()
        self.placing = isinstance(net, PlacingPriorityNet) if placing is None else placing
        self.skip_padding = skip_padding
        cpu_inference(num_threads or None)

    def __call__(self, obs: dict) -> np.ndarray:
        """(K, N) job scores; a placing network's (K, N * (1 + T)): job scores, then type scores by slot."""
        with torch.no_grad(), subnormals_flushed():
            if self.placing:
                inputs = [torch.as_tensor(obs[k]) for k in PLACING_INPUTS]
                if self.skip_padding:
                    scores, types, _ = self.net.encode_all(*inputs, skip_padding=True)
                else:
                    scores, types, _ = self.net(*inputs)
                return torch.cat([scores, types.flatten(1)], dim=1).numpy()
            jobs, parts = torch.as_tensor(obs["jobs"]), torch.as_tensor(obs["parts"])
            scores = self.net.encode(jobs, parts, True)[0] if self.skip_padding else self.net(jobs, parts)[0]
        return scores.numpy()
