"""What a result needs to be recomputed later: the command, the code version, the libraries' versions and the
SHA-256 of every file it read that is not code: a custom scheduler's or plugin's source, each file a trained
policy's folder holds for its loader (``marl:DIR``: weights, metadata, predictor) and the workload's trace files.

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
from marl.deploy.policy_files import code_version, library_versions

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
        "files": {str(Path(f).resolve()): _sha256(Path(f)) for f in dict.fromkeys(files)},
    }


def spec_files(spec: str) -> list[str]:
    """The files a spec ``KIND:PATH[,key=value...]`` (or ``PATH``, ``NAME,key=value...``) names: its path and any
    option that is a file (folders of profiles are left out: their files are measured tables read as a whole
    set)."""
    _, colon, rest = spec.partition(":")
    path, *items = (rest if colon else spec).split(",")
    named = [path] + [item.partition("=")[2] for item in items]
    return [p for p in named if p and Path(p).is_file()]


def _sha256(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as err:
        return f"unreadable: {err.strerror}"
