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

import torch
from torch import nn

from marl.env.priority_features import JOB_FEATURES, PART_FEATURES, JobSetLayout
from marl.models.inference import cpu_inference, subnormals_flushed

_QSSF_COLUMN = JOB_FEATURES.index("log_expected_remaining")


def _mlp(i: int, h: int, o: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(i, h), nn.ReLU(), nn.Linear(h, o))


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

    def encode(self, jobs: torch.Tensor, parts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-slot scores (B, N) and the critic's context (B, 4H)."""
        valid = jobs[..., :1]  # (B, N, 1)
        e = torch.relu(self.job(jobs)) * valid
        count = valid.sum(dim=1).clamp(min=1.0)
        mean = e.sum(dim=1) / count
        peak = (e - (1.0 - valid) * 1e9).amax(dim=1).clamp(min=0.0)  # all-padding sets pool to 0
        p = torch.relu(self.part(parts))  # (B, K, H)
        ctx = torch.cat([p[:, 0], p.mean(dim=1), mean, peak], dim=-1)  # (B, 4H)
        n = jobs.shape[1]
        residual = self.score(torch.cat([e, ctx.unsqueeze(1).expand(-1, n, -1)], dim=-1)).squeeze(-1)
        base = -self.log_scale * jobs[..., self.qssf_column]
        return (base + residual) * valid.squeeze(-1), ctx

    def value(self, ctx: torch.Tensor) -> torch.Tensor:
        return self.value_head(ctx).squeeze(-1)

    def forward(self, jobs: torch.Tensor, parts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        scores, ctx = self.encode(jobs, parts)
        return scores, self.value(ctx)


class NetScorer:
    """A :class:`PriorityNet` (or its TorchScript) as the scorer of :class:`marl.env.priority_agents.PriorityAgents`."""

    def __init__(self, net: nn.Module, num_threads: int | None = 1) -> None:
        self.net = net.eval()
        cpu_inference(num_threads or None)

    def __call__(self, obs: dict) -> torch.Tensor:
        with torch.no_grad(), subnormals_flushed():
            scores, _ = self.net(torch.as_tensor(obs["jobs"]), torch.as_tensor(obs["parts"]))
        return scores.numpy()
