"""Run every README example in order, as a new user pastes them after the two setup commands.

The README's first three ``bash`` blocks are the setup-and-run command, the test command and the
activation; every later block is an example. Each command runs in a fresh ``bash`` in the repository root
with the project's ``.venv`` active, in the order printed, so a command that reads what an earlier one
wrote (``results/...``) finds it. Commands that need a multi-machine Ray cluster (the ``HEAD_IP``
placeholder) are listed as skipped with the reason. The first failure stops the run and shows the tail of
that command's log.

    python experiments/readme_examples.py              # all, about two hours on 2 cores (three trainings)
    python experiments/readme_examples.py --list       # what would run
    python experiments/readme_examples.py --from 9     # resume at the 9th command
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SETUP_BLOCKS = 3  # setup-and-run, tests, activation
CLUSTER_ONLY = "HEAD_IP"


def readme_commands(readme: Path = REPO / "README.md") -> list[str]:
    """Every shell command of the README's examples, one per line (continuations joined, ``[optional]``
    parts and trailing comments dropped), in the order printed."""
    blocks = re.findall(r"```bash\n(.*?)```", readme.read_text(), re.S)
    out = []
    for block in blocks[SETUP_BLOCKS:]:
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            line = re.sub(r"\[[^\]]*\]", "", line.split("  #")[0]).strip()
            if line and not line.startswith("#"):
                out.append(line.removeprefix(".venv/bin/"))
    return out


def skip_reason(command: str) -> str | None:
    """Why a command cannot run on one machine, or None."""
    if CLUSTER_ONLY in command or command.startswith("ray "):
        return f"needs a multi-machine Ray cluster ({CLUSTER_ONLY} is its head node's address)"
    return None


def _venv_env() -> dict[str, str]:
    """The environment of a shell after ``. .venv/bin/activate``: the README's ``.venv``, else the environment
    this runner's Python belongs to, where the project is installed there (another venv, a conda env)."""
    venv = REPO / ".venv"
    if not (venv / "bin" / "marlsched").exists():
        venv = Path(sys.prefix)
    if not (venv / "bin" / "marlsched").exists():
        raise SystemExit(f"{REPO / '.venv'}: no installed project; run the README's first command first")
    env = dict(os.environ, VIRTUAL_ENV=str(venv), PATH=f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")
    env.pop("PYTHONHOME", None)
    return env


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true", help="print the commands and exit")
    parser.add_argument("--from", dest="start", type=int, default=1, help="first command to run (1-based)")
    parser.add_argument("--readme", type=Path, default=REPO / "README.md", help=argparse.SUPPRESS)
    parser.add_argument("--logs", type=Path, default=REPO / "results" / "readme_examples", help="one log per command")
    args = parser.parse_args(argv)

    commands = readme_commands(args.readme)
    if args.list:
        for i, command in enumerate(commands, 1):
            reason = skip_reason(command)
            print(f"{i:3d}  {command}" + (f"\n     (skipped: {reason})" if reason else ""))
        return 0
    if not 1 <= args.start <= len(commands):
        parser.error(f"--from {args.start}: the README has commands 1..{len(commands)}")
    env = _venv_env()
    args.logs.mkdir(parents=True, exist_ok=True)
    total = time.perf_counter()
    for i, command in enumerate(commands[args.start - 1 :], args.start):
        reason = skip_reason(command)
        if reason:
            print(f"[{i}/{len(commands)}] skipped: {command}\n    {reason}", flush=True)
            continue
        log = args.logs / f"{i:02d}.log"
        print(f"[{i}/{len(commands)}] {command}", flush=True)
        start = time.perf_counter()
        with log.open("w") as out:
            proc = subprocess.run(["bash", "-c", command], cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
        rc = proc.returncode
        took = time.perf_counter() - start
        if rc != 0:
            tail = log.read_text().splitlines()[-20:]
            print(f"    FAILED (exit {rc}) after {took:.0f} s; the end of {log}:", *tail, sep="\n    ", file=sys.stderr)
            print(f"    resume with: python experiments/readme_examples.py --from {i}", file=sys.stderr)
            return 1
        print(f"    ok in {took:.0f} s (log {log.relative_to(REPO) if log.is_relative_to(REPO) else log})", flush=True)
    print(f"all README examples ran in {time.perf_counter() - total:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
