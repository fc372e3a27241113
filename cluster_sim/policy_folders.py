"""Schedulers saved as folders (trained policies), named ``PREFIX:DIR`` wherever a scheduler name goes.

cluster_sim never imports the packages that write such folders: each announces its prefixes through the
``marlsched.policy_folders`` entry-point group (marlsched's own, ``marl`` among them, are in pyproject.toml),
whose loaders take ``(prefix, folder, *, name, **options)``; a plugin may also add one at run time with
:func:`register_folder_prefix`.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from importlib.metadata import entry_points
from typing import Any

GROUP = "marlsched.policy_folders"
FolderLoader = Callable[..., Any]
_REGISTERED: dict[str, FolderLoader] = {}


@cache
def _installed() -> dict[str, Any]:
    return {ep.name: ep for ep in entry_points(group=GROUP)}


def folder_prefixes() -> list[str]:
    """Every prefix that names a policy folder (installed entry points and registered ones)."""
    return sorted({*_installed(), *_REGISTERED})


def register_folder_prefix(prefix: str, loader: FolderLoader, *, replace: bool = False) -> None:
    """Let ``PREFIX:DIR`` name a folder that ``loader(prefix, folder, *, name, **options)`` turns into a scheduler."""
    if not prefix.isidentifier():
        raise ValueError(f"policy-folder prefix {prefix!r} must be a plain word")
    if prefix in folder_prefixes() and not replace:
        raise ValueError(f"policy-folder prefix {prefix!r} is already registered; pass replace=True to override it")
    _REGISTERED[prefix] = loader


def split_folder_name(name: str) -> tuple[str, str] | None:
    """(prefix, folder) of a ``PREFIX:DIR`` scheduler name, None for any other name."""
    prefix, colon, folder = name.partition(":")
    return (prefix, folder) if colon and prefix in folder_prefixes() else None


def load_folder_policy(name: str, /, **options: Any) -> Any:
    """The scheduler saved in the folder a ``PREFIX:DIR[,key=value...]`` name gives (``marl:DIR,num_agents=8``:
    options on the command line, as a scheduler class of one's own takes them); the name's options and
    ``options`` go to the folder's loader (``name=``: the scheduler's own name, the spec by default)."""
    from cluster_sim.plugins import PluginError, spec_options

    split = split_folder_name(name)
    if split is None:
        installed = ", ".join(folder_prefixes()) or "none installed"
        raise ValueError(f"{name!r} names no policy folder; prefixes: {installed}")
    prefix, rest = split
    folder, *items = rest.split(",")
    given = spec_options(name, items)
    twice = sorted(set(given) & set(options))
    if twice:
        raise PluginError(f"policy {name!r}: option {twice[0]} given in the name and again beside it; give it once")
    loader = _REGISTERED.get(prefix) or _installed()[prefix].load()
    return loader(prefix, folder, **{"name": name, **given, **options})


__all__ = ["GROUP", "folder_prefixes", "load_folder_policy", "register_folder_prefix", "split_folder_name"]
