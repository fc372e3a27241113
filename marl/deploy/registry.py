"""The one registry of policy-folder kinds: how every folder marlsched writes is loaded, exported and remade.

A policy folder holds ``metadata.json`` with ``format: marlsched-policy`` and ``agent: KIND``; the agent's spec
(:data:`marl.agents.AGENTS`) says which function loads the folder as a cluster_sim scheduler (no RLlib, no ray),
which network its ``policy.pt`` holds (what ``marlsched export-program`` rebuilds; none for weights kept as JSON)
and which command makes one. ``marl:DIR`` loads a folder of any kind; ``topdrl:DIR``, ``dl2:DIR`` and
``metaplace:DIR`` load a folder that must be of that kind. cluster_sim finds these prefixes through the
``marlsched.policy_folders`` entry points (pyproject.toml), so ``cluster_sim.policies.get_policy("marl:DIR")``
works from the Python API as in ``simulate``, ``run``, the benchmarks and the Ray actors, without cluster_sim
importing marl.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cluster_sim.protocol import TrainedOn
from cluster_sim.results import write_atomic
from marl.agents import AGENTS, AgentSpec, reference
from marl.deploy.policy_files import (
    FORMAT,
    FORMAT_VERSION,
    METADATA,
    PROGRAM,
    TORCHSCRIPT,
    load_torchscript,
    not_a_policy_folder,
    read_json,
)

# the policies shipped with marlsched, wherever the code runs from (a relative ``marl:experiments/policies/NAME`` is
# read from the working directory, so a notebook elsewhere gives ``marl:{SHIPPED_POLICIES / NAME}``)
SHIPPED_POLICIES = Path(__file__).resolve().parents[2] / "experiments" / "policies"

# the prefixes of a scheduler name that load a folder (pyproject.toml's marlsched.policy_folders entry points),
# and the kind each one requires (None: the kind the folder's metadata names)
PREFIXES: dict[str, str | None] = {"marl": None, "topdrl": "topdrl", "dl2": "dl2", "metaplace": "metaplace"}


# the fields every kind's loader reads, by the kind of value they hold: a wrong one is named before the loader
# fails on it somewhere inside
FIELD_KINDS: dict[str, tuple[type | tuple[type, ...], str]] = {
    **{key: (list, "a list of input names") for key in ("features", "job_features", "part_features",
                                                         "global_features")},
    "hidden": (int, "the hidden width, an integer"),
    "agents": (dict, "a mapping of the agents' settings"),
    "placing": (bool, "true or false"),
}  # fmt: skip


def read_metadata(folder: str | Path) -> tuple[AgentSpec, dict[str, Any]]:
    """The kind and metadata of a policy folder; an error naming the folder or file and the fix otherwise."""
    folder = Path(folder)
    if folder.is_file():
        model = " (an interference model: give it to --interference-model)" if folder.suffix == ".json" else ""
        raise ValueError(
            f"{folder} is a file, not a policy folder{model}; a policy folder holds metadata.json and the network, "
            "e.g. OUT/policy of a training run or experiments/policies/default-small"
        )
    if not folder.is_dir():
        from topology.spec import did_you_mean

        siblings = [d.name for d in folder.parent.iterdir() if d.is_dir()] if folder.parent.is_dir() else []
        close = f" ({hint})" if (hint := did_you_mean(folder.name, siblings)) else ""
        where = "" if folder.is_absolute() else f" (a relative folder is read from the working directory {Path.cwd()})"
        shipped = SHIPPED_POLICIES / folder.name
        example = shipped if shipped.is_dir() else SHIPPED_POLICIES / "default-imitation"
        raise FileNotFoundError(
            f"no policy folder {str(folder)!r}{where}{close}; make one with e.g. {AGENTS['priority'].made_by} (then "
            f"OUT/policy), or run a shipped one, from anywhere: marl:{example} (the shipped ones are in "
            f"{SHIPPED_POLICIES}, marl.deploy.registry.SHIPPED_POLICIES in Python)"
        )
    path = folder / METADATA
    if not path.is_file():
        raise not_a_policy_folder(folder)
    meta = read_json(path)
    agent = meta.get("agent")
    if agent not in AGENTS:
        package = (meta.get("provenance") or {}).get("agent_package")
        if isinstance(package, str) and package:  # an agent of a package of one's own, not installed here
            name, _, version = package.partition(" ")
            raise ValueError(
                f"{path}: agent {agent!r} comes from the package {package} (the folder's provenance.agent_package), "
                f"which is not installed here: install it (pip install {name}=={version}, or its source with pip "
                f"install -e DIR) so that its entry point registers the agent; kinds known here: {', '.join(AGENTS)}"
            )
        raise ValueError(f"{path}: agent {agent!r} is not a policy kind marlsched knows; kinds: {', '.join(AGENTS)}")
    if meta.get("format", FORMAT) != FORMAT:
        raise ValueError(f"{path}: format {meta.get('format')!r} is not {FORMAT!r}; it was not written by marlsched")
    if int(meta.get("format_version", 1)) > FORMAT_VERSION:
        raise ValueError(
            f"{path}: format_version {meta['format_version']} is newer than this marlsched's {FORMAT_VERSION}; "
            "upgrade marlsched to load it"
        )
    for key, (kinds, what) in FIELD_KINDS.items():
        value = meta.get(key)
        if value is not None and (not isinstance(value, kinds) or isinstance(value, bool) != (kinds is bool)):
            raise ValueError(
                f"{path}: {key}: expected {what}, got {value!r}; copy the policy folder again from where it was "
                "trained, or train it again"
            )
    return AGENTS[agent], meta


def policy_kind(folder: str | Path) -> str | None:
    """The ``agent`` kind of a policy folder, None where ``folder`` is not a readable one of a known kind."""
    try:
        return read_metadata(folder)[0].name
    except (OSError, ValueError):
        return None


def load_policy(folder: str | Path, *, kind: str | None = None, name: str = "marl", **options: Any) -> Any:
    """The policy in ``folder`` as a cluster_sim scheduler, whatever its kind (``kind``: refuse any other);
    ``options`` go to the kind's loader (``num_agents`` for the priority agents, ``gpu_type`` for TopDRL ...)."""
    found, meta = read_metadata(folder)
    if kind is not None and found.name != kind:
        raise ValueError(
            f"{Path(folder) / METADATA}: agent is {found.name!r}, not {kind!r}; load it as marl:{folder}, or give a "
            f"folder made by {AGENTS[kind].made_by}"
        )
    loader = reference(found, "loader")
    _refuse_unknown_options(loader, found.name, folder, options)
    decision = reference(found, "decision")
    if _takes(loader, "decision"):  # a loader shared by agents that differ in their decision layer builds each one's
        options = {**options, "decision": decision}
    try:
        scheduler = loader(folder, name=name, **options)
    except (TypeError, KeyError, AttributeError, IndexError) as err:  # a value of the wrong kind, a key missing
        raise ValueError(
            f"{Path(folder) / METADATA}: does not hold what a {found.name} policy needs ({type(err).__name__}: {err}); "
            "copy the policy folder again from where it was trained, or train it again"
        ) from err
    if not isinstance(scheduler, decision):
        raise ValueError(
            f"agent {found.name!r}: its loader {found.loader} built a {type(scheduler).__name__}, not its decision "
            f"layer {found.decision}; a spec that changes the decision layer needs a loader that builds it (one "
            "taking decision=, as marl.deploy.rounds_policy:load_rounds_policy does, is given the spec's class)"
        )
    scheduler.trained_on = trained_on(meta)  # the simulation warns on another cluster
    return scheduler


