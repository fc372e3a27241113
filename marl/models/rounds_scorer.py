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
  over its GPUs) and the total demand over all GPUs;
- Gavel's view of the pair: the log of its round priority and its LP share
  (:meth:`~cluster_sim.policies.gavel.GavelPriorityScore.gavel_las`, from speeds and the rounds each job
  has had).

The network's score is a fixed linear prior over the features plus what it learns (a linear term and an MLP
with a context of the pairs competing for the same type, both starting at zero). With the ``gavel-las``
prior the untrained network is that heuristic, the best non-oracle one on these windows; training moves
it from there (by imitation, :mod:`marl.training.rounds_imitation`, or by evolution strategies on the average JCT
itself, :mod:`marl.training.rounds_es`).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from cluster_sim.policies.gavel import LAS_WEIGHT, GavelPriorityScore
from cluster_sim.policies.rigid_rounds import attained_hours, type_capacity
from cluster_sim.protocol import SchedulerView
from marl.models.inference import subnormals_flushed

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
    "gavel_priority",
    "gavel_share",
)
PRIORS = {"none": {}, "gavel-las": {"gavel_priority": 1.0, "attained_h": -LAS_WEIGHT}}


def pair_features(
    view: SchedulerView,
    jobs: np.ndarray,
    rates: np.ndarray,
    current: np.ndarray,
    gavel: GavelPriorityScore | None = None,
) -> np.ndarray:
    """(jobs, types, len(FEATURES)) float32 features of every (job, type) pair (see the module doc).
    ``gavel`` holds the rounds each job has had (a fresh one: every job as if new)."""
    n, types = rates.shape
    ok = rates > 0
    logr = np.where(ok, np.log(np.maximum(rates, 1e-300)), 0.0)
    best = np.where(ok, logr, -np.inf).max(axis=1, keepdims=True)
    rel = np.where(ok, logr - best, -5.0)
    mean_t = (logr * ok).sum(axis=1, keepdims=True) / np.maximum(ok.sum(axis=1, keepdims=True), 1)
    adv = np.where(ok, logr - mean_t, 0.0)
    adv = adv - (adv * ok).sum(axis=0, keepdims=True) / np.maximum(ok.sum(axis=0, keepdims=True), 1)
    att = attained_hours(view, jobs)
    wait = np.maximum(view.now - view.jobs.arrival[jobs], 0.0) / 3600.0
    asked = np.asarray(view.jobs.num_gpus[jobs], dtype=np.float64)
    cap = type_capacity(view.topo).astype(np.float64)
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
    share, log_priority = (gavel or GavelPriorityScore.gavel_las()).log_priority(view, jobs, rates)
    out[..., 10] = log_priority
    out[..., 11] = share
    return out


class PairScorer(nn.Module):
    """Score of each (job, type) pair: a fixed linear ``prior`` (a heuristic of :data:`PRIORS`), plus a learned
    linear term and an MLP on the pair's features and a mean-pooled context of the other pairs on the same
    type (so a pair is judged against its competitors). With a prior, the learned parts start at zero: the
    untrained network is the heuristic."""

    def __init__(self, features: int = len(FEATURES), hidden: int = 64, drop: tuple = (), prior: str = "none") -> None:
        super().__init__()
        unknown = sorted(set(drop) - set(FEATURES))
        if unknown:
            raise ValueError(f"drop: unknown features {unknown}; choose from {list(FEATURES)}")
        if prior not in PRIORS:
            raise ValueError(f"prior: unknown {prior!r}; choose one of {sorted(PRIORS)}")
        # the ablations' inputs are zeroed inside the module, so the exported file carries them
        self.register_buffer("keep", torch.tensor([f not in drop for f in FEATURES], dtype=torch.float32))
        self.register_buffer("prior", torch.tensor([PRIORS[prior].get(f, 0.0) for f in FEATURES], dtype=torch.float32))
        self.linear = nn.Linear(features, 1, bias=False)
        self.embed = nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.head = nn.Sequential(nn.Linear(2 * hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1))
        nn.init.zeros_(self.linear.weight)
        if prior != "none":
            nn.init.zeros_(self.head[-1].weight)
            nn.init.zeros_(self.head[-1].bias)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``x``: (jobs, types, F); ``mask``: (jobs, types) bool, the pairs that exist. Returns (jobs, types)."""
        x = x * self.keep
        h = self.embed(x)
        m = mask.unsqueeze(-1).to(h.dtype)
        ctx = (h * m).sum(dim=0, keepdim=True) / m.sum(dim=0, keepdim=True).clamp_min(1.0)
        learned = self.linear(x) + self.head(torch.cat([h, ctx.expand_as(h)], dim=-1))
        return (x * self.prior).sum(dim=-1) + learned.squeeze(-1)


class NetRoundsScorer:
    """A :class:`PairScorer` as the ``scorer`` of :class:`~cluster_sim.policies.rigid_rounds.ScoredRounds`;
    ``record`` (a list) collects each round's (time, features, mask). It keeps Gavel's count of the rounds
    each job has had (``reset``/``ran``, called by ``ScoredRounds``)."""

    def __init__(self, net: PairScorer, record: list | None = None) -> None:
        self.net, self.record = net, record
        self.gavel = GavelPriorityScore.gavel_las()

    def reset(self, view: SchedulerView) -> None:
        self.gavel.reset(view)

    def ran(self, jobs: np.ndarray, types: np.ndarray) -> None:
        self.gavel.ran(jobs, types)

    def __call__(self, view: SchedulerView, jobs: np.ndarray, rates: np.ndarray, current: np.ndarray) -> np.ndarray:
        x = pair_features(view, jobs, rates, current, self.gavel)
        mask = rates > 0
        if self.record is not None:
            self.record.append((view.now, x, mask))
        with torch.no_grad(), subnormals_flushed():
            return self.net(torch.from_numpy(x), torch.from_numpy(mask)).double().numpy()


__all__ = ["FEATURES", "PRIORS", "NetRoundsScorer", "PairScorer", "pair_features"]
