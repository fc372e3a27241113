"""Imitation warm start (as in DL2): record a heuristic expert's decisions in the environment, then fit the
shared policy to them before PPO, so that reinforcement learning starts from a sensible scheduler
instead of a random one that leaves GPUs idle for whole episodes.

The policy head is fitted by cross-entropy on the masked logits, on the states where an agent had a real
choice (more than one allowed action; with only "wait" allowed the loss is zero anyway). Two strategies
often propose the very same placement (on an empty server consolidate and closest-gpus agree), and the
network necessarily scores identical candidates identically, so the target is the set of candidates
equivalent to the expert's (same job, same GPUs): the loss is ``-log`` of their total probability. The value head is
fitted to the discounted returns observed after each state, on all states, so PPO's first advantages come
from a critic that already knows the scale of the reward.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from cluster_sim.results import write_atomic
from marl.deploy.export import CKPT_META
from marl.env.obs_layout import OBS_KEYS, ObsLayout
from marl.env.placement_env import MarlSchedEnv
from marl.models.hgnn import HGNNPolicyNet
from marl.training.config import TrainConfig
from marl.training.expert import ExpertPolicy
from marl.training.run_folder import RunFolder, checkpoint_meta


@dataclass
class ExpertData:
    """Per-agent states of expert episodes, stacked: ``obs[key]`` is (N, ...) in OBS_KEYS layout."""

    obs: dict[str, np.ndarray]
    actions: np.ndarray  # (N,) expert action
    targets: np.ndarray  # (N, C + 1) actions equivalent to the expert's (same job on the same GPUs)
    returns: np.ndarray  # (N,) discounted return from this step on
    choice: np.ndarray  # (N,) True where more than one action was allowed
    episode: np.ndarray  # (N,) episode index
    avg_jct: list[float] = field(default_factory=list)  # expert's average JCT per episode (seconds)
    env_steps: int = 0

    def __len__(self) -> int:
        return len(self.actions)

    def subset(self, idx: np.ndarray) -> ExpertData:
        return ExpertData(
            {k: v[idx] for k, v in self.obs.items()},
            self.actions[idx],
            self.targets[idx],
            self.returns[idx],
            self.choice[idx],
            self.episode[idx],
            self.avg_jct,
            self.env_steps,
        )


def discounted_returns(rewards: np.ndarray, gamma: float) -> np.ndarray:
    """G_t = r_t + gamma * G_{t+1}, computed backwards over one episode."""
    out = np.empty(len(rewards), dtype=np.float64)
    acc = 0.0
    for t in range(len(rewards) - 1, -1, -1):  # a few hundred steps per episode
        acc = float(rewards[t]) + gamma * acc
        out[t] = acc
    return out


def collect_expert_data(
    env_config: Mapping[str, Any],
    *,
    strategy: str = "consolidate",
    backfill: bool = False,
    episodes: int = 4,
    seed: int = 0,
    gamma: float = 0.99,
) -> ExpertData:
    """Run the expert for ``episodes`` episodes (workload seeds drawn from ``seed + episode``)."""
    env = MarlSchedEnv(dict(env_config))
    expert = ExpertPolicy(env.layout, env.config.placements, strategy=strategy, backfill=backfill)
    agents = env.possible_agents
    obs_rows: dict[str, list[np.ndarray]] = {k: [] for k in OBS_KEYS}
    actions, returns, episode_ids, jcts = [], [], [], []
    env_steps = 0
    for e in range(episodes):
        obs, _ = env.reset(seed=seed + e)
        rewards: list[float] = []
        step_of: list[int] = []
        done = False
        while not done:
            act = expert.act(obs)
            for a in agents:
                for k in OBS_KEYS:
                    obs_rows[k].append(obs[a][k])
                actions.append(act[a])
                step_of.append(len(rewards))
            obs, rew, term, _, infos = env.step(act)
            rewards.append(float(rew[agents[0]]))  # shared reward
            done = bool(term["__all__"])
        env_steps += len(rewards)
        returns.append(discounted_returns(np.asarray(rewards), gamma)[np.asarray(step_of)])
        episode_ids.append(np.full(len(step_of), e))
        jcts.append(float(infos[agents[0]]["avg_jct"]))
    stacked = {k: np.stack(v).astype(np.float32) for k, v in obs_rows.items()}
    acts = np.asarray(actions, dtype=np.int64)
    return ExpertData(
        obs=stacked,
        actions=acts,
        targets=equivalent_set(env.layout, stacked, acts),
        returns=np.concatenate(returns).astype(np.float32),
        choice=stacked["action_mask"].sum(axis=1) > 1,
        episode=np.concatenate(episode_ids),
        avg_jct=jcts,
        env_steps=env_steps,
    )


def _tensors(data: ExpertData, idx: np.ndarray) -> list[torch.Tensor]:
    return [torch.from_numpy(data.obs[k][idx]) for k in OBS_KEYS]


def equivalent_set(layout: ObsLayout, obs: Mapping[str, np.ndarray], actions: np.ndarray) -> np.ndarray:
    """(N, C + 1) mask of the allowed actions that do what ``actions`` (N,) do: the action itself and every
    candidate that starts the same job on the same GPUs."""
    n, wait = len(actions), layout.C
    out = np.zeros((n, layout.num_actions), dtype=bool)
    out[np.arange(n), actions] = True
    rows = np.flatnonzero(actions != wait)
    if len(rows):
        a = actions[rows]
        slot = obs["cand_feats"][rows, :, : layout.Q]
        gpus = obs["cand_gpus"][rows]
        same = (slot == slot[np.arange(len(rows)), a][:, None]).all(axis=2)
        same &= (gpus == gpus[np.arange(len(rows)), a][:, None]).all(axis=2)
        out[rows, :wait] |= same & (obs["action_mask"][rows, :wait] > 0)
    return out


def set_cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean of ``-log P(target set)`` for logits (N, A) and boolean target sets (N, A)."""
    picked = logits.masked_fill(~targets, float("-inf"))
    return (torch.logsumexp(logits, dim=1) - torch.logsumexp(picked, dim=1)).mean()


