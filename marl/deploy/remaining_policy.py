"""Sia weighted by a learned estimate of remaining work: the scheduler and its policy folder.

:class:`LearnedWeightSia` is Sia (``cluster_sim.policies.sia``) whose :meth:`~cluster_sim.policies.sia.Sia.job_weights`
come from :class:`~marl.models.remaining_work.RemainingWorkNet`: each job's terms of the integer program are
weighed by (median estimate / own estimate) ** ``power``, the form of ``sia-oracle`` with the estimate in
place of the true remaining time. Sia still chooses every job's GPU type, count and batch size; the network
decides which jobs its program favours. Without a network it is Sia itself (the warm start).

The folder holds ``policy.pt`` (TorchScript, any number of jobs) and ``metadata.json``; it loads as
``--policy marl:DIR`` without RLlib.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.export import Dim

from cluster_sim.policies.run_history import TenantHistory
from cluster_sim.policies.sia import Sia
from cluster_sim.protocol import SchedulerView
from cluster_sim.results import write_dict_rows
from marl.deploy.policy_files import (
    load_network,
    read_network_metadata,
    save_network_folder,
    save_program,
)
from marl.models.inference import subnormals_flushed
from marl.models.remaining_work import FEATURES, RemainingWorkNet, job_features

KIND = "sia-remaining"


class LearnedWeightSia(Sia):
    """Sia with job weights (median / own) ** ``power`` of a network's remaining-time estimates (module doc).

    ``net`` maps (N, len(FEATURES)) float32 features to (N,) log remaining seconds (a
    :class:`RemainingWorkNet` or its TorchScript); None gives Sia's own weights."""

    def __init__(self, net: Callable[[torch.Tensor], torch.Tensor] | None, *, power: float = 0.5, **kw: Any) -> None:
        kw.setdefault("name", "sia-learned")
        super().__init__(**kw)
        if not power > 0:
            raise ValueError(f"power must be > 0 (the weight's exponent, 0.5 in sia-oracle), got {power}")
        self.net, self.power = net, float(power)
        self.history = TenantHistory()

    def reset(self, view: SchedulerView) -> None:
        super().reset(view)
        self.history.reset(view)

    def features(self, view: SchedulerView, jobs: np.ndarray) -> np.ndarray:
        """This round's features of ``jobs`` (the history learns the round's completions first)."""
        self.history.learn(view)
        return job_features(view, self.history, jobs)

    def estimate(self, x: np.ndarray) -> np.ndarray:
        """Estimated remaining seconds of the rows ``x``."""
        assert self.net is not None
        with torch.no_grad(), subnormals_flushed():
            out = self.net(torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)))
        return np.exp(out.numpy().astype(np.float64))

    def job_weights(self, view: SchedulerView, jobs: np.ndarray) -> np.ndarray | None:
        x = self.features(view, jobs)
        if self.net is None or not len(jobs):
            return None
        est = self.estimate(x)
        return (np.median(est) / est) ** self.power


def save_remaining_policy(
    net: RemainingWorkNet, folder: str | Path, meta: dict, plot: Callable[[dict, Path], None] | None = None
) -> Path:
    """``policy.pt`` (TorchScript), ``policy.pt2`` (the same as a ``torch.export`` program), ``metadata.json``
    (with each export's largest difference from the module), ``progress.csv`` (one row per training round)
    and, with ``plot``, the figure it draws as ``plot(meta, path)``; written atomically."""

    def progress(tmp: Path, doc: dict) -> None:
        write_dict_rows(meta.get("progress", []), tmp / "progress.csv")
        if plot is not None:
            plot(doc, tmp / "estimates.png")

    save_network_folder(net, folder, KIND, meta, (torch.randn(7, len(FEATURES)),), save_program_of, also=progress)
    return Path(folder)


def save_program_of(net: RemainingWorkNet, path: Path) -> float:
    """``net`` as a ``torch.export`` program at ``path``, free in the job count; its largest difference from
    ``net`` on another count."""
    gen = torch.Generator().manual_seed(0)
    rows = torch.randn(7, len(FEATURES), generator=gen), torch.randn(40, len(FEATURES), generator=gen)
    return save_program(net, rows[:1], ({0: Dim("jobs", min=1)},), path, check=rows[1:])


def network_of(meta: dict[str, Any]) -> tuple[RemainingWorkNet, Callable[[RemainingWorkNet, Path], float]]:
    """The untrained network a folder's metadata describes and the writer of its program (export-program)."""
    return RemainingWorkNet(hidden=int(meta["hidden"])), save_program_of


def load_remaining_policy(policy_dir: str | Path, *, name: str = "marl") -> LearnedWeightSia:
    """The policy in ``policy_dir`` as a cluster_sim scheduler (TorchScript, no RLlib)."""
    retrain = "retrain it (marlsched train, agent: sia-remaining)"
    meta = read_network_metadata(policy_dir, KIND, {"features": FEATURES}, retrain)
    net = load_network(policy_dir)
    sia = meta.get("sia", {})
    return LearnedWeightSia(net, power=float(meta.get("power", 0.5)), name=name, **sia)


__all__ = ["KIND", "LearnedWeightSia", "load_remaining_policy", "network_of", "save_remaining_policy"]
