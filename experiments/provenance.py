"""What a result needs to be recomputed later: the command, the code version, the libraries' versions and the
SHA-256 of every file a custom scheduler or plugin came from (a policy folder records its own: ``marl.deploy``).

``marlsched simulate --out`` keeps it in ``simulate.json``, ``marlsched run`` in ``state.json`` per invocation.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from cluster_sim.plugins import is_file_target
from cluster_sim.scheduler_spec import is_custom_spec, parse_custom_spec
from marl.deploy.policy_files import code_version, library_versions


def result_provenance(command: str, schedulers: Iterable[str], plugins: Iterable[str] = ()) -> dict[str, Any]:
    """The provenance of a result that ``command`` computed with ``schedulers`` (names or ``FILE:Class`` specs)
    and ``plugins``."""
    files = [parse_custom_spec(s)[0] for s in schedulers if is_custom_spec(s)] + list(plugins)
    return {
        "command": command,
        "code_version": code_version(),
        "libraries": library_versions(),
        "files": {str(Path(f).resolve()): _sha256(Path(f)) for f in dict.fromkeys(files) if is_file_target(f)},
    }


def _sha256(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as err:
        return f"unreadable: {err.strerror}"
