"""What an agent is in marlsched: its network, its decision layer, what it observes, and the loops that train it.

A spec names code (``module:attribute``, imported when used) rather than importing it, so that the table of
every agent loads in milliseconds and no layer of ``marl`` imports another to list it.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any


def resolve(ref: str) -> Any:
    """The object a ``module:attribute`` reference names."""
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)


@dataclass(frozen=True)
class Algorithm:
    """One loop that trains an agent: ``name`` is the config's ``algo:``. ``settings`` is the flat config
    dataclass (``module:Class``) or None for the agent's sectioned format, read by ``parse``
    (``(data, source, lines, chk=None) -> config``); ``iterations`` is the key that ``--iterations`` sets;
    ``example`` a config in experiments/configs. ``trainer`` (``module:function``) writes the policy and returns
    a summary dict; :func:`marl.training.recipes.run_recipe` calls it, after the config is checked, as

    - ``trainer(cfg, out / "policy", command=, log=)`` with ``settings`` (it writes that folder);
    - ``trainer(cfg, out, iterations=, evaluate=, command=, log=)`` with ``parse`` (the run folder is its own);
    - ``trainer(cfg, out, log=, command=, resume=)`` for ``name`` ``ppo`` or ``appo``, RLlib's loops: the only
      ones given ``--resume`` and ``--address`` (a Ray cluster), which the others refuse."""

    name: str
    about: str
    trainer: str
    iterations: str
    example: str
    settings: str | None = None
    parse: str | None = None


@dataclass(frozen=True)
class AgentSpec:
    """An agent: ``network`` (``metadata -> (module, program writer)``; None where it keeps no network),
    ``decision`` (the scheduler its outputs drive), ``observes`` (its input columns), ``loader``
    (``(folder, *, name, **options) -> scheduler``) and the algorithms that train it, the first the default."""

    name: str
    about: str
    network: str | None
    decision: str
    observes: str
    loader: str
    algorithms: tuple[Algorithm, ...]

    def algorithm(self, name: str | None = None) -> Algorithm:
        """The algorithm named ``name`` (None: the first); ValueError naming the choices."""
        if name is None:
            return self.algorithms[0]
        for algo in self.algorithms:
            if algo.name == name:
                return algo
        names = ", ".join(a.name for a in self.algorithms)
        raise ValueError(f"agent {self.name!r} trains with algo {names}, not {name!r}")

    @property
    def made_by(self) -> str:
        """The command that trains one (with the first algorithm's example config)."""
        return f"marlsched train --config {self.algorithms[0].example} --out OUT"


__all__ = ["AgentSpec", "Algorithm", "resolve"]
