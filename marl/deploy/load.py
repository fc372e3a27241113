"""Any policy folder marlsched exports, as a cluster_sim scheduler: ``--policy marl:DIR`` in every command.

The folder's ``metadata.json`` says which agents it holds: the priority agents
(:mod:`marl.deploy.priority_export`), the round scorer of (job, GPU type) pairs
(:mod:`marl.deploy.rounds_policy`) or Sia's learned job weights (:mod:`marl.deploy.remaining_policy`).
Loading a policy and scheduling with it never import ray.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from marl.deploy.policy_files import read_json


def load_marl_policy(policy_dir: str | Path, *, num_threads: int | None = 1, name: str = "marl") -> Any:
    """The exported policy in ``policy_dir`` as a scheduler (TorchScript, no ray); an error naming the
    folder and the kinds it could hold otherwise."""
    from marl.deploy.priority_export import is_priority_policy, load_priority_policy
    from marl.deploy.remaining_policy import is_remaining_policy, load_remaining_policy
    from marl.deploy.rounds_policy import is_rounds_policy, load_rounds_policy

    if is_priority_policy(policy_dir):
        return load_priority_policy(policy_dir, name=name, num_threads=num_threads)
    if is_rounds_policy(policy_dir):
        return load_rounds_policy(policy_dir, name=name)
    if is_remaining_policy(policy_dir):
        return load_remaining_policy(policy_dir, name=name)
    path = Path(policy_dir) / "metadata.json"
    if not path.is_file():
        raise FileNotFoundError(f"{policy_dir} is not a policy folder (no metadata.json)")
    agent = read_json(path).get("agent")
    raise ValueError(
        f"{path}: agent {agent!r} is not one marl:DIR runs (priority, rounds, sia-remaining); the published "
        "learned schedulers run as topdrl:DIR, dl2:DIR or metaplace:DIR"
    )
