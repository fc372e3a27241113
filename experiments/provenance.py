"""What a result needs to be recomputed later: the command, the code version, the libraries' versions and the
SHA-256 of every file it read that is not code: a custom scheduler's or plugin's source, each file a trained
policy's folder holds for its loader (``marl:DIR``: weights, metadata, predictor), the workload's trace files and
the folders of measured tables its options name (one digest each).

``marlsched simulate --out`` keeps it in ``simulate.json``, ``marlsched run`` in ``state.json`` per invocation.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from cluster_sim.plugins import is_file_target
from cluster_sim.policy_folders import split_folder_name
from cluster_sim.scheduler_spec import is_custom_spec, parse_custom_spec
from marl.deploy.policy_files import code_version, library_versions, machine

_NOT_READ = (".md", ".png")  # a policy folder's README and plots: no scheduler reads them


def result_provenance(
    command: str,
    schedulers: Iterable[str],
    plugins: Iterable[str] = (),
    workloads: Iterable[str] = (),
    inputs: Iterable[str] = (),
) -> dict[str, Any]:
    """The provenance of a result that ``command`` computed with ``schedulers`` (names, ``FILE:Class`` specs or
    ``PREFIX:DIR`` policy folders; a file an option names, ``predictor=FILE``, is hashed), ``plugins``,
    ``workloads`` (specs; the files they name are hashed) and other ``inputs`` it read (an interference model or
    its measurements: a path or ``KIND:PATH``)."""
    schedulers = list(schedulers)
    code = [parse_custom_spec(s)[0] for s in schedulers if is_custom_spec(s)] + list(plugins)
    files = [f for f in code if is_file_target(f)]  # not a module name
    for name in schedulers:
        if split := split_folder_name(name):
            folder = Path(split[1].split(",")[0])
            read = [p for p in folder.iterdir() if p.is_file() and p.suffix not in _NOT_READ] if folder.is_dir() else []
            files += sorted(map(str, read))
    for spec in [*workloads, *schedulers, *inputs]:
        files += spec_files(spec)
    return {
        "command": command,
        "code_version": code_version(),
        "libraries": library_versions(),
        "machine": machine(),
        "files": {_key(Path(f)): _sha256(Path(f)) for f in dict.fromkeys(files)},
    }


def spec_files(spec: str) -> list[str]:
    """The files a spec ``KIND:PATH[,key=value...]`` (or ``PATH``, ``NAME,key=value...``) names: its path and any
    option that is a file or a folder (``profiles=DIR``, ``apps=DIR``: measured tables, hashed as one set)."""
    _, colon, rest = spec.partition(":")
    path, *items = (rest if colon else spec).split(",")
    named = [path] + [item.partition("=")[2] for item in items]
    return [p for p in named if p and (Path(p).is_file() or (Path(p).is_dir() and p != path))]


def _key(path: Path) -> str:
    """A file's absolute path; a folder's with a trailing ``/`` (its digest covers every file under it)."""
    return str(path.resolve()) + ("/" if path.is_dir() else "")


def _sha256(path: Path) -> str:
    try:
        if path.is_dir():  # each file's path under it and digest, in sorted order: a change anywhere shows
            digest = hashlib.sha256()
            for f in sorted(p for p in path.rglob("*") if p.is_file()):
                digest.update(f"{f.relative_to(path).as_posix()}\0{_sha256(f)}\n".encode())
            return digest.hexdigest()
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as err:
        return f"unreadable: {err.strerror}"
