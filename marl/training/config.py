"""Config files checked up front: a typo fails in a second with the file, the key's dotted path, its line
and the allowed keys or values, instead of after minutes of training.

Every section is a frozen dataclass whose fields are the allowed keys; :class:`ConfigChecker` validates
plain data (as loaded from YAML) into it. Used by the experiment configs (``experiments.run_config``) and
the published learned schedulers' training configs (``marl.baselines``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

import yaml

from cluster_sim.traces.periods import TraceTime, trace_seconds
from topology.yaml_lines import line_of, repeated_key, yaml_key_lines, yaml_problem


class TrainConfigError(ValueError):
    """A config that cannot be used; the message names the file, key path and line, and the fix."""


def _yaml_key(name: str) -> str:
    return "lambda" if name == "lambda_" else name


# other libraries' names of a setting, where they are too unlike ours for a close match to find it
SYNONYMS: dict[str, tuple[str, ...]] = {
    "learning_rate": ("lr",), "epochs": ("num_epochs",), "batch_size": ("train_batch_size", "batch"),
    "clip": ("clip_param",), "entropy": ("entropy_coeff",), "discount": ("gamma",),
}  # fmt: skip


class ConfigChecker:
    """Collects config errors, each named by file, line, key path and the allowed values (shared with
    ``experiments.run_config``)."""

    def __init__(
        self, source: str, lines: dict[tuple[str, ...], int], given: dict[tuple[str, ...], str] | None = None
    ) -> None:
        # given: the key paths a command line set (``--set KEY=VALUE``), named by that option instead of a line
        self.source, self.lines, self.given = source, lines, given or {}
        self._trace: str | None = None  # the trace of the section being checked

    def fail(self, path: tuple[str, ...], message: str) -> TrainConfigError:
        where = ".".join(path) if path else "<top level>"
        # a --set path at, under or above the key in question (``--set enx.x=1`` fails at ``enx``)
        given = next((text for at, text in self.given.items() if path and path[: len(at)] == at[: len(path)]), None)
        line = line_of(self.lines, path)
        loc = f"{self.source} (--set {given})" if given else f"{self.source}, line {line}" if line else self.source
        return TrainConfigError(f"{loc}: {where}: {message}")

    def unknown(self, path: tuple[str, ...], allowed: Sequence[str]) -> TrainConfigError:
        """The error for the unknown key ending ``path``: the allowed keys there, the closest one first."""
        import difflib

        close = difflib.get_close_matches(path[-1], list(allowed), n=1, cutoff=0.6)
        close = close or [a for a in SYNONYMS.get(path[-1], ()) if a in allowed]
        guess = f"did you mean {close[0]!r}? " if close else ""
        return self.fail(path, f"unknown key; {guess}allowed keys here: {', '.join(allowed)}")

    def check_type(self, path: tuple[str, ...], value: Any, hint: Any) -> Any:
        origin = typing.get_origin(hint)
        if origin in (typing.Union, types.UnionType):
            options = typing.get_args(hint)
            if value is None and type(None) in options:
                return None
            inner = [o for o in options if o is not type(None)]
            errors = []
            for opt in inner:
                try:
                    return self.check_type(path, value, opt)
                except TrainConfigError as err:
                    errors.append(err)
            raise errors[0]
        if origin is list:
            (item,) = typing.get_args(hint)
            if not isinstance(value, list):
                one = "" if isinstance(value, Mapping) else f"; one item is a list too: [{json.dumps(value)}]"
                raise self.fail(path, f"expected a list, got {value!r}{one}")
            return [self.check_type((*path, str(i)), v, item) for i, v in enumerate(value)]
        if origin is dict:
            if not isinstance(value, Mapping):
                raise self.fail(path, f"expected a mapping of keys to values, got {value!r}")
            return dict(value)
        if hint is bool:
            if not isinstance(value, bool):
                raise self.fail(path, f"expected true or false, got {value!r}")
            return value
        if hint is int:
            if isinstance(value, bool) or not isinstance(value, int):
                raise self.fail(path, f"expected an integer, got {value!r}")
            return value
        if hint is TraceTime:
            try:
                return trace_seconds(value, self._trace)
            except ValueError as err:
                raise self.fail(path, str(err)) from None
        if hint is float:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise self.fail(path, f"expected a finite number, got {value!r}")
            return float(value)
        if hint is str:
            if not isinstance(value, str):
                raise self.fail(path, f"expected a string, got {value!r}")
            return value
        raise TypeError(f"unsupported config field type {hint!r}")

    def section(self, cls: type, data: Any, path: tuple[str, ...]) -> Any:
        if data is None:
            data = {}
        if not isinstance(data, Mapping):
            raise self.fail(path, f"expected a mapping with keys {self.allowed(cls)}, got {data!r}")
        hints = typing.get_type_hints(cls)
        by_key = {_yaml_key(f.name): f for f in fields(cls) if f.name != "source"}
        unknown = [k for k in data if k not in by_key]
        if unknown:
            raise self.unknown((*path, str(unknown[0])), list(by_key))
        kwargs = {}
        # a date (TraceTime) counts from the first arrival of the section's trace, as a window's start=DATE does
        trace = data.get("trace", getattr(cls, "trace", None))
        self._trace = trace if isinstance(trace, str) else None
        for key, value in data.items():
            f = by_key[key]
            hint = hints[f.name]
            sub = (*path, key)
            if dataclasses.is_dataclass(hint):
                kwargs[f.name] = self.section(hint, value, sub)
            else:
                kwargs[f.name] = self.check_type(sub, value, hint)
        return cls(**kwargs)

    @staticmethod
    def allowed(cls: type) -> str:
        return ", ".join(_yaml_key(f.name) for f in fields(cls) if f.name != "source")


def read_yaml_config(path: str | Path, what: str, error: type[Exception]) -> tuple[Any, dict[tuple[str, ...], int]]:
    """(parsed YAML, line of every key path) of a config file; a missing file or bad YAML names the file."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{what} {path} does not exist")
    text = path.read_text()
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        line, what = yaml_problem(err)
        raise error(f"{path}{f', line {line}' if line else ''}: {what}") from None
    except ValueError as err:  # a value YAML reads as a date but is none (2017-13-15): no line from PyYAML
        bad = next((f", line {i}: {ln.strip()}" for i, ln in enumerate(text.splitlines(), 1) if _bad_date(ln)), "")
        raise error(f"{path}{bad}: not a valid date ({err}); write YYYY-MM-DD") from None
    if (twice := repeated_key(text)) is not None:
        key, first, second = twice
        raise error(f"{path}, line {second}: {'.'.join(key)}: given twice (also at line {first}); keep one")
    return data, yaml_key_lines(text)


