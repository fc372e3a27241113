"""The round scorer's policy folder: TorchScript of :class:`~marl.models.rounds_scorer.PairScorer` and
its metadata, written atomically by its trainers and loaded as a ``cluster_sim`` scheduler without them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.export import Dim

from cluster_sim.policies.rigid_rounds import ScoredRounds
from cluster_sim.results import write_dict_rows
from marl.deploy.policy_files import (
    load_network,
    read_network_metadata,
    save_network_folder,
    save_program,
)
from marl.models.rounds_scorer import FEATURES, NetRoundsScorer, PairScorer

KIND = "rounds"


def save_rounds_policy(
    net: PairScorer, folder: str | Path, meta: dict, plot: Callable[[list, Path, str], None] | None = None
) -> Path:
    """``policy.pt`` (TorchScript, any job and type count), ``policy.pt2`` (the same as a ``torch.export``
    program), ``metadata.json``, ``progress.csv`` and, with
    ``plot``, the learning curve it draws as ``plot(rows, path, teacher)``."""
    rows = meta.get("progress", [])

    def progress(tmp: Path, doc: dict) -> None:
        write_dict_rows(rows, tmp / "progress.csv")
        if rows and plot is not None:
            plot(rows, tmp / "learning_curve.png", meta.get("teacher", "rounds-oracle"))

    example = (torch.rand(5, 3, len(FEATURES)), torch.rand(5, 3) > 0.3)
    save_network_folder(net, folder, KIND, meta, example, save_program_of, also=progress)
    return Path(folder)


def save_program_of(net: PairScorer, path: Path) -> float:
    """``net`` as a ``torch.export`` program at ``path``, free in the job and GPU type counts; its largest
    difference from ``net`` on inputs of other sizes."""
    jobs, types = Dim("jobs", min=1), Dim("types", min=1)
    gen = torch.Generator().manual_seed(0)

    def pairs(n: int, t: int) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.rand(n, t, len(FEATURES), generator=gen), torch.rand(n, t, generator=gen) > 0.3

    return save_program(net, pairs(7, 3), ({0: jobs, 1: types}, {0: jobs, 1: types}), path, check=pairs(40, 4))


def network_of(meta: dict[str, Any]) -> tuple[PairScorer, Callable[[PairScorer, Path], float]]:
    """The untrained network a folder's metadata describes and the writer of its program (export-program)."""
    return PairScorer(hidden=int(meta["hidden"])), save_program_of


def load_rounds_policy(
    policy_dir: str | Path, *, name: str = "marl", decision: type[ScoredRounds] = ScoredRounds
) -> ScoredRounds:
    """The policy in ``policy_dir`` as a cluster_sim scheduler (TorchScript, no RLlib): its network's scores in
    ``decision``'s rounds (the agent spec's decision layer, a ``ScoredRounds`` or a subclass taking its arguments)."""
    retrain = "retrain it (marlsched train, agent: rounds)"
    meta = read_network_metadata(policy_dir, KIND, {"features": FEATURES}, retrain)
    net = load_network(policy_dir)
    return decision(NetRoundsScorer(net), interval=float(meta["interval"]), stay=float(meta["stay"]), name=name)
