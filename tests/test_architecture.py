"""The layout's own rule: no two modules of babylon_rl import each other, even through others, lazy imports inside
functions and type-only imports (`if TYPE_CHECKING:`) counted. A module that needs another's types above it takes a
Protocol of its own (`train/decisions.Finding`, `train/menu_losses.MenuOptions`) or the types move down
(`improve_state.py`)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "babylon_rl"


def import_graph() -> dict[str, set[str]]:
    """Every babylon_rl module -> the babylon_rl modules it imports anywhere in its text (a package's own name only when
    the import names the package itself, not one of its modules)."""
    modules = {".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__"): p
               for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module for a in node.names]
            else:
                continue
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name and target != "babylon_rl":
                    graph[name].add(target)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_the_circle_finder_finds_a_circle_through_a_third_module():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_module_of_babylon_rl_imports_itself_through_others():
    graph = import_graph()
    assert len(graph) > 100 and "babylon_rl.train.menu_losses" in graph["babylon_rl.train.menu_trainer"]
    assert circles(graph) == []


def test_the_drivers_stand_above_the_context_and_the_console():
    """quickstart and improve chain the commands of the context and print through the console: neither the context nor
    the console imports them or their types, even through another module (issue 81: SQLMesh's drivers and its console)."""
    graph = import_graph()
    drivers = {"babylon_rl.quickstart", "babylon_rl.improve", "babylon_rl.improve_report", "babylon_rl.improve_state"}
    for core in ("babylon_rl.context", "babylon_rl.console"):
        reached, todo = set(), [core]
        while todo:
            for module in graph[todo.pop()] - reached:
                reached.add(module)
                todo.append(module)
        assert not reached & drivers, (core, sorted(reached & drivers))
