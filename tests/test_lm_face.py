"""The public face of token-level PPO, ``purejaxppo.lm`` (its ``__all__``).

* Every name resolves and is documented the way ``help(purejaxppo.lm)`` is read: a function
  with parameters has an ``Args:`` section, one that returns something a ``Returns:`` (or
  ``Yields:``) section; a class documents what it holds (``Attributes:``, or ``Args:`` for one
  built by calling it); a Protocol documents each of its methods as a function; an exception
  class says when it is raised (any docstring). Every dotted ``purejaxppo.*`` path a docstring
  names exists (none left behind by a move), and docs/api.md gives every name one line.
* ``benchmarks/``, ``experiments/`` and ``docs/`` use the face only: no import of a submodule
  of ``purejaxppo.lm`` (``.py`` files through ``ast``; ``.md`` files by regex over import lines,
  fenced or inline), and ``from purejaxppo.lm import NAME`` names only what ``__all__`` lists.

Each checker is also run on a planted violation, so a test that passes has checked something.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import os
import re
import textwrap

import pytest

import purejaxppo.lm as lm

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
USERS = ("benchmarks", "experiments", "docs")  # the folders that must import the face only
FACE = set(lm.__all__)


# --- docstrings ----------------------------------------------------------------------------
def _has_section(doc: str, *names: str) -> bool:
    """Whether ``doc`` has a Google-style section header (``Args:`` on a line of its own)."""
    return any(re.search(rf"^\s*{name}:\s*$", doc, re.M) for name in names)


def _returns_value(fn) -> bool:
    """Whether ``fn`` returns something: its annotation when it has one (``-> None``: no), else
    a ``return <value>`` (or ``yield``) in its own body, nested functions not counted."""
    ann = inspect.signature(fn).return_annotation
    if ann is not inspect.Signature.empty:
        return ann not in (None, "None")
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return False  # no source to read (a builtin): only the annotation could say
    body = tree.body[0]
    todo, found = list(ast.iter_child_nodes(body)), False
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        if isinstance(node, ast.Return) and node.value is not None or isinstance(node, (ast.Yield, ast.YieldFrom)):
            found = True
        todo.extend(ast.iter_child_nodes(node))
    return found


def _parameters(fn) -> list:
    return [p for p in inspect.signature(fn).parameters if p not in ("self", "cls")]


def function_problems(name: str, fn, stub: bool = False) -> list[str]:
    """What the docstring of function ``fn`` lacks. ``stub``: a Protocol method (``...`` body),
    which returns something unless annotated ``-> None``."""
    doc = inspect.getdoc(fn) or ""
    if not doc:
        return [f"{name}: no docstring"]
    out = []
    if _parameters(fn) and not _has_section(doc, "Args"):
        out.append(f"{name}: takes {_parameters(fn)} but its docstring has no 'Args:' section")
    returns = (inspect.signature(fn).return_annotation not in (None, "None")) if stub else _returns_value(fn)
    if returns and not _has_section(doc, "Returns", "Yields"):
        out.append(f"{name}: returns a value but its docstring has no 'Returns:' section")
    return out


def _is_protocol(cls) -> bool:
    return bool(getattr(cls, "_is_protocol", False))


def class_problems(name: str, cls) -> list[str]:
    """What the docstring of class ``cls`` lacks (see the module)."""
    doc = cls.__doc__ or ""  # its own, not an inherited one
    if not doc.strip():
        return [f"{name}: no docstring"]
    if issubclass(cls, BaseException):
        return []
    if _is_protocol(cls):
        methods = [(m, f) for m, f in vars(cls).items() if inspect.isfunction(f) and not m.startswith("_")]
        methods += [("__call__", vars(cls)["__call__"])] if "__call__" in vars(cls) else []
        return [p for m, f in methods for p in function_problems(f"{name}.{m}", f, stub=True)]
    if not _has_section(inspect.cleandoc(doc), "Attributes", "Args"):
        return [f"{name}: a class whose docstring has no 'Attributes:' (its fields) or 'Args:' section"]
    return []


def doc_problems(name: str, obj, api_page: str = "") -> list[str]:
    """What the documentation of the face's ``name`` lacks. A constant (a string, a number)
    carries no docstring of its own: ``api_page`` (docs/api.md) must give it a line."""
    if inspect.isclass(obj):
        return class_problems(name, obj)
    if callable(obj):
        return function_problems(name, inspect.unwrap(obj))
    if not re.search(rf"^[*-] `{re.escape(name)}`", api_page, re.M):
        return [f"{name}: a constant ({type(obj).__name__}); give it a line '- `{name}` ...' in docs/api.md"]
    return []


def test_all_resolves_once():
    assert len(lm.__all__) == len(FACE), sorted(n for n in FACE if lm.__all__.count(n) > 1)
    missing = [n for n in lm.__all__ if not hasattr(lm, n)]
    assert not missing, f"named in purejaxppo.lm.__all__ but not defined there: {missing}"


def _api_page() -> str:
    path = os.path.join(ROOT, "docs", "api.md")
    if not os.path.isfile(path):
        return ""
    with open(path, encoding="utf-8") as f:
        return f.read()


@pytest.mark.parametrize("name", lm.__all__)
def test_face_documented(name):
    problems = doc_problems(name, getattr(lm, name), _api_page())
    assert not problems, "\n".join(problems)


def test_doc_checker_catches_planted():
    def bare(x):
        """Does a thing."""
        return x

    def good(x):
        """Does a thing.

        Args:
          x: the thing.

        Returns:
          ``x``.
        """

        def inner():
            return 1  # nested: not the outer function's return

        return x

    def silent(x) -> None:
        """Does a thing.

        Args:
          x: the thing.
        """

    class Record:
        """Holds things."""

    class Held:
        """Holds things.

        Attributes:
          a: a thing.
        """

    assert len(doc_problems("bare", bare)) == 2
    assert doc_problems("good", good) == [] and doc_problems("silent", silent) == []
    assert doc_problems("Record", Record) and not doc_problems("Held", Held)
    assert doc_problems("nodoc", lambda: 0)
    assert doc_problems("AXIS", "data", "- `OTHER` a name") and not doc_problems("AXIS", "data", "- `AXIS`: a name")


def _resolves(ref: str) -> bool:
    """Whether a dotted ``purejaxppo.<module>[.<attribute>...]`` names something that exists."""
    parts = ref.rstrip(".").split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        try:
            for attr in parts[i:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return False
        return True
    return False


def stale_references(name: str, obj) -> list[str]:
    """Dotted ``purejaxppo.*`` paths in the docstrings of ``obj`` (and of a class's methods)
    that name nothing (a module moved, a name renamed)."""
    docs = [inspect.getdoc(obj) or ""]
    if inspect.isclass(obj):
        docs += [inspect.getdoc(f) or "" for k, f in vars(obj).items() if inspect.isfunction(f)]
    refs = {m.group(0) for d in docs for m in re.finditer(r"purejaxppo(?:\.\w+)+", d)}
    return [f"{name}: its docstring names {r}, which does not exist" for r in sorted(refs) if not _resolves(r)]


@pytest.mark.parametrize("name", lm.__all__)
def test_face_docstrings_name_what_exists(name):
    problems = stale_references(name, getattr(lm, name))
    assert not problems, "\n".join(problems)


def test_stale_reference_checker_catches_planted():
    def moved():
        """See :func:`purejaxppo.lm.model.sample_response` and :class:`purejaxppo.lm.models.kv_cache.KVCache`."""

    assert stale_references("moved", moved) == [
        "moved: its docstring names purejaxppo.lm.model.sample_response, which does not exist"
    ]


def api_page_problems(page: str, face) -> list[str]:
    """docs/api.md against the face: each name given one line ``- `NAME`: ...``, no other."""
    listed = re.findall(r"^- `(\w+)`", page, re.M)
    twice = sorted({n for n in listed if listed.count(n) > 1})
    return (
        [f"docs/api.md has no line for {n}" for n in sorted(set(face) - set(listed))]
        + [f"docs/api.md lists {n}, which purejaxppo.lm.__all__ does not" for n in sorted(set(listed) - set(face))]
        + [f"docs/api.md lists {n} twice" for n in twice]
    )


def test_api_page_lists_the_face():
    problems = api_page_problems(_api_page(), FACE)
    assert not problems, "\n".join(problems)


def test_api_page_checker_catches_planted():
    page = "# face\n\n- `a`: one.\n- `b`: two.\n- `b`: again.\n- `c`: three.\n"
    assert len(api_page_problems(page, {"a", "b", "d"})) == 3  # d missing, c extra, b twice
    assert api_page_problems("- `a`: one.\n", {"a"}) == []


# --- imports of the users --------------------------------------------------------------------
def _check_from(module: str, names: list, where: str) -> list[str]:
    if module.startswith("purejaxppo.lm."):
        return [f"{where}: from {module} import ... (a submodule; import from purejaxppo.lm)"]
    if module == "purejaxppo.lm":
        behind = [n for n in names if n != "*" and n not in FACE]
        if behind:
            return [f"{where}: from purejaxppo.lm import {', '.join(behind)} (not in purejaxppo.lm.__all__)"]
    return []


def import_problems(source: str, path: str) -> list[str]:
    """Imports behind the face in Python ``source`` (``path`` names it in the messages)."""
    out = []
    for node in ast.walk(ast.parse(source, path)):
        where = f"{path}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Import):
            out += [
                f"{where}: import {a.name} (a submodule)" for a in node.names if a.name.startswith("purejaxppo.lm.")
            ]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            out += _check_from(node.module, [a.name for a in node.names], where)
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and str(node.args[0].value).startswith("purejaxppo.lm.")
        ):
            out.append(f"{where}: import_module({node.args[0].value!r}) (a submodule)")
    return out


# an import line in Markdown, fenced or inline (after a backtick, a prompt ``>>>`` or a ``;``)
_MD_LINE = r"(?:^|`|>>>|;)[ \t]*"
_MD_SUBMODULE = re.compile(_MD_LINE + r"(from|import)[ \t]+(purejaxppo\.lm\.[\w.]+)", re.M)
_MD_FROM_FACE = re.compile(_MD_LINE + r"from[ \t]+purejaxppo\.lm[ \t]+import[ \t]+(\([^)]*\)|[^\n`]*)", re.M)


def markdown_problems(text: str, path: str) -> list[str]:
    """Imports behind the face in Markdown ``text``: ``purejaxppo.lm.<sub>`` on an import line,
    and names that ``from purejaxppo.lm import`` takes from outside ``__all__``."""
    line = lambda m: f"{path}:{text.count(chr(10), 0, m.start()) + 1}"  # noqa: E731
    out = [f"{line(m)}: {m.group(1)} {m.group(2)} (a submodule)" for m in _MD_SUBMODULE.finditer(text)]
    for m in _MD_FROM_FACE.finditer(text):
        listed = re.sub(r"#[^\n]*", "", m.group(1)).strip("() \t\n")
        names = [n.split()[0] for n in listed.split(",") if n.split()]
        out += _check_from("purejaxppo.lm", [n for n in names if n.isidentifier() or n == "*"], line(m))
    return out


def _user_files(folder: str):
    for dirpath, dirs, files in os.walk(os.path.join(ROOT, folder)):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "__pycache__")
        for f in sorted(files):
            if f.endswith((".py", ".md")):
                yield os.path.join(dirpath, f)


@pytest.mark.parametrize("folder", USERS)
def test_users_import_the_face_only(folder):
    problems = []
    for path in _user_files(folder):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        rel = os.path.relpath(path, ROOT)
        problems += import_problems(text, rel) if path.endswith(".py") else markdown_problems(text, rel)
    assert not problems, f"{len(problems)} import(s) behind purejaxppo.lm's face:\n" + "\n".join(problems)


def test_import_checker_catches_planted():
    bad = {
        "import purejaxppo.lm.models.tiny_lm": 1,
        "import purejaxppo.lm.models.gpt2 as g": 1,
        "from purejaxppo.lm.ppo import token_ppo": 1,
        "from purejaxppo.lm.tasks.builtin_tasks import make_task, ReverseTask": 1,
        "from purejaxppo.lm import make_task, not_a_face_name, models": 1,
        "def f():\n    from purejaxppo.lm.sft.sft_training import train_sft": 1,  # a lazy import counts
        "import importlib\nimportlib.import_module('purejaxppo.lm.models.llama')": 1,
    }
    for source, n in bad.items():
        assert len(import_problems(source, "planted.py")) == n, source
    fine = (
        "import purejaxppo.lm as lm\nfrom purejaxppo import lm\nimport purejaxppo.lm\n"
        "from purejaxppo.lm import make_task, TokenPPOConfig as C\nfrom purejaxppo.config import ConfigError\n"
        "from .lm.models import tiny_lm\n"  # relative: a package's own modules, not a user's
    )
    assert import_problems(fine, "fine.py") == []


def test_markdown_checker_catches_planted():
    text = (
        "Prose naming `purejaxppo.lm.models.tiny_lm.TinyLM` and `python -m purejaxppo.lm.sft.sft_training`.\n"
        "Inline: `from purejaxppo.lm.models.gpt2 import GPT2`.\n"
        "```python\nimport jax\nimport purejaxppo.lm.ppo.token_ppo as tp\n"
        "from purejaxppo.lm import (\n    make_task,\n    not_a_face_name,  # a comment\n)\n"
        "from purejaxppo.lm import make_token_ppo, TokenPPOConfig\n>>> from purejaxppo.lm.data import prompts\n```\n"
    )
    problems = markdown_problems(text, "planted.md")
    assert len(problems) == 4, problems
    assert [p.split(":")[1] for p in problems] == ["2", "5", "11", "6"], problems
    assert markdown_problems("```python\nimport purejaxppo.lm as lm\nfrom purejaxppo import lm\n```\n", "x.md") == []