def _takes(function: Any, keyword: str) -> bool:
    import inspect

    return keyword in inspect.signature(function).parameters


def _refuse_unknown_options(loader: Any, kind: str, folder: str | Path, options: Mapping[str, Any]) -> None:
    """An option the kind's loader does not take, named with those it does (not the loader's TypeError)."""
    import inspect

    params = list(inspect.signature(loader).parameters.values())
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return
    allowed = sorted(p.name for p in params[1:] if p.name not in ("name", "decision"))  # the first: the folder
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        close = difflib.get_close_matches(unknown[0], allowed, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        takes = ", ".join(allowed) or "none"
        raise ValueError(f"policy folder {folder} ({kind}): unknown option {unknown[0]!r}; {hint}allowed: {takes}")


def trained_setting(meta: Mapping[str, Any], key: str) -> str | None:
    """A setting (``cluster``, ``interference`` ...) of the config a folder records, in its ``env`` section or at
    its top level; None where the config names none."""
    trained = meta.get("trained") or {}
    for config in ((meta.get("provenance") or {}).get("config"), meta.get("config"), trained.get("config")):
        if isinstance(config, Mapping):
            env = config.get("env")
            value = (env.get(key) if isinstance(env, Mapping) else None) or config.get(key)
            if isinstance(value, str):
                return value
    return None


def trained_cluster(meta: Mapping[str, Any]) -> str | None:
    """The cluster (a preset or a YAML file) the config a folder records trained its policy on; None where it
    names none (a meta-trained policy's synthetic clusters)."""
    return trained_setting(meta, "cluster")


def trained_on(meta: Mapping[str, Any]) -> TrainedOn | None:
    """The cluster and interference a folder's policy was trained in, as the simulator compares them; None where
    the folder records no cluster that builds here (a meta-trained policy's synthetic clusters, a cluster file
    that is gone)."""
    name = trained_cluster(meta)
    cluster = _cluster_gpus(name) if name else None
    if cluster is None:
        return None
    mode = trained_setting(meta, "interference")
    data = trained_setting(meta, "interference_data") if mode not in (None, "none") else None
    return dataclasses.replace(cluster, interference=mode, interference_data=_from_anywhere(data))


def _from_anywhere(spec: str | None) -> str | None:
    """A recorded ``KIND:PATH`` whose relative PATH was read from the checkout that trained it (the repository's
    root, ``../shared/...``) as an absolute path where it lies there: a notebook elsewhere can use it as said."""
    kind, colon, path = (spec or "").rpartition(":")
    if not spec or not colon or Path(path).is_absolute() or Path(path).exists():
        return spec
    there = SHIPPED_POLICIES.parents[1] / path
    return f"{kind}:{there.resolve()}" if there.exists() else spec


@functools.cache
def _cluster_gpus(name: str) -> TrainedOn | None:
    from topology.datacenter import build_cluster

    try:
        return TrainedOn.of(build_cluster(name).view)
    except (OSError, ValueError):
        return None


def load_prefixed(prefix: str, folder: str, *, name: str | None = None, **options: Any) -> Any:
    """The scheduler of a ``PREFIX:DIR`` name (the entry point cluster_sim calls for each prefix)."""
    if prefix not in PREFIXES:
        raise ValueError(f"{prefix}:{folder}: {prefix!r} is not a policy-folder prefix; use {', '.join(PREFIXES)}")
    return load_policy(folder, kind=PREFIXES[prefix], name=name or f"{prefix}:{folder}", **options)


def add_program(folder: str | Path) -> float:
    """Write ``folder/policy.pt2`` (the network as a ``torch.export`` program) from ``folder/policy.pt``, for a
    folder written before folders carried one or for this torch where another release wrote it, and record in its
    metadata the torch that wrote it and the program's largest difference from the network (on inputs of other
    sizes than it was exported with); returns it."""
    import torch

    folder = Path(folder)
    kind, meta = read_metadata(folder)
    if kind.network is None:
        with_net = ", ".join(k for k, v in AGENTS.items() if v.network)
        raise ValueError(
            f"{folder / METADATA}: agent {kind.name!r} has no torch.export program (it keeps no network); kinds that "
            f"have one: {with_net}"
        )
    net, save = reference(kind, "network")(meta)
    net.load_state_dict(load_torchscript(folder / TORCHSCRIPT).state_dict())
    err = save(net.eval(), folder / PROGRAM)
    doc = {**meta, "program_max_abs_diff": err, "program_torch": torch.__version__}  # not the weights' trainer's
    write_atomic(folder / METADATA, json.dumps(doc, indent=2) + "\n")
    return err


UNRECORDED = "unrecorded (written before format_version 2)"


def upgrade_folder(folder: str | Path) -> list[str]:
    """Bring a folder written by an older marlsched to the one schema, in place, its weights untouched: the
    torch.export program where it holds TorchScript alone (:func:`add_program`), and ``format_version`` with the
    ``provenance`` the folder recorded (its command and config where it kept them, under ``trained`` or at the
    top; its torch version; the code version it never recorded said so). Returns what changed (empty: current)."""
    folder = Path(folder)
    kind, meta = read_metadata(folder)
    changed = []
    if kind.network is not None and (folder / TORCHSCRIPT).is_file() and not (folder / PROGRAM).is_file():
        changed.append(f"{PROGRAM}: written (largest difference from the network {add_program(folder):.1e})")
        meta = read_json(folder / METADATA)
    if "provenance" not in meta:
        trained = meta.get("trained") or {}
        doc = {"format": FORMAT, "format_version": FORMAT_VERSION, "agent": kind.name}
        doc |= {k: v for k, v in meta.items() if k not in doc}
        doc["format_version"] = FORMAT_VERSION
        doc["provenance"] = {
            "command": meta.get("command") or trained.get("command"),
            "config": meta.get("config") or trained.get("config"),
            "code_version": UNRECORDED,
            "libraries": {"torch": meta["torch"]} if meta.get("torch") else {},
        }
        write_atomic(folder / METADATA, json.dumps(doc, indent=2) + "\n")
        changed.append(f"{METADATA}: format_version {FORMAT_VERSION}, provenance from what the folder recorded")
    return changed


__all__ = [
    "PREFIXES",
    "UNRECORDED",
    "add_program",
    "load_policy",
    "load_prefixed",
    "policy_kind",
    "read_metadata",
    "trained_cluster",
    "trained_on",
    "trained_setting",
    "upgrade_folder",
]
