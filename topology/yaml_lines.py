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


def repeated_key(text: str) -> tuple[tuple[str, ...], int, int] | None:
    """The first key given twice in one mapping (its path, first line, second line), or None. YAML keeps the
    last silently, so a setting written twice would run with a value its reader may not have meant."""
    try:
        root = yaml.compose(text)
    except yaml.YAMLError:
        return None

    def walk(node: yaml.Node | None, path: tuple[str, ...]) -> tuple[tuple[str, ...], int, int] | None:
        children: list[tuple[tuple[str, ...], yaml.Node]] = []
        if isinstance(node, yaml.MappingNode):
            seen: dict[str, int] = {}
            for key, value in node.value:
                name, line = str(key.value), key.start_mark.line + 1
                if name in seen:
                    return (*path, name), seen[name], line
                seen[name] = line
                children.append(((*path, name), value))
        elif isinstance(node, yaml.SequenceNode):
            children = [((*path, str(i)), item) for i, item in enumerate(node.value)]
        return next((hit for sub, child in children if (hit := walk(child, sub)) is not None), None)

    return walk(root, ())


def yaml_problem(err: yaml.YAMLError) -> tuple[int | None, str]:
    """(line, what) of a YAML syntax error, ``what`` as ``not valid YAML: PROBLEM (column C)``: PyYAML's own text
    names a ``<unicode string>`` where the reader's message names the file."""
    mark = getattr(err, "problem_mark", None)
    problem = getattr(err, "problem", None) or str(err).splitlines()[0]
    context = getattr(err, "context", None)
    column = f", column {mark.column + 1}" if mark is not None else ""
    return (mark.line + 1 if mark is not None else None), f"not valid YAML: {problem}{column}" + (
        f" ({context})" if context else ""
    )


def line_of(lines: dict[tuple[str, ...], int], path: tuple[str, ...]) -> int | None:
    """The line of ``path``, else of its closest enclosing key (a missing key: where it belongs)."""
    return next((lines[path[:n]] for n in range(len(path), 0, -1) if path[:n] in lines), None)


def dotted_path(text: str) -> tuple[str, ...]:
    """``mix[0].gpu_type`` as ``("mix", "0", "gpu_type")``."""
    return tuple(re.findall(r"[^.\[\]]+", text))
