"""The policy-gradient loop of the published baselines that learn from sampled episodes (TopDRL, DL2).

Each iteration samples several episodes of the same window; a step's advantage is its discounted return minus
the mean of the other episodes' returns from the same time (an input-dependent baseline: the workload that
dominates the return cancels), normalised over the batch; a PPO-style clipped surrogate with an entropy bonus
updates the network. The agents' own networks and rollouts stay with each baseline; this module is the update.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

REWARDS = ("throughput", "jct")


def returns_at(times: np.ndarray, arrival: np.ndarray, end: np.ndarray, reward: str, tau: float) -> np.ndarray:
    """The discounted return from each of ``times`` on, of one episode whose jobs arrived at ``arrival``
    and finished at ``end`` (constant ``tau`` seconds): ``throughput`` counts every completion ``c`` after
    ``t`` as ``exp(-(c - t) / tau)``; ``jct`` is minus the discounted job-hours spent in the system after
    ``t`` (the average JCT's integrand). Computed in chunks of times."""
    out = np.empty(len(times))
    for lo in range(0, len(times), 256):
        t = times[lo : lo + 256, None]
        if reward == "throughput":
            out[lo : lo + 256] = np.where(end[None, :] > t, np.exp(-(end[None, :] - t) / tau), 0.0).sum(axis=1)
        else:
            a = np.maximum(arrival[None, :], t)
            inside = end[None, :] > t
            stay = tau * (np.exp(-(a - t) / tau) - np.exp(-(np.maximum(end[None, :], a) - t) / tau))
            out[lo : lo + 256] = -np.where(inside, stay, 0.0).sum(axis=1) / 3600.0
    return out


def leave_one_out_advantages(
    episodes: Sequence[dict[str, Any]], times: Sequence[np.ndarray], reward: str, tau: float
) -> np.ndarray:
    """Every step's return (at ``times[r]`` of episode ``r``) minus the mean return of the other episodes at the
    same times, concatenated over the episodes with steps and normalised to mean 0, std 1. Each episode holds
    its jobs' ``arrival`` and ``end``."""
    advs = []
    for r, (ep, t) in enumerate(zip(episodes, times, strict=True)):
        if not len(t):
            continue
        own = returns_at(t, ep["arrival"], ep["end"], reward, tau)
        others = [returns_at(t, o["arrival"], o["end"], reward, tau) for q, o in enumerate(episodes) if q != r]
        advs.append(own - np.mean(others, axis=0))
    adv = np.concatenate(advs)
    return (adv - adv.mean()) / (adv.std() + 1e-8)


def clipped_step(
    logp_all: torch.Tensor,
    mask: torch.Tensor,
    action: torch.Tensor,
    old_logp: torch.Tensor,
    adv: torch.Tensor,
    opt: torch.optim.Optimizer,
    params: Any,
    *,
    clip: float,
    entropy: float,
    grad_clip: float,
) -> tuple[float, float]:
    """One update on a minibatch: ``logp_all`` the log-probabilities of every choice (``mask``: the valid ones),
    ``action`` the choices taken with ``old_logp`` their log-probabilities when sampled. Returns the loss and
    the policy's entropy."""
    ratio = torch.exp(logp_all.gather(1, action[:, None])[:, 0] - old_logp)
    surrogate = torch.minimum(ratio * adv, torch.clamp(ratio, 1 - clip, 1 + clip) * adv)
    probs = logp_all.exp() * mask
    ent = -(probs * torch.where(mask, logp_all, torch.zeros_like(logp_all))).sum(1).mean()
    loss = -surrogate.mean() - entropy * ent
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, grad_clip)
    opt.step()
    return float(loss.detach()), float(ent.detach())


__all__ = ["REWARDS", "clipped_step", "leave_one_out_advantages", "returns_at"]
