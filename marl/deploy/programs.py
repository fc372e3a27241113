"""``torch.export`` programs for policy folders written before they carried one (``marlsched export-program``).

A folder's ``policy.pt`` is TorchScript, which recent torch releases deprecate; ``policy.pt2`` holds the same
network as a ``torch.export`` program, which the loaders read where TorchScript is missing or unreadable
(:func:`marl.deploy.policy_files.load_network`). Folders written now carry both; this adds the program to an
older folder from its TorchScript weights, for the kinds marlsched's own agents ship (the priority agents,
placing or not, the round scorer and the remaining-work estimate) and the kinds registered by the layers above
(:func:`register_kind`: the published baselines DL2 and TopDRL, which ``marlsched export-program`` loads).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from torch import nn

from cluster_sim.results import write_atomic
from marl.deploy.policy_files import PROGRAM, TORCHSCRIPT, load_torchscript, read_json

Builder = Callable[[dict], tuple[nn.Module, Callable[[nn.Module, Path], float]]]
_REGISTERED: dict[str, Builder] = {}


def register_kind(kind: str, builder: Builder) -> None:
    """Let :func:`add_program` write programs for folders of ``kind``: ``builder(metadata)`` gives the
    Python module to load the TorchScript weights into and the writer of its program. For the policy kinds
    of layers this one may not import (``marl.baselines``)."""
    _REGISTERED[kind] = builder


def _builders() -> dict[str, Builder]:
    """Per policy kind: the Python module for a folder's metadata, and the writer of its program."""
    from marl.deploy import priority_export, remaining_policy, rounds_policy
    from marl.models.priority_net import PlacingPriorityNet, PriorityNet
    from marl.models.remaining_work import RemainingWorkNet
    from marl.models.rounds_scorer import PairScorer

    return {
        priority_export.KIND: lambda m: (
            (PlacingPriorityNet if m.get("placing") else PriorityNet)(int(m["hidden"])),
            priority_export.save_program_of,
        ),
        rounds_policy.KIND: lambda m: (PairScorer(hidden=int(m["hidden"])), rounds_policy.save_program_of),
        remaining_policy.KIND: lambda m: (RemainingWorkNet(hidden=int(m["hidden"])), remaining_policy.save_program_of),
        **dict(sorted(_REGISTERED.items())),  # the same message whatever imported first
    }


def add_program(folder: str | Path) -> float:
    """Write ``folder/policy.pt2`` from ``folder/policy.pt`` and record in its metadata the program's largest
    difference from the network (on inputs of other sizes than it was exported with); returns it."""
    folder = Path(folder)
    meta_path = folder / "metadata.json"
    if not meta_path.is_file():
        raise FileNotFoundError(f"{folder} is not a policy folder (no metadata.json)")
    meta = read_json(meta_path)
    builders = _builders()
    kind = meta.get("agent")
    if kind not in builders:
        raise ValueError(
            f"{meta_path}: agent {kind!r} has no torch.export program in marlsched; kinds: {', '.join(builders)}"
            " (dl2 and topdrl once marl.baselines.dl2 and .topdrl are imported, as `marlsched export-program` does)"
        )
    net, save = builders[kind](meta)
    net.load_state_dict(load_torchscript(folder / TORCHSCRIPT).state_dict())
    err = save(net.eval(), folder / PROGRAM)
    write_atomic(meta_path, json.dumps({**meta, "program_max_abs_diff": err}, indent=2) + "\n")
    return err


__all__ = ["Builder", "add_program", "register_kind"]
