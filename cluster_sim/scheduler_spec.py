"""Schedulers from outside the project: ``TARGET:ClassName[,key=value...]``.

``TARGET`` is a dotted module (``mypkg.sched``) or a ``.py`` file (``path/to/sched.py``); ``ClassName``
any class that speaks :class:`cluster_sim.protocol.Scheduler` (a ``name``, ``reset(view)`` and
``schedule(view) -> list[Decision]``). Options become keyword arguments of its constructor, their
values read as YAML scalars (``,placement=best-fit,backfill=false,margin=0.5``); a ``seed`` argument,
if the constructor takes one, receives the run's seed unless an option sets it.
"""

from __future__ import annotations

import inspect
from typing import Any

from cluster_sim.plugins import PluginError, absolute_target, import_target, spec_options
from cluster_sim.policy_folders import folder_prefixes
from cluster_sim.protocol import PROTOCOL_HINT, FunctionScheduler, Scheduler


def is_custom_spec(spec: str) -> bool:
    """Whether ``spec`` names a class in a module (``TARGET:Class``) rather than a built-in policy."""
    head = spec.split(",", 1)[0]
    prefix, colon, _ = head.partition(":")
    return bool(colon) and prefix not in folder_prefixes()  # PREFIX:DIR names a policy folder, not a module


def custom_spec_form(spec: str) -> bool:
    """Whether ``spec`` has the form ``TARGET:Class`` (:func:`is_custom_spec` with a class name after the colon):
    ``PREFIX:DIR`` of an unknown prefix is not one, and is reported as an unknown scheduler instead."""
    if not is_custom_spec(spec):
        return False
    try:
        parse_custom_spec(spec)
    except PluginError:
        return False
    return True


def parse_custom_spec(spec: str) -> tuple[str, str, dict[str, Any]]:
    """``(target, class name, options)`` of a ``TARGET:Class[,key=value...]`` spec."""
    head, *items = spec.split(",")
    target, colon, cls_name = head.strip().rpartition(":")
    if not colon or not target or not cls_name.isidentifier():
        raise PluginError(f"policy {spec!r}: expected MODULE_OR_FILE:ClassName[,key=value...], e.g. mysched.py:Mine")
    return target, cls_name, spec_options(spec, items)


def load_custom_scheduler(spec: str, seed: int = 0, **more: Any) -> Scheduler:
    """A fresh scheduler built from ``spec`` and the options ``more`` (a run config's ``scheduler_options``, a
    Python caller's keywords) beside the spec's own; raises :class:`PluginError` with a one-line reason."""
    target, cls_name, options = parse_custom_spec(spec)
    twice = sorted(set(options) & set(more))
    if twice:
        raise PluginError(f"policy {spec!r}: option {twice[0]} given in the spec and again beside it; give it once")
    options = {**options, **more}
    try:
        module = import_target(target)
    except PluginError as err:
        raise PluginError(f"policy {spec!r}: {err}") from None
    cls = getattr(module, cls_name, None)
    if cls is None:
        found = sorted(n for n, v in vars(module).items() if inspect.isclass(v) and _speaks_protocol(v))
        # the one-call form: functions defined in the file itself (not those it imports)
        found += sorted(n for n, v in vars(module).items() if inspect.isfunction(v) and v.__module__ == module.__name__
                        and not n.startswith("_"))  # fmt: skip
        hint = f"schedulers it defines: {', '.join(found)}" if found else "it defines no scheduler class or function"
        raise PluginError(f"policy {spec!r}: {target} has no scheduler {cls_name!r}; {hint}")
    if inspect.isfunction(cls):  # the one-call form: fn(view) -> list[Decision]
        unknown = sorted(set(options) - {"name"})
        if unknown:
            why = f"{cls_name} is a function: it takes no option {unknown[0]!r} (only name)"
            raise PluginError(f"policy {spec!r}: {why}")
        return FunctionScheduler(cls, name=options.get("name"))
    if not inspect.isclass(cls):
        raise PluginError(
            f"policy {spec!r}: {target}:{cls_name} is a {type(cls).__name__}, not a scheduler class or function"
        )
    missing = [m for m in ("reset", "schedule") if not callable(getattr(cls, m, None))]
    if missing:
        raise PluginError(
            f"policy {spec!r}: {cls_name} does not speak the scheduler protocol (no {', '.join(missing)}); "
            f"{PROTOCOL_HINT}"
        )
    kwargs = dict(options)
    if "seed" not in kwargs and _accepts(cls, "seed"):
        kwargs["seed"] = seed
    try:
        sched = cls(**kwargs)
    except (TypeError, ValueError) as err:  # a keyword it does not take, or a value it refuses (a placement)
        hint = " (a placement of your own: --plugin FILE before the command)" if "placement" in str(err) else ""
        takes = _options(cls)
        if isinstance(err, TypeError) and "keyword argument" in str(err) and takes is not None:
            hint += f"; {cls_name} takes {', '.join(takes) or 'no options'}"
        raise PluginError(f"policy {spec!r}: {cls_name}({_show(kwargs)}) failed: {err}{hint}") from None
    if not isinstance(getattr(sched, "name", None), str):
        raise PluginError(f"policy {spec!r}: {cls_name} has no `name` string; {PROTOCOL_HINT}")
    return sched


def absolute_custom_spec(spec: str) -> str:
    """The spec with a file target made absolute (for Ray workers in another directory)."""
    head, comma, rest = spec.partition(",")
    target, _, cls_name = head.rpartition(":")
    return f"{absolute_target(target)}:{cls_name}{comma}{rest}"


def _speaks_protocol(cls: type) -> bool:
    return callable(getattr(cls, "schedule", None)) and callable(getattr(cls, "reset", None))


def _accepts(cls: type, name: str) -> bool:
    try:
        params = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def _options(cls: type) -> list[str] | None:
    """The keyword options a class's constructor takes (None: it takes any, or its signature cannot be read)."""
    try:
        params = inspect.signature(cls).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [p.name for p in params if p.kind in kinds]


def _show(kwargs: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
