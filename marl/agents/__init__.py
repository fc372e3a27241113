"""The agents marlsched trains, one module each: their network, decision layer, observations and algorithms.

``AGENTS`` is the one table that ``marlsched train`` (:mod:`marl.training.recipes`), the policy-folder registry
(:mod:`marl.deploy.registry`) and the docs read. A new learned scheduler is one more spec: a module here listed
below, or, from a package of one's own, an :class:`AgentSpec` announced in the ``marlsched.agents`` entry-point
group (every process that reads this table, Ray's workers and the training pools included, finds it there; the
entry points are read on the table's first use, not on import).
"""

from collections.abc import Iterator, MutableMapping
from importlib.metadata import entry_points
from typing import Any

from marl.agents import dl2, metaplace, priority, rounds, sia_weights, topdrl
from marl.agents.spec import AgentSpec, Algorithm, resolve

GROUP = "marlsched.agents"
PACKAGES: dict[str, str] = {}  # an installed agent's package, "NAME VERSION" (policy folders record it)
BUILT_IN: tuple[AgentSpec, ...] = (priority.SPEC, rounds.SPEC, sia_weights.SPEC, topdrl.SPEC, dl2.SPEC, metaplace.SPEC)


def _installed(built_in: dict[str, AgentSpec]) -> dict[str, AgentSpec]:
    """The specs that installed packages announce (``[project.entry-points."marlsched.agents"] NAME =
    "pkg.module:SPEC"``), checked: an entry that is not a spec, or names another agent, is refused by name."""
    found: dict[str, AgentSpec] = {}
    for ep in entry_points(group=GROUP):
        where = f"entry point {ep.name} = {ep.value!r} (group {GROUP}"
        where += f", package {ep.dist.name})" if ep.dist is not None else ")"
        try:
            spec = ep.load()
        except Exception as err:  # the package's own import error, or an attribute it does not have
            raise ValueError(
                f"{where} cannot be loaded ({type(err).__name__}: {err}); fix the entry point in that package's "
                "pyproject.toml and reinstall it (pip install -e DIR), or uninstall the package"
            ) from err
        if not isinstance(spec, AgentSpec):
            raise ValueError(f"{where} is a {type(spec).__name__}, not a marl.agents.AgentSpec")
        if spec.name != ep.name:
            raise ValueError(f"{where} holds the spec of {spec.name!r}; name the entry point {spec.name!r}")
        if spec.name in built_in or spec.name in found:
            raise ValueError(f"{where}: agent {spec.name!r} is already marlsched's; give yours another name")
        if not spec.algorithms:
            raise ValueError(f"{where}: agent {spec.name!r} lists no algorithm that trains it")
        found[spec.name] = spec
        if ep.dist is not None:
            PACKAGES[spec.name] = f"{ep.dist.name} {ep.dist.version}"
    return found


class _Agents(MutableMapping[str, AgentSpec]):
    """The built-in specs, then the installed ones, read on first use rather than on import: a package's spec
    module imports :mod:`marl.agents.spec` (and so this package), and a worker process that imports that module
    first would otherwise load the entry point of a module still half imported (a circular import)."""

    def __init__(self, built_in: tuple[AgentSpec, ...]) -> None:
        self._built_in = {spec.name: spec for spec in built_in}
        self._table: dict[str, AgentSpec] | None = None

    @property
    def table(self) -> dict[str, AgentSpec]:
        if self._table is None:
            self._table = {**self._built_in, **_installed(self._built_in)}
        return self._table

    def __getitem__(self, name: str) -> AgentSpec:
        return self.table[name]

    def __setitem__(self, name: str, spec: AgentSpec) -> None:
        self.table[name] = spec

    def __delitem__(self, name: str) -> None:
        del self.table[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.table)

    def __len__(self) -> int:
        return len(self.table)

    def __repr__(self) -> str:
        return f"AGENTS({', '.join(self.table)})"


AGENTS: MutableMapping[str, AgentSpec] = _Agents(BUILT_IN)


def where_from(name: str) -> str:
    """Where agent ``name``'s spec comes from, for errors: its package and entry point, or marlsched."""
    if name in PACKAGES:
        return f"the spec of package {PACKAGES[name]} (entry point {name} of group {GROUP})"
    return "marlsched's own spec (marl/agents/)"


def reference(spec: AgentSpec, field: str, algorithm: Algorithm | None = None) -> Any:
    """What a spec's (or one of its algorithms') ``module:attribute`` field names, imported; a ValueError that
    names the agent, the field, where the spec comes from and the import's own error where it cannot be."""
    ref = getattr(algorithm or spec, field)
    try:
        return resolve(ref)
    except (ImportError, AttributeError) as err:
        owner = f"algo {algorithm.name!r}'s {field}" if algorithm is not None else field
        raise ValueError(
            f"agent {spec.name!r}: its {owner} {ref!r} cannot be imported ({type(err).__name__}: {err}); fix it in "
            f"{where_from(spec.name)} (module:attribute) and reinstall that package"
        ) from None


def check_references(spec: AgentSpec, algorithm: Algorithm) -> None:
    """Every reference of ``spec`` and of the ``algorithm`` it trains with imports (``reference``'s error where
    one does not): a typo surfaces before training, not as another loop or a folder that cannot be loaded."""
    for field in ("decision", "loader", "observes", "network"):
        if getattr(spec, field) is not None:
            reference(spec, field)
    for field in ("trainer", "settings", "parse"):
        if getattr(algorithm, field) is not None:
            reference(spec, field, algorithm)


__all__ = [
    "AGENTS", "BUILT_IN", "GROUP", "PACKAGES", "AgentSpec", "Algorithm", "check_references", "reference", "resolve",
    "where_from",
]  # fmt: skip
