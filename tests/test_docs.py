"""The documentation: the site builds with warnings as errors and its command-line reference lists every
command; the README stays short, starts with the two commands and links only to what exists; the fast
examples of the README and the docs pages run, in order, as a user pastes them."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _commands(parser: argparse.ArgumentParser, prefix: str = "marlsched") -> list[str]:
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out += [f"{prefix} {name}", *_commands(sub, f"{prefix} {name}")]
    return out


def test_site_builds_strict_and_its_cli_reference_lists_every_command(tmp_path: Path) -> None:
    from experiments.cli import build_parser

    site = tmp_path / "site"
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    # no --quiet: with it, mkdocs 1.6 drops the warnings that --strict would abort on (a broken link passes)
    cmd = [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    cli = (site / "reference" / "cli" / "index.html").read_text()
    commands = _commands(build_parser())
    assert {"marlsched simulate", "marlsched run", "marlsched train", "marlsched interference predict"} <= set(commands)
    for command in commands:
        assert f'id="{command.replace(" ", "-")}"' in cli, f"{command}: no section in the CLI reference"
        assert f"usage: {command} " in cli, f"{command}: its --help is not in the CLI reference"
    # the generated pages: the API from the docstrings, every shipped policy's README with its figures
    api = (site / "api" / "cluster_sim" / "index.html").read_text()
    assert "build_simulator" in api and ":func:<code>" not in api  # Sphinx roles dropped, names kept as code
    for folder in (REPO / "experiments" / "policies").iterdir():
        if (folder / "README.md").is_file():
            assert (site / "policies" / folder.name / "index.html").is_file(), folder.name
    assert (site / "policies" / "sia-philly" / "report.png").is_file()


def test_readme_is_short_starts_with_the_two_commands_and_links_what_exists() -> None:
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= 300
    blocks = re.findall(r"```bash\n(.*?)```", text, re.S)
    run, tests = (block.strip().rsplit(" && ", 1) for block in blocks[:2])
    assert run[0] == tests[0] and run[0].startswith("python3 -m venv .venv && ") and '-e ".[dev]"' in run[0]
    assert run[1] == ".venv/bin/marlsched run experiments/configs/quickstart.yaml --out results/quickstart"
    assert tests[1] == ".venv/bin/python -m pytest -q"  # .ci/run reads this line, the second command line
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
        if "://" not in target:
            assert (REPO / target).exists(), f"README links to {target}, which does not exist"


def test_every_page_with_commands_is_read_by_the_runner() -> None:
    """Each Markdown page of docs/ is in the site's navigation (so the runner reads it), and each shipped
    policy's README is too."""
    from experiments.readme_examples import doc_sources

    sources = set(doc_sources())
    for page in (REPO / "docs").rglob("*.md"):
        assert page in sources, f"{page.relative_to(REPO)} is not in mkdocs.yml's nav"
    for readme in (REPO / "experiments" / "policies").glob("*/README.md"):
        assert readme in sources, f"{readme.relative_to(REPO)} is not in mkdocs.yml's nav"


@pytest.mark.slow
def test_fast_examples_of_the_readme_and_the_docs_run_in_order(tmp_path: Path, traces_dir: Path) -> None:
    """Every block marked fast, in the order a reader meets them, in a scratch tree (the checkout's results/
    untouched; the traces as ../shared beside it); the first failure shows its log."""
    from experiments.readme_examples import all_examples, skip_reason

    fast = [e for e in all_examples() if e.fast]
    assert len({e.source for e in fast}) >= 5 and any(e.source == "README.md" for e in fast)
    runner = [sys.executable, "experiments/readme_examples.py", "--fast", "--workdir", str(tmp_path)]
    proc = subprocess.run(runner, cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.count("    ok in ") == sum(not skip_reason(e.command) for e in fast), proc.stdout
