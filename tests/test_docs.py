"""The documentation stays true to the code.

* Every ```python block of README.md and docs/*.md runs (a fresh namespace per block, in one subprocess with two
  forced host CPU devices, in a temporary working folder). The README's examples use small
  ``total_timesteps`` so that they are cheap; a block that cannot run here (several hosts, a GPU)
  starts with the comment ``# not run by tests: <reason>`` and is skipped.
* Every repository path named in the docs (README.md, docs/, the benchmarks' Markdown), the code
  and its help text (the ``.py`` and ``.sh`` files) exists, and every ``purejaxppo.x.y`` name in
  the docs imports.
* Nothing in the repository mentions the planning folder outside it (see ``FORBIDDEN``).
* docs/architecture.md's module map names every module of the package.
"""

import glob
import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
SKIP = "# not run by tests:"
FORBIDDEN = "shared" + "/"  # spelled apart so that this file does not name it
NEWCOMER = [
    "# purejaxppo",
    "",
    "```bash",
    "pip install -e . && python -m purejaxppo train --env CartPole-v1        # install + train a CartPole agent",
    "pip install -e \".[dev]\" && pytest                                        # install + run the tests",
    "```",
]


# --- README blocks --------------------------------------------------------------------------
def python_blocks(text: str) -> list:
    """``[(line number, code)]`` of the ```python blocks of a Markdown text."""
    out = []
    for m in re.finditer(r"^```python\n(.*?)^```", text, re.S | re.M):
        out.append((text.count("\n", 0, m.start()) + 1, m.group(1)))
    return out


def skip_reason(code: str):
    first = code.lstrip("\n").splitlines()[0].strip() if code.strip() else ""
    return first[len(SKIP) :].strip() if first.startswith(SKIP) else None


DOC_FILES = ["README.md"] + sorted(
    os.path.join("docs", f) for f in os.listdir(os.path.join(ROOT, "docs")) if f.endswith(".md")
)
BLOCKS = [(f, line, code) for f in DOC_FILES for line, code in python_blocks(open(os.path.join(ROOT, f)).read())]

RUNNER = textwrap.dedent("""
    import json, sys, time, traceback
    blocks = json.load(open(sys.argv[1]))
    results = {}
    for name, code in blocks.items():
        t = time.time()
        try:
            exec(compile(code, name, "exec"), {"__name__": "__main__"})
            results[name] = {"ok": True}
        except BaseException:
            results[name] = {"ok": False, "error": traceback.format_exc()}
        results[name]["seconds"] = round(time.time() - t, 1)
        print(name, results[name]["ok"], results[name]["seconds"], "s", flush=True)
    json.dump(results, open(sys.argv[2], "w"))
""")


def run_blocks(blocks: dict, workdir: str, timeout: float = 1800) -> dict:
    """Run ``{name: code}`` in one fresh interpreter (2 forced CPU devices); ``{name: result}``."""
    src, out = os.path.join(workdir, "blocks.json"), os.path.join(workdir, "results.json")
    with open(src, "w") as f:
        json.dump(blocks, f)
    env = dict(os.environ)
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2").strip()
    env["PYTHONPATH"] = os.pathsep.join([ROOT] + [p for p in [env.get("PYTHONPATH")] if p])
    proc = subprocess.run(
        [sys.executable, "-c", RUNNER, src, out], cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout
    )
    if not os.path.exists(out):
        raise AssertionError(f"the block runner died (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr[-4000:]}")
    return json.load(open(out))


def test_readme_starts_with_the_newcomer_commands():
    assert open(README).read().splitlines()[: len(NEWCOMER)] == NEWCOMER


def test_readme_has_python_examples_and_skips_say_why():
    assert sum(f == "README.md" for f, _, _ in BLOCKS) >= 3
    for f, line, code in BLOCKS:
        reason = skip_reason(code)
        assert reason is None or reason, f"{f}:{line}: '{SKIP}' needs a reason"


@pytest.mark.slow
@pytest.mark.parametrize("doc,line,code", BLOCKS, ids=[f"{f}:{line}" for f, line, _ in BLOCKS])
def test_doc_block_runs(doc, line, code, tmp_path):
    reason = skip_reason(code)
    if reason is not None:
        pytest.skip(f"{doc}:{line}: {reason}")
    # each block in its own runner process: the test workers share the blocks out, none runs them all
    name = f"{doc}:{line}"
    result = run_blocks({name: code}, str(tmp_path))[name]
    assert result["ok"], f"{name}: the block failed:\n{result['error']}"


