"""A learned scorer of (job, GPU type) pairs for rigid jobs re-assigned every round (``ScoredRounds``).

Each round, every active job and every GPU type it fits on form a pair; the network scores each pair from
what a deployed scheduler knows, and the round walks pairs from the highest score (a job runs at most once,
on a type with its GPUs left). Features per pair, none derived from a job's own duration:

- the job's speed on the type against its fastest type, and its comparative advantage there (its log speed
  on the type minus its mean over types, less the same for the other active jobs): Gavel's insight that
  a type should go to the jobs that gain the most from it;
- the job: attained service (GPU-hours), wait since arrival, GPUs asked, whether it runs on this type or
  elsewhere now;
- the cluster: the type's share of the GPUs, the demand on it (GPUs of the jobs for which it is fastest,
  over its GPUs) and the total demand over all GPUs.

Trained by imitation of a privileged teacher on the states the scorer itself visits (DAgger,
:mod:`marl.rounds_imitation`).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from cluster_sim.protocol import SchedulerView

FEATURES = (
    "rel_speed",
    "advantage",
    "attained_h",
    "wait_h",
    "log2_gpus",
    "runs_here",
    "runs_elsewhere",
    "type_share",
    "type_demand",
    "total_demand",
)


def pair_features(view: SchedulerView, jobs: np.ndarray, rates: np.ndarray, current: np.ndarray) -> np.ndarray:
    """(jobs, types, len(FEATURES)) float32 features of every (job, type) pair (see the module doc)."""
    n, types = rates.shape
    ok = rates > 0
    logr = np.where(ok, np.log(np.maximum(rates, 1e-300)), 0.0)
    best = np.where(ok, logr, -np.inf).max(axis=1, keepdims=True)
    rel = np.where(ok, logr - best, -5.0)
    mean_t = (logr * ok).sum(axis=1, keepdims=True) / np.maximum(ok.sum(axis=1, keepdims=True), 1)
    adv = np.where(ok, logr - mean_t, 0.0)
    adv = adv - (adv * ok).sum(axis=0, keepdims=True) / np.maximum(ok.sum(axis=0, keepdims=True), 1)
    att = np.array([view.attained_service(int(j)) for j in jobs.tolist()]) / 3600.0
    wait = np.maximum(view.now - view.jobs.arrival[jobs], 0.0) / 3600.0
    asked = np.asarray(view.jobs.num_gpus[jobs], dtype=np.float64)
    topo = view.topo
    stype = np.asarray(topo.server_gpu_type)
    cap = np.array([topo.server_num_gpus[stype == t].sum() for t in range(types)], dtype=np.float64)
    fastest = np.where(ok.any(axis=1), np.argmax(np.where(ok, logr, -np.inf), axis=1), -1)
    demand = np.array([asked[fastest == t].sum() for t in range(types)]) / np.maximum(cap, 1.0)
    here = (current[:, None] == np.arange(types)[None, :]).astype(np.float64)
    out = np.empty((n, types, len(FEATURES)), dtype=np.float32)
    out[..., 0] = rel
    out[..., 1] = adv
    out[..., 2] = np.log1p(att)[:, None]
    out[..., 3] = np.log1p(wait)[:, None]
    out[..., 4] = np.log2(np.maximum(asked, 1.0))[:, None]
    out[..., 5] = here
    out[..., 6] = ((current >= 0)[:, None] & (here == 0)).astype(np.float64)
    out[..., 7] = (cap / max(cap.sum(), 1.0))[None, :]
    out[..., 8] = np.log1p(demand)[None, :]
    out[..., 9] = np.log1p(asked.sum() / max(cap.sum(), 1.0))
    return out


class PairScorer(nn.Module):
    """Score of each (job, type) pair: an MLP on the pair's features plus a mean-pooled context of the
    other pairs on the same type (so a pair is judged against its competitors)."""

    def __init__(self, features: int = len(FEATURES), hidden: int = 64, drop: tuple = ()) -> None:
        super().__init__()
        unknown = sorted(set(drop) - set(FEATURES))
        if unknown:
            raise ValueError(f"drop: unknown features {unknown}; choose from {list(FEATURES)}")
        # the ablations' inputs are zeroed inside the module, so the exported file carries them
        self.register_buffer("keep", torch.tensor([f not in drop for f in FEATURES], dtype=torch.float32))
        self.embed = nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.head = nn.Sequential(nn.Linear(2 * hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``x``: (jobs, types, F); ``mask``: (jobs, types) bool, the pairs that exist. Returns (jobs, types)."""
        h = self.embed(x * self.keep)
        m = mask.unsqueeze(-1).to(h.dtype)
        ctx = (h * m).sum(dim=0, keepdim=True) / m.sum(dim=0, keepdim=True).clamp_min(1.0)
        return self.head(torch.cat([h, ctx.expand_as(h)], dim=-1)).squeeze(-1)


class NetRoundsScorer:
    """A :class:`PairScorer` as the ``scorer`` of :class:`~cluster_sim.policies.rigid_rounds.ScoredRounds`;
    ``record`` (a list) collects each round's (time, features, mask)."""

    def __init__(self, net: PairScorer, record: list | None = None) -> None:
        self.net, self.record = net, record

    def __call__(self, view: SchedulerView, jobs: np.ndarray, rates: np.ndarray, current: np.ndarray) -> np.ndarray:
        x = pair_features(view, jobs, rates, current)
        mask = rates > 0
        if self.record is not None:
            self.record.append((view.now, x, mask))
        with torch.no_grad():
            return self.net(torch.from_numpy(x), torch.from_numpy(mask)).double().numpy()


__all__ = ["FEATURES", "NetRoundsScorer", "PairScorer", "pair_features"]
