"""The line of every key in a YAML text, by key path: what names the line of a bad setting in an error.

A path is a tuple of keys; a list item's path element is its index as a string (``mix[0].gpu_type`` is
``("mix", "0", "gpu_type")``), as the config checkers name list items. Cluster specs (this package) and the
training and run configs above it share this one reader.
"""

from __future__ import annotations

import re

import yaml


def yaml_key_lines(text: str) -> dict[tuple[str, ...], int]:
    """1-based line of every mapping key and list item, by path; empty where the text is not YAML."""
    lines: dict[tuple[str, ...], int] = {}
    try:
        root = yaml.compose(text)
    except yaml.YAMLError:
        return lines

    def walk(node: yaml.Node | None, path: tuple[str, ...]) -> None:
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                sub = (*path, str(key.value))
                lines[sub] = key.start_mark.line + 1
                walk(value, sub)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                sub = (*path, str(i))
                lines[sub] = item.start_mark.line + 1
                walk(item, sub)

    walk(root, ())
    return lines


def line_of(lines: dict[tuple[str, ...], int], path: tuple[str, ...]) -> int | None:
    """The line of ``path``, else of its closest enclosing key (a missing key: where it belongs)."""
    return next((lines[path[:n]] for n in range(len(path), 0, -1) if path[:n] in lines), None)


def dotted_path(text: str) -> tuple[str, ...]:
    """``mix[0].gpu_type`` as ``("mix", "0", "gpu_type")``."""
    return tuple(re.findall(r"[^.\[\]]+", text))