def test_block_runner_reports_a_failing_block(tmp_path):  # the check can fail
    results = run_blocks({"good": "x = 1\n", "bad": "from purejaxppo import no_such_name\n"}, str(tmp_path))
    assert results["good"]["ok"] and not results["bad"]["ok"]
    assert "no_such_name" in results["bad"]["error"]


# --- repository paths -------------------------------------------------------------------------
PREFIXES = ("purejaxppo", "docs", "benchmarks", "experiments", "tests")
PATH = re.compile(r"(?<![\w./~$-])((?:%s)/(?:[\w.*<>-]|\{[\w,.]*\}|/)*)" % "|".join(PREFIXES))
EXTENSIONS = {"py", "md", "sh", "json", "jsonl", "csv", "png", "txt", "toml", "yaml", "yml", "gif", "cfg"}
# text right before a path that makes it an output of the command (it need not exist yet)
OUTPUT = re.compile(
    r"((--out|--json|\s-o|(?<![-=<])>>?|\bout=|\b[Ww]rites?|\b[Ww]ritten to|\b[Ss]aved? (to|in))[\s=]*[\"'`]?"
    r"|[\"'](--out|--json)[\"'],.*default=[\"'])$"
)
DOTTED = re.compile(r"(?<![\w.])purejaxppo(?:\.\w+)+")


