"""The package's layout rules: folders by layer, one-way imports between them, no import
cycles between modules, small modules (docs/architecture.md)."""

import ast
import os

PKG = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "purejaxppo")

# Bottom to top: a folder may import only from folders before it (``lm`` sits on the stages
# and is imported by none of the control layers below the programs: a token-level run kind
# and its command are built on it).
LAYERS = ["config", "envs", "stages", "agents", "step", "parallel", "algorithms", "run", "programs", "cli"]
ALLOWED = {name: set(LAYERS[:i]) for i, name in enumerate(LAYERS)}
ALLOWED["lm"] = {"config", "stages"}
ALLOWED["programs"] |= {"lm"}  # a token-level run kind is built on lm
ALLOWED["cli"] |= {"lm"}
# Inside lm, the subpackages by layer, bottom to top (the public face, ``purejaxppo/lm/__init__.py``,
# sits over all of them and no module of lm imports it).
LM_LAYERS = ["models", "checkpoints", "ppo", "rewards", "envs", "data", "tasks", "sft"]
# 300 lines before the code was formatted by `ruff format`; the formatter grew the package by 13.5%
# (16,560 -> 18,789 lines: a long call becomes a line per argument), so the same size reads 340-350.
MAX_LINES = 350


def _files() -> dict:
    """``{dotted module: path}`` for every module of the package."""
    out = {}
    for dirpath, _, files in os.walk(PKG):
        for f in files:
            if f.endswith(".py"):
                rel = os.path.relpath(os.path.join(dirpath, f), os.path.dirname(PKG))[:-3].replace(os.sep, ".")
                out[rel.removesuffix(".__init__")] = os.path.join(dirpath, f)
    return out


def _imported(node, module: str, is_pkg: bool) -> list:
    """``(module, name)`` pairs one import statement names (relative imports resolved; name
    None for a plain ``import``)."""
    if isinstance(node, ast.Import):
        return [(a.name, None) for a in node.names if a.name.split(".")[0] == "purejaxppo"]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level:
        base = module.split(".")[: len(module.split(".")) - node.level + (1 if is_pkg else 0)]
        mod = ".".join(base + ([node.module] if node.module else []))
    else:
        mod = node.module or ""
    if mod.split(".")[0] != "purejaxppo":
        return []
    return [(mod, a.name) for a in node.names]


def import_graph() -> dict:
    """``{module: {package modules it imports}}``, counting EVERY import statement, also the
    ones inside functions (a lazy import is still a dependency, and hides a cycle)."""
    files = _files()
    graph = {}
    for module, path in files.items():
        deps = set()
        for node in ast.walk(ast.parse(open(path).read(), path)):
            for mod, name in _imported(node, module, path.endswith("__init__.py")):
                target = f"{mod}.{name}" if f"{mod}.{name}" in files else mod  # `from pkg import module`
                if target in files and target != module:
                    deps.add(target)
        graph[module] = deps
    return graph


def folder_of(module: str):
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and os.path.isdir(os.path.join(PKG, parts[1])) else None


def find_cycle(graph: dict):
    """A list of modules forming a cycle, or None (depth-first search)."""
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt) :] + [nxt]
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


def layer_violations(graph: dict) -> list:
    """``(module, imported module)`` pairs that import upward or sideways across folders."""
    bad = []
    for mod, deps in graph.items():
        low = folder_of(mod)
        if low is None:
            continue
        for dep in deps:
            high = folder_of(dep)
            if high is not None and high != low and high not in ALLOWED[low]:
                bad.append((mod, dep))
    return sorted(bad)


def test_checkers_can_fail():  # the checkers themselves can fail
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None
    assert layer_violations({"purejaxppo.stages.gae": {"purejaxppo.run.loop"}}) == [
        ("purejaxppo.stages.gae", "purejaxppo.run.loop")
    ]
    assert layer_violations({"purejaxppo.run.loop": {"purejaxppo.stages.gae"}}) == []


def lm_layer_violations(graph: dict) -> list:
    """``(module, imported module)`` pairs inside ``purejaxppo.lm`` that import a subpackage above
    their own, or the face (``purejaxppo.lm``) itself."""
    bad = []
    for mod, deps in graph.items():
        parts = mod.split(".")
        if parts[:2] != ["purejaxppo", "lm"] or len(parts) < 4:
            continue
        low = LM_LAYERS.index(parts[2])
        for dep in deps:
            dparts = dep.split(".")
            if dep == "purejaxppo.lm" or (
                dparts[:2] == ["purejaxppo", "lm"] and len(dparts) > 2 and LM_LAYERS.index(dparts[2]) > low
            ):
                bad.append((mod, dep))
    return sorted(bad)


def test_lm_is_subpackages_importing_downward():
    lm = os.path.join(PKG, "lm")
    subs = {d for d in os.listdir(lm) if os.path.isfile(os.path.join(lm, d, "__init__.py"))}
    assert subs == set(LM_LAYERS), subs ^ set(LM_LAYERS)
    loose = [f for f in os.listdir(lm) if f.endswith(".py") and f != "__init__.py"]
    assert not loose, f"modules of lm outside its subpackages: {loose}"
    assert lm_layer_violations({"purejaxppo.lm.models.llama": {"purejaxppo.lm.ppo.token_stages"}})  # can fail
    assert lm_layer_violations({"purejaxppo.lm.ppo.experience": {"purejaxppo.lm"}})
    assert lm_layer_violations(import_graph()) == []


