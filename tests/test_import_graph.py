"""The import structure the design promises: packages import only downwards, and no module imports one
that (directly or through others) imports it back, counting the imports inside functions too, since a
circle of lazy imports is still one piece of code split in two."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# a package may import the packages of a lower rank; topology and interference not each other
RANK = {"experiments": 3, "marl": 2, "cluster_sim": 1, "topology": 0, "interference": 0}


def _module_name(path: Path) -> str:
    name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    return name.removesuffix(".__init__")


def import_graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports anywhere in its source."""
    files = {_module_name(f): f for pkg in RANK for f in (ROOT / pkg).rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in files}
    for mod, path in files.items():
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            graph[mod].update(n for n in names if n in files and n != mod)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle, as the list of modules along it, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        path.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                return [*path[path.index(n) :], n]
            if n not in state and (found := visit(n)):
                return found
        path.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (found := visit(m)):
            return found
    return None


def test_no_import_circles() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, "import circle: " + " -> ".join(cycle or [])


def test_find_cycle_sees_a_lazy_circle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_packages_import_only_downwards() -> None:
    wrong = []
    for mod, deps in import_graph().items():
        top = mod.split(".")[0]
        for dep in deps:
            other = dep.split(".")[0]
            if other != top and RANK[other] >= RANK[top]:
                wrong.append(f"{mod} imports {dep}")
    assert not wrong, (
        "imports against the package order (experiments > marl > cluster_sim > topology, interference): "
        + "; ".join(sorted(wrong))
    )


# inside marl, the layers of the architecture: the agent specs (a table that names the code of every layer by
# reference, importing none of it), what an agent sees, its networks, running a trained policy, training one; the
# published baselines and the command line on top
MARL_RANK = {"agents": 0, "env": 0, "models": 1, "deploy": 2, "training": 3, "baselines": 4, "cli": 5}


def test_marl_layers_import_only_downwards() -> None:
    graph = import_graph()
    layers = {m.split(".")[1] for m in graph if m.startswith("marl.") and m.count(".") >= 1}
    assert layers == set(MARL_RANK), f"marl's layout changed: {sorted(layers)}; update MARL_RANK"
    wrong = [
        f"{mod} imports {dep}"
        for mod, deps in graph.items()
        if mod.startswith("marl.")
        for dep in deps
        if dep.startswith("marl.") and MARL_RANK[dep.split(".")[1]] > MARL_RANK[mod.split(".")[1]]
    ]
    assert not wrong, "imports against marl's layers (agents, env < models < deploy < training < baselines < cli): " + (
        "; ".join(sorted(wrong))
    )


def test_every_module_imports() -> None:
    # Benchmarks and examples run only from the README: a renamed constant would break them unseen. In a
    # fresh interpreter, since plugin examples register names once per process.
    import subprocess
    import sys

    script = (
        "import importlib, sys\n"
        "failed = []\n"
        "for name in sys.argv[1:]:\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except Exception as e:\n"
        "        failed.append(f'{name}: {type(e).__name__}: {e}')\n"
        "print('\\n'.join(failed))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, *sorted(import_graph())], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert not out.stdout.strip(), "modules that do not import:\n" + out.stdout
