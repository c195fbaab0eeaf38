"""The package's layout rules (shared/ARCHITECTURE.md): one-way imports, small modules."""

import ast
import os

PKG = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "purejaxppo")


def _modules() -> dict:
    return {f[:-3]: os.path.join(PKG, f) for f in os.listdir(PKG) if f.endswith(".py")}


def import_graph() -> dict:
    """``{module: {package modules it imports}}``, counting EVERY import statement, also the
    ones inside functions (a lazy import is still a dependency, and hides a cycle)."""
    mods = _modules()
    graph = {}
    for name, path in mods.items():
        deps = set()
        for node in ast.walk(ast.parse(open(path).read(), path)):
            if isinstance(node, ast.ImportFrom):
                if node.level == 1:  # from .x import y / from . import x
                    targets = [node.module] if node.module else [a.name for a in node.names]
                elif node.module and node.module.split(".")[0] == "purejaxppo":
                    parts = node.module.split(".")
                    targets = [parts[1]] if len(parts) > 1 else [a.name for a in node.names]
                else:
                    continue
                deps.update(t.split(".")[0] for t in targets if t.split(".")[0] in mods)
            elif isinstance(node, ast.Import):
                for a in node.names:
                    parts = a.name.split(".")
                    if parts[0] == "purejaxppo" and len(parts) > 1 and parts[1] in mods:
                        deps.add(parts[1])
        deps.discard(name)
        graph[name] = deps
    return graph


def find_cycle(graph: dict):
    """A list of modules forming a cycle, or None (depth-first search)."""
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_cycle_finder_finds_cycles():  # the checker itself can fail
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_no_import_cycles_in_the_package():
    graph = import_graph()
    assert {"train", "agent", "recurrent", "rollout"} <= set(graph)
    assert "recurrent" in graph["train"] and "agent" in graph["recurrent"]  # the parser sees real edges
    assert find_cycle(graph) is None, f"import cycle: {' -> '.join(find_cycle(graph))}"


def test_lower_stages_never_import_higher_ones():
    graph = import_graph()
    stages = ["config", "distributions", "networks", "rollout", "gae", "losses", "update"]
    for low in stages:
        assert not graph[low] & {"train", "parallel", "cli", "recurrent", "agent"}, (low, graph[low])
