"""The package's layout rules (shared/ARCHITECTURE.md): one-way imports, small modules."""

import ast
import os

PKG = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "purejaxppo")


def _modules() -> dict:
    """``{node: [files]}``: each top-level module, and each subpackage (``envs/``) as ONE node."""
    mods = {f[:-3]: [os.path.join(PKG, f)] for f in os.listdir(PKG) if f.endswith(".py")}
    for d in os.listdir(PKG):
        sub = os.path.join(PKG, d)
        if os.path.isfile(os.path.join(sub, "__init__.py")):
            mods[d] = [os.path.join(sub, f) for f in sorted(os.listdir(sub)) if f.endswith(".py")]
    return mods


def import_graph() -> dict:
    """``{module: {package modules it imports}}``, counting EVERY import statement, also the
    ones inside functions (a lazy import is still a dependency, and hides a cycle)."""
    mods = _modules()
    graph = {}
    for name, paths in mods.items():
        deps = set()
        nested = len(paths) > 1 or os.path.basename(paths[0]) == "__init__.py"  # files one level down
        nodes = [n for path in paths for n in ast.walk(ast.parse(open(path).read(), path))]
        for node in nodes:
            if isinstance(node, ast.ImportFrom):
                if node.level == (2 if nested else 1):  # from .x import y / from . import x (top level)
                    targets = [node.module] if node.module else [a.name for a in node.names]
                elif nested and node.level == 1:  # a sibling inside the same subpackage
                    continue
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
    assert {"train", "agent", "recurrent", "rollout", "envs"} <= set(graph)
    assert "config" in graph["envs"] and "envs" in graph["train"]  # the subpackage is one node with real edges
    assert "recurrent" in graph["train"] and "agent" in graph["recurrent"]  # the parser sees real edges
    assert find_cycle(graph) is None, f"import cycle: {' -> '.join(find_cycle(graph))}"


def test_lower_stages_never_import_higher_ones():
    graph = import_graph()
    stages = ["config", "distributions", "networks", "rollout", "gae", "losses", "update"]
    for low in stages:
        assert not graph[low] & {"train", "parallel", "cli", "recurrent", "agent"}, (low, graph[low])