def repo_files() -> list:
    """Tracked and untracked-but-not-ignored files, relative to the root."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.split("\n")
        return sorted(f for f in out if f and os.path.isfile(os.path.join(ROOT, f)))
    except (OSError, subprocess.CalledProcessError):  # not a git checkout: walk it
        skip = {".git", ".ci-venv", ".venv", "__pycache__", ".pytest_cache", ".hypothesis", "runs", "build"}
        files = []
        for d, dirs, names in os.walk(ROOT):
            dirs[:] = [x for x in dirs if x not in skip and not x.endswith(".egg-info")]
            files += [os.path.relpath(os.path.join(d, n), ROOT) for n in names]
        return sorted(files)


def checked_files() -> list:
    """The docs, the code and its help text: README.md, docs/, benchmarks' Markdown, every
    ``.py``/``.sh`` file and pyproject.toml (not experiments' result notebooks)."""
    me = os.path.relpath(os.path.abspath(__file__), ROOT)
    out = []
    for f in repo_files():
        if f == me:
            continue
        if (
            f in ("README.md", "pyproject.toml")
            or f.startswith("docs/")
            and f.endswith(".md")
            or f.startswith("benchmarks/")
            and f.endswith(".md")
            or f.endswith((".py", ".sh"))
        ):
            out.append(f)
    return out


def _expand(path: str) -> list:
    m = re.search(r"\{([\w,.]*)\}", path)
    if not m:
        return [path]
    return [p for alt in m.group(1).split(",") for p in _expand(path[: m.start()] + alt + path[m.end() :])]


def path_problem(path: str, before: str, root: str = ROOT):
    """Why ``path`` (as written; ``before``: the text before it on its line) names nothing in
    the repository, or None. Only references are judged: a last part with a file extension, or a
    trailing ``/`` (a folder). Placeholders (``<ENV>``, ``ENV``) and outputs (after ``--out``,
    ``--json``, ``writes``, ...) need only their top folder to exist; globs must match."""
    path = path.rstrip(".,:;)")
    parts = path.rstrip("/").split("/")
    if not (path.endswith("/") or re.search(r"\.(%s)$" % "|".join(EXTENSIONS), parts[-1])):
        return None
    placeholder = next((i for i, p in enumerate(parts) if "<" in p or re.fullmatch(r"[A-Z][A-Z_]*", p)), None)
    if placeholder is not None or OUTPUT.search(before):
        top = os.path.join(root, *parts[: min(2, len(parts) - 1 if placeholder is None else placeholder)])
        return None if os.path.isdir(top) else f"no folder {os.path.relpath(top, root)}"
    for p in _expand(path):
        if "*" in p:
            if not glob.glob(os.path.join(root, p)):
                return "matches no file"
        elif not os.path.exists(os.path.join(root, p)):
            return "does not exist"
    return None


def path_problems(text: str, where: str, root: str = ROOT) -> list:
    bad = []
    for n, line in enumerate(text.splitlines(), 1):
        for m in PATH.finditer(line):
            why = path_problem(m.group(1), line[: m.start()], root)
            if why:
                bad.append(f"{where}:{n}: {m.group(1).rstrip('.,:;)')} {why}")
    return bad


def dotted_problem(name: str):
    """Why ``purejaxppo.a.b`` does not import (a module, then attributes), or None."""
    import importlib

    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        base = os.path.join(ROOT, *parts[:i])
        if os.path.isfile(base + ".py") or os.path.isfile(os.path.join(base, "__init__.py")):
            obj = importlib.import_module(".".join(parts[:i]))
            for attr in parts[i:]:
                if not hasattr(obj, attr):
                    return f"{'.'.join(parts[:i])} has no {attr!r}"
                obj = getattr(obj, attr)
            return None
    return "no such module"


def _text(f: str):
    path = os.path.join(ROOT, f)
    if os.path.getsize(path) > 5_000_000:
        return None
    data = open(path, "rb").read()
    return None if b"\0" in data else data.decode("utf-8", "replace")


def test_every_repository_path_named_exists():
    bad = []
    for f in checked_files():
        text = _text(f)
        if text is not None:
            bad += path_problems(text, f)
    assert not bad, "paths that name nothing in the repository:\n" + "\n".join(bad)


def test_every_module_named_in_the_docs_imports():
    docs = ["README.md", "benchmarks/README.md", "benchmarks/NOTES.md"] + sorted(
        os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md"))
    )
    bad = []
    for f in docs:
        if not os.path.exists(os.path.join(ROOT, f)):
            continue
        for n, line in enumerate(open(os.path.join(ROOT, f)), 1):
            for m in DOTTED.finditer(line):
                why = dotted_problem(m.group(0).rstrip("."))
                if why:
                    bad.append(f"{f}:{n}: {m.group(0)}: {why}")
    assert not bad, "names in the docs that do not import:\n" + "\n".join(bad)


def test_nothing_mentions_the_planning_folder():
    me = os.path.relpath(os.path.abspath(__file__), ROOT)
    bad = []
    for f in repo_files():
        text = None if f == me else _text(f)
        if text is not None:
            bad += [f"{f}:{n}" for n, line in enumerate(text.splitlines(), 1) if FORBIDDEN in line]
    assert not bad, f"mentions of {FORBIDDEN!r} (point to docs/ instead):\n" + "\n".join(bad)


def test_module_map_names_every_module():
    text = open(os.path.join(ROOT, "docs", "architecture.md")).read()
    modules = sorted(  # every folder's modules, subpackages' too (purejaxppo/lm/models/...)
        os.path.relpath(p, ROOT)
        for p in glob.glob(os.path.join(ROOT, "purejaxppo", "*", "**", "*.py"), recursive=True)
        if not p.endswith("__init__.py")
    )
    missing = [m for m in modules if f"`{m}`" not in text]
    assert not missing, "modules missing from docs/architecture.md's module map:\n" + "\n".join(missing)


def test_path_checker_can_fail(tmp_path):  # the checks themselves can fail
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "real.md").write_text("x")
    text = (
        "see `docs/real.md` and `docs/missing.md`.\n"
        "python benchmarks/nope.py --out benchmarks/results/new.json -> docs/gone.md\n"
        "experiments/<ENV>/x.csv and experiments/tests in prose\n"
    )
    assert path_problems(text, "t", str(tmp_path)) == [
        "t:1: docs/missing.md does not exist",
        "t:2: benchmarks/nope.py does not exist",
        "t:2: benchmarks/results/new.json no folder benchmarks/results",
        "t:2: docs/gone.md does not exist",
        "t:3: experiments/<ENV>/x.csv no folder experiments",
    ]
    assert dotted_problem("purejaxppo.stages.gae.gae") is None
    assert dotted_problem("purejaxppo.stages.gae.no_such") and dotted_problem("purejaxppo.no_such_module")
    assert FORBIDDEN in "see " + FORBIDDEN + "PPO.md"
