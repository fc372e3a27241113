"""A trained priority policy as a folder: TorchScript of the network plus metadata, loadable without ray.

``metadata.json`` holds the format, the network's options, the agents' settings (hysteresis, slots) and
how the policy was made (command, config). ``load_priority_policy`` returns a
:class:`~marl.env.priority_agents.PriorityAgents` that runs the network on any cluster: no weight depends on
the partition's size, and by default there is one agent per rack.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from marl.deploy.policy_files import atomic_folder, load_torchscript, read_json
from marl.env.priority_agents import PriorityAgents
from marl.env.priority_features import JOB_FEATURES, PART_FEATURES
from marl.models.priority_net import NetScorer, PriorityNet

KIND = "priority"
TORCHSCRIPT = "policy.pt"
METADATA = "metadata.json"


def _example(n: int = 8, k: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
    jobs = torch.rand(1, n, len(JOB_FEATURES))
    jobs[..., 0] = 1.0
    jobs[:, n // 2 :, :] = 0.0
    return jobs, torch.rand(1, k, len(PART_FEATURES))


def save_priority_policy(net: PriorityNet, folder: str | Path, meta: Mapping[str, Any]) -> Path:
    """Write ``policy.pt`` (TorchScript, any batch, slot and partition count) and ``metadata.json``
    into ``folder`` atomically (a temporary folder renamed into place)."""
    folder = Path(folder)
    net = net.eval()
    with torch.no_grad():
        scripted = torch.jit.script(net)
        jobs, parts = _example()
        err = float((scripted(jobs, parts)[0] - net(jobs, parts)[0]).abs().max())
    full = {
        "format": "marlsched-policy",
        "agent": KIND,
        "hidden": net.hidden,
        "job_features": list(JOB_FEATURES),
        "part_features": list(PART_FEATURES),
        "export_max_abs_diff": err,
        "torch": torch.__version__,
        **dict(meta),
    }
    with atomic_folder(folder) as tmp:
        scripted.save(str(tmp / TORCHSCRIPT))
        (tmp / METADATA).write_text(json.dumps(full, indent=2) + "\n")
    return folder


def is_priority_policy(policy_dir: str | Path) -> bool:
    path = Path(policy_dir) / METADATA
    return path.is_file() and read_json(path).get("agent") == KIND


def read_priority_metadata(policy_dir: str | Path) -> dict[str, Any]:
    """``policy_dir``'s metadata, checked to be a priority policy with this version's features (else an error
    naming the file and the fix)."""
    path = Path(policy_dir) / METADATA
    if not path.is_file():
        raise FileNotFoundError(f"{policy_dir} is not a policy folder (no {METADATA})")
    meta = read_json(path)
    if meta.get("agent") != KIND:
        raise ValueError(f"{path}: agent {meta.get('agent')!r} is not {KIND!r}")
    for key, cols in (("job_features", JOB_FEATURES), ("part_features", PART_FEATURES)):
        if tuple(meta.get(key, ())) != cols:
            raise ValueError(f"{path}: {key} differ from this marlsched's {list(cols)}; retrain or re-export")
    return meta


def load_priority_policy(
    policy_dir: str | Path, *, num_agents: int | None = None, name: str = "marl", num_threads: int | None = 1
) -> PriorityAgents:
    """The policy in ``policy_dir`` as a cluster_sim scheduler; ``num_agents`` None: one per rack."""
    meta = read_priority_metadata(policy_dir)
    net = load_torchscript(Path(policy_dir) / TORCHSCRIPT)
    agents = meta.get("agents", {})
    return PriorityAgents(
        NetScorer(net, num_threads=num_threads),
        num_agents=num_agents,
        hysteresis=float(agents.get("hysteresis", PriorityAgents.__init__.__kwdefaults__["hysteresis"])),
        name=name,
    )
