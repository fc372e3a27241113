"""Run every example of the README and the documentation in order, as a new user pastes them after setting up.

Sources, in this order: ``README.md``, the pages of the documentation site in the order of its navigation
(``mkdocs.yml``), then the shipped policies' ``experiments/policies/<name>/README.md`` (pages of the site
too). Every ``bash`` block is an example, except the README's first three: the setup-and-run command, the
test command and the activation. A block whose line before is ``<!-- fast -->`` is fast (seconds to about a
minute on 2 cores): ``--fast`` runs only those, and the tests do (``tests/test_docs.py``). A block after
``<!-- setup -->`` is setup, shown but not run.

Each command runs in a fresh ``bash`` in the repository root with the project's ``.venv`` active, in the order
printed, so a command that reads what an earlier one wrote (``results/...``) finds it. Commands that need a
multi-machine Ray cluster (the ``HEAD_IP`` placeholder) are listed as skipped with the reason. The first
failure stops the run and shows the tail of that command's log.

    python experiments/readme_examples.py              # all: several hours on 2 cores (the trainings)
    python experiments/readme_examples.py --fast       # the fast ones, about two minutes
    python experiments/readme_examples.py --list       # what would run, numbered, with each source
    python experiments/readme_examples.py --source docs/guide/simulate.md   # one page
    python experiments/readme_examples.py --from 9     # resume at the 9th command
    python experiments/readme_examples.py --fast --workdir /tmp/ex   # in a scratch tree, the checkout untouched
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SETUP_BLOCKS = 3  # the README's setup-and-run, tests, activation
CLUSTER_ONLY = "HEAD_IP"
FAST, SETUP = "fast", "setup"
BLOCK = re.compile(r"(?:<!--\s*(\w+)\s*-->[ \t]*\n(?:[ \t]*\n)?)?```bash\n(.*?)```", re.S)


@dataclass(frozen=True)
class Example:
    """One command of a page, with its page (relative to the repository) and its block's marker."""

    command: str
    source: str
    mark: str | None = None

    @property
    def fast(self) -> bool:
        return self.mark == FAST


def _lines(block: str) -> list[str]:
    """A block's commands, one per line: continuations joined, ``[optional]`` parts and trailing comments
    (two spaces, then ``#``) dropped, the README's ``.venv/bin/`` prefix dropped."""
    out = []
    for line in re.sub(r"\\\n\s*", " ", block).splitlines():
        line = re.sub(r"\[[^\]]*\]", "", line.split("  #")[0]).strip()
        if line and not line.startswith("#"):
            out.append(line.removeprefix(".venv/bin/"))
    return out


def page_examples(page: Path, setup_blocks: int | None = None) -> list[Example]:
    """Every command of ``page``'s ``bash`` blocks in order. ``setup_blocks``: how many leading blocks are
    setup (default: the README's three for a file named README.md at the repository root, else none)."""
    page = Path(page)
    if setup_blocks is None:
        setup_blocks = SETUP_BLOCKS if page.resolve() == (REPO / "README.md").resolve() else 0
    try:
        source = str(page.resolve().relative_to(REPO))
    except ValueError:
        source = str(page)
    out = []
    for i, match in enumerate(BLOCK.finditer(page.read_text())):
        mark = SETUP if i < setup_blocks else match.group(1)
        out += [Example(line, source, mark) for line in _lines(match.group(2))]
    return out


def readme_commands(readme: Path = REPO / "README.md") -> list[str]:
    """The commands of a README's examples (after its three setup blocks), in the order printed."""
    return [e.command for e in page_examples(readme, SETUP_BLOCKS) if e.mark != SETUP]


def _nav_pages(nav) -> list[str]:
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, dict):
        return [p for value in nav.values() for p in _nav_pages(value)]
    if isinstance(nav, list):
        return [p for item in nav for p in _nav_pages(item)]
    return []


def doc_sources(repo: Path = REPO) -> list[Path]:
    """README.md, then every page of the site in navigation order that is a file of the repository (the
    shipped policies' READMEs included; pages generated at build time have no commands)."""
    import yaml

    nav = yaml.safe_load((repo / "mkdocs.yml").read_text())["nav"]
    out = [repo / "README.md"]
    for page in _nav_pages(nav):
        path = repo / "experiments" / page if page.startswith("policies/") else repo / "docs" / page
        if path.is_file() and path not in out:
            out.append(path)
    return out


