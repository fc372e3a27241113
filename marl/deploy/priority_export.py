"""A trained priority policy as a folder: TorchScript of the network plus metadata, loadable without ray.

``metadata.json`` holds the format, the network's options, the agents' settings (hysteresis, slots) and
how the policy was made (command, config). ``load_priority_policy`` returns a
:class:`~marl.env.priority_agents.PriorityAgents` (or, with ``agents.decision: gavel-las``, its
:class:`~marl.env.rounds_agents.RoundsAgents`) that runs the network on any cluster: no weight depends on
the partition's size, and by default there is one agent per rack.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch.export import Dim

from marl.deploy.policy_files import (
    load_network,
    read_network_metadata,
    save_network_folder,
    save_program,
)
from marl.env.interference_obs import PREDICTOR_FILE, parse_inputs, resolve_inputs
from marl.env.priority_agents import PriorityAgents
from marl.env.priority_features import JOB_FEATURES, PART_FEATURES, JobSetLayout
from marl.env.rounds_agents import agents_class
from marl.env.topology_obs import topology_features
from marl.models.priority_net import PLACING_INPUTS, NetScorer, PlacingPriorityNet, PriorityNet

KIND = "priority"


def _example(
    net: PriorityNet,
    n: int = 8,
    k: int = 2,
    *,
    batch: int = 1,
    grid: tuple[int, int, int, int] = (2, 2, 4, 3),
    seed: int = 0,
) -> tuple[torch.Tensor, ...]:
    """A random observation batch for ``net``'s inputs (half the job slots padded); ``grid``: racks, servers
    per rack, GPUs per server and GPU types of a placing network's topology inputs."""
    gen = torch.Generator().manual_seed(seed)
    r, s, g, t = grid
    shapes = JobSetLayout(N=n, K=k, R=r, S=s, G=g, T=t, interference=getattr(net, "interference", False)).shapes()
    keys = PLACING_INPUTS if isinstance(net, PlacingPriorityNet) else ("jobs", "parts")
    out = {key: torch.rand((batch, *shapes[key]), generator=gen) for key in keys}
    out["jobs"][..., 0] = 1.0
    out["jobs"][:, n // 2 :, :] = 0.0
    if "cands" in out:
        out["cands"][..., 0] = (out["cands"][..., 0] > 0.3).float()
    return tuple(out[key] for key in keys)


def save_program_of(net: PriorityNet, path: Path) -> float:
    """``net`` as a ``torch.export`` program at ``path``, free in the batch, job slots, partitions and (placing)
    racks, servers, GPUs and GPU types; its largest difference from ``net`` on inputs of other sizes."""
    b, n, k, r, s, g, t = (Dim(name, min=1) for name in ("batch", "jobs", "parts", "racks", "servers", "gpus", "types"))
    dynamic: tuple = ({0: b, 1: n}, {0: b, 1: k})
    if isinstance(net, PlacingPriorityNet):  # gpus, servers, racks, server_type, cands (PLACING_INPUTS)
        dynamic += ({0: b, 1: r, 2: s, 3: g}, {0: b, 1: r, 2: s}, {0: b, 1: r}, {0: b, 1: r, 2: s, 3: t})
        dynamic += ({0: b, 1: n, 2: t},)
    # distinct sizes in the example, so that no two free sizes are traced as one
    example = _example(net, 9, 3, batch=2, grid=(4, 5, 6, 7))
    return save_program(net, example, dynamic, path, check=_example(net, 30, 4, batch=3, grid=(16, 2, 8, 3), seed=1))


def save_priority_policy(net: PriorityNet, folder: str | Path, meta: Mapping[str, Any]) -> Path:
    """Write ``policy.pt`` (TorchScript, any batch, slot and partition count), the same network as a
    ``torch.export`` program (``policy.pt2``) and ``metadata.json`` into ``folder`` atomically (a temporary
    folder renamed into place). A learned predictor the agents consult (``meta["agents"]["interference_inputs"]``,
    ``learned:PATH``) is copied in as ``interference.json``, so the folder runs anywhere."""
    folder = Path(folder)
    net = net.eval()
    placing = isinstance(net, PlacingPriorityNet)
    inputs = (meta.get("agents") or {}).get("interference_inputs")
    if bool(inputs) != bool(getattr(net, "interference", False)):
        raise ValueError(f"agents.interference_inputs {inputs!r} does not match the network (interference columns: "
                         f"{getattr(net, 'interference', False)})")  # fmt: skip
    predictor, mode = None, None
    if inputs:
        mode, predictor = parse_inputs(inputs)
        if mode == "learned":
            meta = {**meta, "agents": {**meta["agents"], "interference_inputs": f"learned:{PREDICTOR_FILE}"}}
    full = {
        "placing": placing,
        "hidden": net.hidden,
        "job_features": list(JOB_FEATURES),
        "part_features": list(PART_FEATURES),
        **({key: list(cols) for key, cols in topology_features(bool(inputs)).items()} if placing else {}),
        "torch": torch.__version__,
        **dict(meta),
    }

    def copy_predictor(tmp: Path, doc: dict) -> None:
        shutil.copyfile(predictor, tmp / PREDICTOR_FILE)

    also = copy_predictor if mode == "learned" else None
    save_network_folder(net, folder, KIND, full, _example(net), save_program_of, also=also)
    return folder


def network_of(meta: Mapping[str, Any]) -> tuple[PriorityNet, Callable[[PriorityNet, Path], float]]:
    """The untrained network a folder's metadata describes and the writer of its program (export-program)."""
    hidden = int(meta["hidden"])
    if meta.get("placing"):
        return PlacingPriorityNet(hidden, bool(_agents(meta).get("interference_inputs"))), save_program_of
    return PriorityNet(hidden), save_program_of


def _agents(meta: Mapping[str, Any]) -> dict[str, Any]:
    return dict(meta.get("agents") or {})


def read_priority_metadata(policy_dir: str | Path) -> dict[str, Any]:
    """``policy_dir``'s metadata, checked to be a priority policy with this version's features (else an error
    naming the file and the fix)."""

    def columns(meta: dict[str, Any]) -> dict[str, tuple[str, ...]]:
        topology = topology_features(bool(_agents(meta).get("interference_inputs"))) if meta.get("placing") else {}
        return {"job_features": JOB_FEATURES, "part_features": PART_FEATURES} | topology

    return read_network_metadata(policy_dir, KIND, columns, "retrain it (marlsched train) or re-export it")


def agents_as_trained(cluster: str, num_agents: int) -> dict[str, int]:
    """``{"num_agents": N}`` for a folder's ``agents`` where the agents trained other than one per rack of their
    cluster (one agent on a 2-rack cluster), so that it runs as trained there; empty where one per rack is how they
    trained, the default a folder runs with on any cluster (:func:`load_priority_policy`)."""
    from topology import build_cluster

    return {} if build_cluster(cluster).view.num_racks == num_agents else {"num_agents": int(num_agents)}


def load_priority_policy(
    policy_dir: str | Path,
    *,
    num_agents: int | None = None,
    name: str = "marl",
    num_threads: int | None = 1,
    interference_online: bool | None = None,
    interference_inputs: str | None = None,
) -> PriorityAgents:
    """The policy in ``policy_dir`` as a cluster_sim scheduler; ``num_agents`` None: as many as it was trained
    with when its metadata says (placing policies: an agent must hold several GPU types to choose among
    them; others trained other than one per rack: :func:`agents_as_trained`), else one per rack.
    ``interference_online`` (None: as trained): agents with interference inputs
    correct their predictor from the co-locations they observe (:mod:`marl.env.interference_obs`).
    ``interference_inputs`` (None: its own copy): another predictor for those inputs, ``none`` to blank them
    (every estimate 1.0: what the trained network makes of its inputs, as an ablation)."""
    meta = read_priority_metadata(policy_dir)
    net = load_network(policy_dir)
    agents = meta.get("agents", {})
    if num_agents is None and agents.get("num_agents"):
        num_agents = int(agents["num_agents"])
    placing = bool(meta.get("placing"))
    inputs = resolve_inputs(agents.get("interference_inputs"), policy_dir)
    if interference_inputs is not None:
        if inputs is None:
            raise ValueError(
                f"{policy_dir}: its network was trained without interference inputs, so it takes none "
                f"(interference_inputs={interference_inputs!r})"
            )
        inputs = interference_inputs
    return agents_class(agents.get("decision", "partitions"))(
        NetScorer(net, num_threads=num_threads, placing=placing),
        num_agents=num_agents,
        placing=placing,
        migrate=agents.get("migrate"),
        interference_inputs=inputs,
        interference_online=bool(
            agents.get("interference_online") if interference_online is None else interference_online
        ),
        hysteresis=float(agents.get("hysteresis", PriorityAgents.__init__.__kwdefaults__["hysteresis"])),
        name=name,
    )
