"""The module commands older policy folders record (``python -m marl.training.priority_dagger --seed 2 --out
DIR``): these recipes now train through the one command, and the old command says which instead of doing
nothing."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Sequence
from typing import NoReturn


def one_command(config: str, argv: Sequence[str]) -> str:
    """``marlsched train`` for ``config`` with the old command's flags: ``--out DIR`` kept, ``--help`` dropped,
    every other ``--KEY VALUE`` (or ``--KEY=VALUE``) as ``--set KEY=VALUE`` (the flags were the config's keys)."""
    out, sets, args = "DIR", [], list(argv)
    while args:
        arg = args.pop(0)
        key, eq, value = arg.removeprefix("--").partition("=")
        if not eq and args and not args[0].startswith("--"):
            value = args.pop(0)
        key = key.replace("-", "_")
        if key in ("h", "help"):  # asked what the command takes: the one command's own help answers
            continue
        if key == "out":
            out = value
        elif arg.startswith("--"):
            sets.append(f"--set {shlex.quote(f'{key}={value}' if value or eq else f'{key}=true')}")
    return " ".join(["marlsched train --config", config, *sets, "--out", shlex.quote(out)])


def retired_command(module: str, config: str) -> NoReturn:
    """Exit with the one command that trains ``module``'s recipe from ``config``, the old flags carried over."""
    raise SystemExit(
        f"python -m {module}: this module command is retired; its recipe trains through the one command (the "
        f"config holds the settings the old flags gave):\n  {one_command(config, sys.argv[1:])}"
    )