def all_examples(sources: list[Path] | None = None) -> list[Example]:
    """The examples of ``sources`` (default: :func:`doc_sources`), setup blocks left out, in order."""
    return [e for page in sources or doc_sources() for e in page_examples(page) if e.mark != SETUP]


def skip_reason(command: str) -> str | None:
    """Why a command cannot run on one machine, or None."""
    if CLUSTER_ONLY in command or command.startswith("ray "):
        return f"needs a multi-machine Ray cluster ({CLUSTER_ONLY} is its head node's address)"
    return None


def scratch_tree(workdir: Path) -> Path:
    """A tree in ``workdir`` laid out as the checkout, for commands that must not write into it: the
    repository's entries linked (``results/`` left out, so it starts empty) and ``../shared`` beside it.
    Returns the root to run in. (A command writing into a linked folder still writes into the checkout.)"""
    root = workdir / REPO.name
    root.mkdir(parents=True, exist_ok=True)
    for entry in REPO.iterdir():
        link = root / entry.name
        if entry.name not in ("results", ".git") and not link.exists():
            link.symlink_to(entry)
    shared = REPO.parent / "shared"
    if shared.is_dir() and not (workdir / "shared").exists():
        (workdir / "shared").symlink_to(shared)
    return root


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


def _without_from(argv: list[str]) -> list[str]:
    out, skip = [], False
    for a in argv:
        if skip or a.startswith("--from="):
            skip = False
            continue
        skip = a == "--from"
        if not skip:
            out.append(a)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true", help="print the commands and exit")
    parser.add_argument("--fast", action="store_true", help="only the blocks marked <!-- fast -->")
    parser.add_argument("--source", type=Path, action="append", dest="sources", metavar="PAGE",
                        help="only this page (repeatable; default: README.md and every page of the site)")  # fmt: skip
    parser.add_argument("--readme", type=Path, action="append", default=[], help=argparse.SUPPRESS)  # 3 setup blocks
    parser.add_argument("--from", dest="start", type=int, default=1, help="first command to run (1-based)")
    parser.add_argument("--workdir", type=Path, help="run in a scratch tree here (see scratch_tree), not the checkout")
    parser.add_argument("--logs", type=Path, help="one log per command (default: results/readme_examples)")
    args = parser.parse_args(argv)

    if args.sources or args.readme:
        examples = [e for p in args.readme for e in page_examples(p, SETUP_BLOCKS) if e.mark != SETUP]
        examples += all_examples([p.resolve() for p in args.sources]) if args.sources else []
    else:
        examples = all_examples()
    if args.fast:
        examples = [e for e in examples if e.fast]
    if args.list:
        for i, e in enumerate(examples, 1):
            reason = skip_reason(e.command)
            tag = ", fast" if e.fast else ""
            print(f"{i:3d}  {e.command}\n     ({e.source}{tag})" + (f" skipped: {reason}" if reason else ""))
        return 0
    if not examples:
        parser.error("no commands in the pages given")
    if not 1 <= args.start <= len(examples):
        parser.error(f"--from {args.start}: the pages have commands 1..{len(examples)}")
    env = _venv_env()
    root = scratch_tree(args.workdir.resolve()) if args.workdir else REPO
    logs = args.logs or root / "results" / "readme_examples"
    logs.mkdir(parents=True, exist_ok=True)
    total = time.perf_counter()
    for i, e in enumerate(examples[args.start - 1 :], args.start):
        reason = skip_reason(e.command)
        if reason:
            print(f"[{i}/{len(examples)}] skipped: {e.command}\n    {reason}", flush=True)
            continue
        log = logs / f"{i:02d}.log"
        print(f"[{i}/{len(examples)}] {e.command}  ({e.source})", flush=True)
        start = time.perf_counter()
        with log.open("w") as out:
            proc = subprocess.run(["bash", "-c", e.command], cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT)
        rc = proc.returncode
        took = time.perf_counter() - start
        shown = log.relative_to(root) if log.is_relative_to(root) else log
        if rc != 0:
            tail = log.read_text().splitlines()[-20:]
            print(f"    FAILED (exit {rc}) after {took:.0f} s; the end of {log}:", *tail, sep="\n    ", file=sys.stderr)
            again = _without_from(sys.argv[1:] if argv is None else argv)
            print(f"    resume with: python experiments/readme_examples.py {' '.join([*again, '--from', str(i)])}",
                  file=sys.stderr)  # fmt: skip
            return 1
        print(f"    ok in {took:.0f} s (log {shown})", flush=True)
    print(f"all {len(examples)} examples ran in {time.perf_counter() - total:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
