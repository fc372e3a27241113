"""MkDocs hooks: pages made at build time from the code and the repository, so that they never go stale.

- ``reference/cli.md``: the ``--help`` of ``marlsched`` and of every subcommand (nested ones included),
  rendered from the argparse parsers of this checkout (``experiments.cli.build_parser``); it replaces the
  repository's short page of that name, which is there so that links to it also work where the Markdown is read.
- API pages: docstrings' Sphinx roles (``:func:``, ``:class:`` ...) dropped from the rendered HTML, the names kept
  as code.
- ``policies/<name>/``: each shipped policy's ``experiments/policies/<name>/README.md`` and its figures.
  A docs page links to them by their place in the repository (``../../experiments/policies/...``, which
  also works when the Markdown is read on its own); such links are pointed at the pages here.
"""

from __future__ import annotations

import argparse
import os
import posixpath
import re
import sys
from pathlib import Path

from mkdocs.structure.files import File, Files

REPO = Path(__file__).resolve().parents[1]
POLICIES = REPO / "experiments" / "policies"
DOCS = REPO / "docs"
CLI_PAGE = "reference/cli.md"
HELP_COLUMNS = "100"  # help is wrapped to the terminal's width; a fixed one keeps the page the same everywhere
LINK = re.compile(r"(!?\[[^\]]*\]\()([^)\s]+)(\))")


def cli_commands(parser: argparse.ArgumentParser, prefix: str = "marlsched") -> list[tuple[str, str]]:
    """``(command, help text)`` for the parser and every subcommand under it, depth first, in order."""
    out = [(prefix, parser.format_help())]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out += cli_commands(sub, f"{prefix} {name}")
    return out


def cli_reference() -> str:
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from experiments.cli import build_parser

    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = HELP_COLUMNS
    try:
        commands = cli_commands(build_parser())
    finally:
        if old is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = old
    lines = [
        "# Command line",
        "",
        "Every command's `--help`, generated from the parsers when this site is built. Options before the",
        "command belong to `marlsched` itself (`marlsched --plugin FILE simulate ...`).",
        "",
    ]
    lines += [f"- [`{name}`](#{_anchor(name)})" for name, _ in commands[1:]]
    for name, text in commands:
        lines += ["", f"## `{name}` {{ #{_anchor(name)} }}", "", "```text", text.rstrip(), "```"]
    return "\n".join(lines) + "\n"


def _anchor(command: str) -> str:
    return command.replace(" ", "-")


def on_files(files: Files, config) -> Files:
    stub = files.get_file_from_path(CLI_PAGE)  # the repository's copy says where the page comes from
    if stub is not None:
        files.remove(stub)
    files.append(File.generated(config, CLI_PAGE, content=cli_reference()))
    for folder in sorted(p for p in POLICIES.iterdir() if (p / "README.md").is_file()):
        for path in sorted(folder.iterdir()):
            if path.name == "README.md" or path.suffix == ".png":
                files.append(File.generated(config, f"policies/{folder.name}/{path.name}", abs_src_path=str(path)))
    return files


def on_page_markdown(markdown: str, page, config, files) -> str:
    """Links written as repository paths point at this site's pages: a shipped policy's files at their copies
    under ``policies/``, and a docs page linked from a policy's README (``../../../docs/guide/...``) at itself."""
    if page.file.abs_src_path is None:
        return markdown
    here = Path(page.file.abs_src_path).parent

    def fix(match: re.Match) -> str:
        target = match.group(2)
        if "://" in target or target.startswith(("#", "/")):
            return match.group(0)
        path, _, fragment = target.partition("#")
        resolved = (here / path).resolve()
        if resolved.is_relative_to(POLICIES):
            site_uri = "policies/" + resolved.relative_to(POLICIES).as_posix()
        elif resolved.is_relative_to(DOCS) and page.file.src_uri.startswith("policies/"):
            site_uri = resolved.relative_to(DOCS).as_posix()
        else:
            return match.group(0)
        new = posixpath.relpath(site_uri, posixpath.dirname(page.file.src_uri) or ".")
        return match.group(1) + new + (f"#{fragment}" if fragment else "") + match.group(3)

    return LINK.sub(fix, markdown)


SPHINX_ROLE = re.compile(r":(?:func|class|meth|mod|data|attr|exc|obj):(<code>)")


def on_page_content(html: str, page, config, files) -> str:
    """Docstrings name code in Sphinx's roles (``:func:`build_simulator```), which mkdocstrings leaves as text:
    the role is dropped and the name stays as code."""
    return SPHINX_ROLE.sub(r"\1", html)