def set_keys(data: Any, assignments: Sequence[str], source: str) -> tuple[Any, dict[tuple[str, ...], str]]:
    """``data`` with each ``KEY=VALUE`` of a command line's ``--set`` applied (``KEY`` a dotted path,
    ``ppo.lr``; ``VALUE`` read as YAML: ``0``, ``1e-3``, ``[a, b]``, ``null``), and the paths set, by their
    assignment, for :class:`ConfigChecker` to name. The settings are then checked as the file's are."""
    data = {} if data is None else data
    given: dict[tuple[str, ...], str] = {}
    for text in assignments:
        key, eq, raw = text.partition("=")
        path = tuple(key.strip().split("."))
        if not eq or not all(path):
            raise TrainConfigError(f"--set {text}: write KEY=VALUE, KEY a dotted path of {source} (e.g. ppo.lr=1e-3)")
        try:
            value = yaml.safe_load(raw)
        except yaml.YAMLError as err:
            raise TrainConfigError(f"--set {text}: the value is not valid YAML ({err})") from None
        except ValueError as err:  # YAML reads 2017-13-24 as a date, and the calendar refuses it
            raise TrainConfigError(f"--set {text}: {raw.strip()!r} is not a date ({err}); write YYYY-MM-DD") from None
        if isinstance(value, str):  # YAML 1.1 reads 1e-3 as a string; on a command line it is a number
            with contextlib.suppress(ValueError):
                value = float(value)
        if not isinstance(data, dict):
            raise TrainConfigError(f"--set {text}: {source} is not a mapping of settings")
        node = data
        for depth, part in enumerate(path[:-1]):
            if node.get(part) is None:  # absent or empty (``select:``): a new section
                node[part] = {}
            node = node[part]
            if not isinstance(node, dict):
                raise TrainConfigError(f"--set {text}: {'.'.join(path[: depth + 1])} in {source} is not a section")
        node[path[-1]] = value
        given[path] = text
    return data, given


def _bad_date(line: str) -> bool:
    """Whether ``line``'s value is shaped like a YAML date but is not one."""
    import datetime as dt
    import re

    m = re.search(r":\s*(\d{4}-\d{1,2}-\d{1,2})\b", line)
    if not m:
        return False
    try:
        dt.date(*map(int, m.group(1).split("-")))
    except ValueError:
        return True
    return False