def test_no_two_modules_share_a_name():
    names = {}
    for module in _files():
        names.setdefault(module.rsplit(".", 1)[-1], []).append(module)
    shared = {
        n: ms
        for n, ms in names.items()
        if len(ms) > 1
        and n not in ("__main__",)
        and not all(os.path.isdir(os.path.join(os.path.dirname(PKG), *m.split("."))) for m in ms)
    }
    lm_shared = {n: ms for n, ms in shared.items() if any(m.startswith("purejaxppo.lm.") for m in ms)}
    assert not lm_shared, f"modules of lm sharing a name with another: {lm_shared}"


def test_every_folder_is_a_known_layer():
    folders = {d for d in os.listdir(PKG) if os.path.isfile(os.path.join(PKG, d, "__init__.py"))}
    assert folders == set(ALLOWED), folders ^ set(ALLOWED)


def test_no_import_cycles_in_the_package():
    graph = import_graph()
    # the parser sees real edges, relative and absolute, lazy ones included
    assert "purejaxppo.agents.registry" in graph["purejaxppo.step.train"]
    assert "purejaxppo.agents.agent" in graph["purejaxppo.agents.recurrent"]
    assert "purejaxppo.config.ppo_config" in graph["purejaxppo.config"]
    assert find_cycle(graph) is None, f"import cycle: {' -> '.join(find_cycle(graph))}"


def test_folders_import_only_from_the_layers_below():
    assert layer_violations(import_graph()) == []


def test_the_run_loop_knows_no_run_kind():
    """The loop drives the run protocol; it never names a kind or imports an implementation."""
    src = open(os.path.join(PKG, "run", "loop.py")).read()
    for word in ("pbt", "PBT", "sweep", "\"gru\""):
        assert word not in src, word
    assert not {d for d in import_graph()["purejaxppo.run.loop"] if folder_of(d) == "programs"}


def test_no_module_is_too_long():
    long = {m: n for m, p in _files().items() if (n := sum(1 for _ in open(p))) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines (find the second job in them): {long}"


#: the kind names run folders record (purejaxppo/run/kinds.py's registry)
KIND_NAMES = ("run", "sweep", "pbt", "rlhf", "reward-model")
#: modules that may name a kind besides its own ``<kind>_kind`` module: the programs that
#: record the name (``kind_for``; the plain-run kind's ``kind_name``: its two names, once), the
#: reward-model kind's module (its name is no module name), and the CLI's table of commands
#: (``rlhf`` is also a command). A front door, an exporter or a command asks the registry.
KIND_OWN = {
    "purejaxppo.programs.program": ("run", "sweep"),
    "purejaxppo.programs.pbt_program": ("pbt",),
    "purejaxppo.programs.rlhf_program": ("rlhf",),
    "purejaxppo.programs.reward_kind": ("reward-model",),
    "purejaxppo.programs.reward_program": ("reward-model",),
    "purejaxppo.cli.commands": ("rlhf",),
}


def kind_names_used(module: str, source: str) -> list:
    """``(line, name)`` of every string constant in ``source`` that IS a kind name, outside the
    kind's own modules (``<kind>_kind`` or listed in :data:`KIND_OWN`); docstrings and
    messages that merely contain one are fine."""
    base = module.rsplit(".", 1)[-1]
    own = {k for k in KIND_NAMES if base == k + "_kind"} | set(KIND_OWN.get(module, ()))
    return [
        (node.lineno, node.value)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Constant) and node.value in KIND_NAMES and node.value not in own
    ]


def test_kind_name_checker_can_fail():
    src = 'if info.get("kind") == "pbt":\n    x = {"kind": "rlhf"}\ny = "a pbt run"\n'
    assert kind_names_used("purejaxppo.cli.eval_cmd", src) == [(1, "pbt"), (2, "rlhf")]
    assert kind_names_used("purejaxppo.programs.pbt_kind", src) == [(2, "rlhf")]
    # a kind's other modules (its front door, its exporter) ask the registry too
    assert kind_names_used("purejaxppo.programs.pbt_run", src) == [(1, "pbt"), (2, "rlhf")]


def test_no_kind_name_outside_the_kinds_own_modules():
    """A command asks the folder's registered kind (purejaxppo/run/kinds.py) instead of
    comparing names: no kind name as a string anywhere else in the package."""
    found = {m: hits for m, p in _files().items() if (hits := kind_names_used(m, open(p).read()))}
    assert not found, f"kind names outside the kinds' own modules (ask the registry instead): {found}"


def xla_flags_written(source: str) -> list:
    """Lines of ``source`` that write the ``XLA_FLAGS`` environment variable (an item assigned,
    ``setdefault``/``update``/``putenv`` naming it)."""
    hits = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Assign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Subscript) and "XLA_FLAGS" in ast.unparse(t.slice) for t in targets):
                hits.append(node.lineno)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in ("setdefault", "update", "putenv") and "XLA_FLAGS" in ast.unparse(node):
                hits.append(node.lineno)
    return hits


def test_xla_flags_checker_can_fail():
    src = 'import os\nos.environ["XLA_FLAGS"] = "x"\nos.environ.setdefault("XLA_FLAGS", "y")\nf = os.environ.get("XLA_FLAGS")\n'
    assert xla_flags_written(src) == [2, 3]


def test_host_devices_are_forced_in_one_place():
    """Every command that wants N host CPU devices calls ``purejaxppo.cli.devices.set_devices``
    (a count the user already forced wins), so none writes ``XLA_FLAGS`` itself."""
    found = {m: hits for m, p in _files().items() if (hits := xla_flags_written(open(p).read()))}
    assert set(found) == {"purejaxppo.cli.devices"}, found