def equivalent_actions(layout: ObsLayout, obs: Mapping[str, np.ndarray], a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Whether allowed actions ``a`` and ``b`` (N,) do the same thing (see :func:`equivalent_set`)."""
    return equivalent_set(layout, obs, np.asarray(b))[np.arange(len(a)), np.asarray(a)]


@torch.no_grad()
def imitation_metrics(net: HGNNPolicyNet, data: ExpertData, batch_size: int = 1024) -> dict[str, float]:
    """Cross-entropy and accuracy on the choice states, value MSE on all states."""
    net.eval()
    logits_all, values_all = [], []
    for start in range(0, len(data), batch_size):
        idx = np.arange(start, min(start + batch_size, len(data)))
        logits, value = net(*_tensors(data, idx))
        logits_all.append(logits)
        values_all.append(value)
    logits = torch.cat(logits_all)
    values = torch.cat(values_all)
    choice = torch.from_numpy(data.choice)
    targets = torch.from_numpy(data.targets)
    ce = set_cross_entropy(logits[choice], targets[choice]).item() if choice.any() else 0.0
    pred = logits.argmax(dim=1).numpy()
    c = data.choice
    exact = float((pred[c] == data.actions[c]).mean()) if c.any() else 1.0
    equiv = equivalent_actions(net.layout, {k: v[c] for k, v in data.obs.items()}, pred[c], data.actions[c])
    return {
        "loss": ce,
        "accuracy": exact,
        "equivalent_accuracy": float(equiv.mean()) if c.any() else 1.0,
        "value_mse": float(((values - torch.from_numpy(data.returns)) ** 2).mean()),
        "states": len(data),
        "choice_states": int(c.sum()),
    }


def train_imitation(
    net: HGNNPolicyNet,
    data: ExpertData,
    *,
    epochs: int = 20,
    batch_size: int = 256,
    lr: float = 1e-3,
    value_coef: float = 0.5,
    seed: int = 0,
    holdout: ExpertData | None = None,
    log: Callable[[str], None] | None = None,
) -> list[dict[str, float]]:
    """Fit ``net`` to the expert in place; returns metrics before training (epoch 0) and after each epoch."""
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    choice = torch.from_numpy(data.choice)
    targets = torch.from_numpy(data.targets)
    returns = torch.from_numpy(data.returns)
    # The value loss is scaled by the returns' variance so that its weight does not depend on the reward
    # scale (raw returns are often hundreds of units, which would drown the imitation loss).
    value_norm = float(returns.var()) + 1e-8 if len(returns) > 1 else 1.0
    obs = [torch.from_numpy(data.obs[k]) for k in OBS_KEYS]
    history = []

    choice_idx = torch.from_numpy(np.flatnonzero(data.choice))
    other_idx = torch.from_numpy(np.flatnonzero(~data.choice))
    # States with a single allowed action only teach the value head; an equal number of them per epoch
    # (a fresh sample each time) keeps epochs short without starving the critic.
    n_other = min(len(other_idx), max(len(choice_idx), batch_size))

    def record(epoch: int) -> None:
        row: dict[str, float] = {"epoch": epoch}
        if epoch in (0, epochs):
            row.update({f"train_{k}": v for k, v in imitation_metrics(net, data).items()})
        if holdout is not None and len(holdout):
            row.update({f"holdout_{k}": v for k, v in imitation_metrics(net, holdout).items()})
        history.append(row)
        if log is not None and ("holdout_loss" in row or "train_loss" in row):
            which = "holdout" if "holdout_loss" in row else "train"
            log(
                f"warm start epoch {epoch}/{epochs}: {which} imitation loss {row[f'{which}_loss']:.4f}, "
                f"accuracy {row[f'{which}_equivalent_accuracy']:.3f} (exact {row[f'{which}_accuracy']:.3f}), "
                f"value MSE {row[f'{which}_value_mse']:.3g}"
            )

    record(0)
    for epoch in range(1, epochs + 1):
        net.train()
        others = other_idx[torch.randperm(len(other_idx), generator=gen)[:n_other]]
        pool = torch.cat([choice_idx, others])
        order = pool[torch.randperm(len(pool), generator=gen)]
        for start in range(0, len(order), batch_size):
            idx = order[start : start + batch_size]
            logits, value = net(*(o[idx] for o in obs))
            c = choice[idx]
            loss = value_coef * nn.functional.mse_loss(value, returns[idx]) / value_norm
            if c.any():
                loss = loss + set_cross_entropy(logits[c], targets[idx][c])
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(net.parameters(), 1.0)
            opt.step()
        record(epoch)
    net.eval()
    return history


def split_holdout(data: ExpertData, holdout_episodes: int = 1) -> tuple[ExpertData, ExpertData | None]:
    """The last ``holdout_episodes`` episodes as held-out data (none when only one episode was recorded)."""
    n_ep = int(data.episode.max()) + 1 if len(data) else 0
    if n_ep <= holdout_episodes:
        return data, None
    cut = n_ep - holdout_episodes
    return data.subset(np.flatnonzero(data.episode < cut)), data.subset(np.flatnonzero(data.episode >= cut))


def run_warm_start(
    cfg: TrainConfig, env_config: Mapping[str, Any], module: Any, run: RunFolder, log: Callable[[str], None]
) -> dict:
    """Imitate the expert into ``module.net``; saves the module and the metrics under ``warm_start/``."""
    ws = cfg.warm_start
    t0 = time.perf_counter()
    data = collect_expert_data(
        env_config,
        strategy=ws.strategy,
        backfill=ws.backfill,
        episodes=ws.episodes,
        seed=cfg.seed,
        gamma=cfg.ppo.gamma,
    )
    collect_s = time.perf_counter() - t0
    log(
        f"warm start: {ws.episodes} expert episodes, {data.env_steps} env steps, {int(data.choice.sum())} "
        f"decision states, expert avg JCT {np.mean(data.avg_jct):.0f} s ({collect_s:.1f} s)"
    )
    train, holdout = split_holdout(data)
    history = train_imitation(
        module.net,
        train,
        epochs=ws.epochs,
        batch_size=ws.batch_size,
        lr=ws.lr,
        value_coef=ws.value_coef,
        seed=cfg.seed,
        holdout=holdout,
        log=log,
    )
    report = {
        "expert": {"strategy": ws.strategy, "backfill": ws.backfill, "avg_jct": data.avg_jct},
        "env_steps": data.env_steps,
        "states": len(data),
        "decision_states": int(data.choice.sum()),
        "collect_s": collect_s,
        "train_s": time.perf_counter() - t0 - collect_s,
        "history": history,
    }
    folder = run.root / "warm_start"
    tmp = run.root / "warm_start.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    module.save_to_path(str(tmp / "module"))  # tmp is absolute: run.root is resolved
    write_atomic(tmp / CKPT_META, json.dumps(checkpoint_meta(cfg, 0), indent=2) + "\n")
    write_atomic(tmp / "metrics.json", json.dumps(report, indent=2) + "\n")
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)
    return report
