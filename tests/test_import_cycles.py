"""No import cycle among evdb's and the dashboard's modules, and no arrow from a lower layer into the node:
walked with the standard library's ast, over every import (at module level, inside a function, or under
``if TYPE_CHECKING``: an import made for typing ties the modules as much as one that runs).
``from package import submodule`` counts as an import of the submodule."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _modules() -> dict[str, Path]:
    out = {}
    for base in ("evdb", "tui"):
        for path in (ROOT / base).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            out[name.removesuffix(".__init__")] = path
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    stack: list[ast.AST] = list(ast.parse(path.read_text()).body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name in modules)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            submodules = {f"{base}.{a.name}" for a in node.names} & modules.keys()
            found.update(submodules)
            if len(submodules) < len(node.names) and base in modules:
                found.add(base)
        else:
            stack.extend(ast.iter_child_nodes(node))
    found.discard(name)
    return found


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle():
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    assert not _cycles(graph), _cycles(graph)


#: the composition root and what stands above it: the only modules that may import evdb.node
ABOVE_THE_NODE = {"evdb", "evdb.node_cli"}


def test_no_lower_layer_imports_the_node():
    """The node builds the services and hands each layer (HTTP, gRPC, web UI, node-to-node) its own typed
    set of them: none of those layers, nor any below them, names the Node, even for typing."""
    modules = _modules()
    importers = sorted(
        name
        for name, path in modules.items()
        if not name.startswith("evdb.node") and name not in ABOVE_THE_NODE
        if any(
            found == "evdb.node" or found.startswith("evdb.node.") for found in _imports(name, path, modules)
        )
    )
    assert not importers, importers


def test_the_walk_counts_imports_made_for_typing(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from evdb.node import Node\n")
    assert _imports("evdb.m", path, {"evdb.node": path, "evdb.m": path}) == {"evdb.node"}


def test_the_walk_sees_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
