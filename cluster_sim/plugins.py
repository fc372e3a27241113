"""Code from outside the project: import a module named by a dotted path or by a ``.py`` file.

Researchers extend marlsched without editing it. A module of theirs registers placements, workload
kinds, interference models or schedulers when it is imported (``marlsched --plugin FILE``, a run
config's ``plugins:``), and ``--policy TARGET:Class`` loads a scheduler class from one
(:mod:`cluster_sim.scheduler_spec`). Every failure is a :class:`PluginError` whose one-line message
names what is wrong and how to fix it.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml


class PluginError(ValueError):
    """A plugin module or class that cannot be used; the message says why and what to do."""


def is_file_target(target: str) -> bool:
    """A path to a ``.py`` file (as opposed to a dotted module name)."""
    return target.endswith(".py") or "/" in target or os.sep in target


def absolute_target(target: str) -> str:
    """``target`` with a file path made absolute (Ray workers may run in another directory)."""
    return os.path.abspath(target) if is_file_target(target) else target


def import_target(target: str) -> ModuleType:
    """The module ``target`` names: ``path/to/file.py``, or ``pkg.module`` importable from ``sys.path``
    or from the current directory (as ``python -m`` would find it)."""
    if is_file_target(target):
        return _import_file(target)
    if not target or not all(part.isidentifier() for part in target.split(".")):
        raise PluginError(f"{target!r} is neither a module name (pkg.module) nor a path to a .py file")
    try:
        return _import_module(target)
    except ModuleNotFoundError as err:
        cwd = os.getcwd()
        if _missing_is_target(err, target) and cwd not in sys.path:
            sys.path.append(cwd)
            try:
                return _import_module(target)
            except ModuleNotFoundError as again:
                err = again
        if _missing_is_target(err, target):
            raise PluginError(
                f"cannot import module {target!r}: no such module on the Python path or under {cwd}; "
                "check the name, or give a file path instead (path/to/file.py)"
            ) from None
        raise PluginError(f"importing module {target!r} failed: {err}; install what it needs") from None


def _missing_is_target(err: ModuleNotFoundError, target: str) -> bool:
    """Whether the missing module is ``target`` itself (or a parent package), not one it imports."""
    return err.name is not None and (target == err.name or target.startswith(err.name + "."))


def _import_module(target: str) -> ModuleType:
    try:
        return importlib.import_module(target)
    except ModuleNotFoundError:
        raise
    except Exception as err:  # a plugin's own error at import time: say whose it is
        raise PluginError(f"importing module {target!r} failed: {type(err).__name__}: {err}") from err


def _import_file(target: str) -> ModuleType:
    path = Path(target).expanduser()
    if not path.is_file():
        where = "" if path.is_absolute() else f" (read from {Path.cwd()}, where the command runs: a config's paths too)"
        raise PluginError(f"{target}: no such file{where}; give the path of a .py file, or an importable module name")
    path = path.resolve()
    # one module per file, under a name that cannot clash with an installed package
    name = f"marlsched_plugin_{path.stem}_{hashlib.sha1(str(path).encode()).hexdigest()[:8]}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise PluginError(f"{target}: Python cannot load this file as a module; give a .py file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look the module up while it executes
    if str(path.parent) not in sys.path:  # its own modules beside it import as they would for `python FILE`
        sys.path.append(str(path.parent))
    try:
        spec.loader.exec_module(module)
    except Exception as err:
        del sys.modules[name]
        raise PluginError(f"importing {target} failed: {type(err).__name__}: {err}") from err
    return module


# every plugin this process imported (file paths absolute), in order: the processes it starts import them again
_LOADED: list[str] = []


def load_plugins(targets: list[str] | tuple[str, ...]) -> list[ModuleType]:
    """Import each plugin module (it registers its extensions on import), in order."""
    modules = [import_target(t) for t in targets]
    _LOADED.extend(a for a in map(absolute_target, targets) if a not in _LOADED)
    return modules


def loaded_plugins() -> list[str]:
    """The plugins this process imported (:func:`load_plugins`), for the workers it starts: a worker process
    (an RLlib EnvRunner, a trainer's pool) knows a plugin's workload kind or scheduler only once it imports it."""
    return list(_LOADED)


def spec_options(spec: str, items: list[str]) -> dict[str, Any]:
    """The ``key=value`` items after a spec's head (values read as YAML: ``2``, ``true``, ``[1, 2]``)."""
    options: dict[str, Any] = {}
    for item in items:
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or not key.isidentifier():
            raise PluginError(f"policy {spec!r}: option {item.strip()!r} is not key=value")
        if key in options:
            raise PluginError(f"policy {spec!r}: option {key} given twice")
        options[key] = yaml.safe_load(value.strip()) if value.strip() else ""
    return options
