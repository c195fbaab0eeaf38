"""Python tools as a multi-turn text environment: tool-call parsing in both formats against
hand-written expectations, the calculator against Python's own arithmetic, and ``ToolEnv``'s
handling of tools that raise, hang, or print too much (from the main thread and from another),
final answers scored against the row, ``max_turns``, and SIGINT during a call."""

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from purejaxppo.lm.envs.calculator import CalculatorError, calculator, calculator_env, evaluate
from purejaxppo.lm.envs.tool_calls import PLAIN, QWEN, Call, CallError, parse_turn
from purejaxppo.lm.envs.tool_env import ToolEnv
from purejaxppo.lm.rewards.check_pool import CheckPoolError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAMES = ["calculator", "lookup"]


# --- tools (top level: they reach the workers by reference) -----------------------------------
def lookup(key: str, n: int = 1) -> str:
    """Look a key up."""
    return key * n


def fails(x: int) -> str:
    raise ValueError(f"no good: {x}")


def hangs() -> str:
    time.sleep(600)
    return "never"


def floods() -> str:
    return "x" * 100_000


def exact(prompts, completions, answer, **columns):
    """A verifier: the turn's stripped text equals the row's answer."""
    return [float(c.strip() == a) for c, a in zip(completions, answer)]


@pytest.fixture(scope="module")
def env():
    e = ToolEnv(
        {"lookup": lookup, "fails": fails, "floods": floods},
        fmt="plain",
        verifier=exact,
        max_turns=2,
        max_chars=50,
        workers=1,
    )
    yield e
    e.close()


# --- parsing ---------------------------------------------------------------------------------
QWEN_2_PLUS_3 = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "2+3"}}\n</tool_call>'
PARSE_TABLE = [
    # (format, text, expected calls: Call, or a CallError's key words)
    (QWEN, QWEN_2_PLUS_3, [Call("calculator", {"expression": "2+3"})]),
    (QWEN, "I will compute.\n" + QWEN_2_PLUS_3 + "<|im_end|>", [Call("calculator", {"expression": "2+3"})]),
    (QWEN, '<tool_call>{"name": "lookup"}</tool_call>', [Call("lookup", {})]),
    (PLAIN, '<tool_call>calculator("2 + 3")</tool_call>', [Call("calculator", {}, ("2 + 3",))]),
    (PLAIN, "<tool_call>lookup('a', n=2)</tool_call>", [Call("lookup", {"n": 2}, ("a",))]),
    (QWEN, '<tool_call>\n{"name": "calculator", "arguments": {"expression": "2+3"}\n</tool_call>', ["not valid JSON"]),
    (QWEN, '<tool_call>["calculator"]</tool_call>', ['"name" string']),
    (QWEN, '<tool_call>{"name": "calculator", "arguments": "2+3"}</tool_call>', ['"arguments" must be a JSON object']),
    (PLAIN, "<tool_call>calculator(2 +)</tool_call>", ["does not parse"]),
    (PLAIN, "<tool_call>calculator(x)</tool_call>", ["'x' is not a literal"]),
    (PLAIN, "<tool_call>os.system('ls')</tool_call>", ["one call of a tool by its name"]),
    (
        QWEN,
        '<tool_call>{"name": "search", "arguments": {}}</tool_call>',
        ["unknown tool 'search'", "calculator, lookup"],
    ),
    (PLAIN, "<tool_call>search('q')</tool_call>", ["unknown tool 'search'"]),
    (QWEN, "The answer is 5.<|im_end|>", []),
    (PLAIN, "", []),
    (PLAIN, "<tool_call>lookup('a')", ["without its closing </tool_call>"]),
    # several calls: each in order, a bad one does not stop the others
    (
        PLAIN,
        "<tool_call>lookup('a')</tool_call> then <tool_call>nope()</tool_call><tool_call>calculator('1')</tool_call>",
        [Call("lookup", {}, ("a",)), ["unknown tool 'nope'"], Call("calculator", {}, ("1",))],
    ),
]


@pytest.mark.parametrize("fmt,text,expected", PARSE_TABLE)
def test_parse_turn_table(fmt, text, expected):
    # a single CallError expectation is written as a flat list of words
    if expected and isinstance(expected[0], str):
        expected = [expected]
    turn = parse_turn(text, fmt, NAMES)
    assert turn.final == (not expected)
    assert len(turn.calls) == len(expected), turn
    for got, want in zip(turn.calls, expected):
        if isinstance(want, Call):
            assert got == want
        else:
            assert isinstance(got, CallError), got
            for words in want:
                assert words in got.message, got.message


def test_more_calls_than_max_calls_run_the_first_ones():
    text = "".join(f"<tool_call>lookup('{c}')</tool_call>" for c in "abcde")
    turn = parse_turn(text, PLAIN, NAMES, max_calls=3)
    assert turn.calls[:3] == tuple(Call("lookup", {}, (c,)) for c in "abc")
    assert turn.calls[3:] == (CallError("at most 3 tool calls a turn: this call was not run"),) * 2


def test_qwen_prompt_and_response_are_qwens_template():
    # written out by hand from Qwen3's chat template (tools, one user message, generation prompt)
    tool = (
        '{"type": "function", "function": {"name": "calculator", "description": "Evaluate an arithmetic '
        'expression: numbers, + - * / ** and parentheses.", "parameters": {"type": "object", "properties": '
        '{"expression": {"type": "string"}}, "required": ["expression"]}}}'
    )
    want = (
        "<|im_start|>system\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n" + tool + "\n</tools>"
        "\n\nFor each function call, return a json object with function name and arguments within "
        "<tool_call></tool_call> XML tags:\n<tool_call>\n"
        '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\nWhat is 2+3?<|im_end|>\n<|im_start|>assistant\n"
    )
    instructions = QWEN.describe({"calculator": calculator}, "")
    assert QWEN.prompt(instructions, "What is 2+3?") == want
    two = "<|im_start|>user\n<tool_response>\n5\n</tool_response>\n<tool_response>\n7\n</tool_response><|im_end|>\n"
    assert QWEN.observation(QWEN_2_PLUS_3, ["5", "7"]) == "<|im_end|>\n" + two + "<|im_start|>assistant\n"
    assert QWEN.observation(QWEN_2_PLUS_3 + "<|im_end|>", ["5", "7"]) == "\n" + two + "<|im_start|>assistant\n"


# --- the calculator --------------------------------------------------------------------------
ARITHMETIC = [
    "2 + 3 * 4",
    "(2 + 3) * 4",
    "7 / 2",
    "-3 ** 2",
    "2 ** 3 ** 2",
    "2 ** -2",
    "10 - 2 - 3",
    "1.5e3 / 8",
    "0.1 + 0.2",
    "+4 - -4",
    "12 * 13 - 7 / (1 + 1)",
    "9 ** 400 - 9 ** 399",
]


@pytest.mark.parametrize("expr", ARITHMETIC)
def test_calculator_is_pythons_arithmetic(expr):
    want = eval(expr, {"__builtins__": {}})  # the reference: Python's own arithmetic on trusted text
    assert evaluate(expr) == want and type(evaluate(expr)) is type(want)
    assert calculator(expr) == str(want)


REFUSED = [
    ("x + 1", "names are not allowed"),
    ("__import__('os').system('ls')", "function calls are not allowed"),
    ("(1).real", "attributes are not allowed"),
    ("().__class__", "attributes are not allowed"),
    ("2 ** 5000", "the power would have more than 4096 bits"),  # refused before it is computed
    ("9 ** 9 ** 9", "the power would have more than 4096 bits"),
    ("(2 ** 4000) * (2 ** 4000)", "the result has more than 4096 bits"),
    ("10.0 ** 400", "overflow"),
    ("1e308 * 10", "overflow"),
    ("1 / 0", "division by zero"),
    ("0 ** -1", "division by zero"),
    ("(-8) ** 0.5", "not a real number"),
    ("2 ^ 3", "write **"),
    ("7 // 2", "operator // is not allowed"),
    ("'a' * 3", "not a number"),
    ("True + 1", "not a number"),
    ("1 < 2", "not arithmetic"),
    ("2 +", "not an arithmetic expression"),
    ("1" * 600, "longer than 500"),
]


@pytest.mark.parametrize("expr,words", REFUSED)
def test_calculator_refuses(expr, words):
    with pytest.raises(CalculatorError, match=words.replace("*", r"\*").replace("^", r"\^")):
        evaluate(expr)


# --- the environment -------------------------------------------------------------------------
def test_tool_errors_become_observations(env):
    env.reset([{"prompt": "p", "answer": "a"}] * 4)
    env.take_counts()
    out = env.step(
        [
            "<tool_call>fails(3)</tool_call>",
            "<tool_call>lookup(n=2)</tool_call>",
            "<tool_call>lookup('ab', n=2)</tool_call><tool_call>nope()</tool_call>",
            "<tool_call>lookup(",
        ],
        [True] * 4,
    )
    assert out[0].observation == "\n<tool_response>error: ValueError: no good: 3</tool_response>\n"
    assert "error: bad arguments for lookup: missing a required argument: 'key'" in out[1].observation
    assert out[2].observation == (
        "\n<tool_response>abab</tool_response>\n<tool_response>error: unknown tool 'nope': the tools are "
        "lookup, fails, floods</tool_response>\n"
    )
    assert "without its closing" in out[3].observation
    assert all(s.reward == 0.0 and not s.terminated and not s.truncated for s in out)
    assert env.take_counts() == {"calls": 2.0, "timeouts": 0.0, "cut": 0.0, "parse_failures": 2.0, "errors": 2.0}


def test_a_huge_output_is_cut_with_the_marker(env):
    env.reset([{"prompt": "p", "answer": "a"}])
    env.take_counts()
    (out,) = env.step(["<tool_call>floods()</tool_call>"], [True])
    body = "x" * 50 + "\n[... output cut: 99950 of 100000 characters not shown]"
    assert out.observation == f"\n<tool_response>{body}</tool_response>\n"
    assert env.take_counts()["cut"] == 1.0


def test_final_answer_scored_and_max_turns_truncate(env):
    first = env.reset(
        [{"prompt": "q1", "answer": "156"}, {"prompt": "q2", "answer": "156"}, {"prompt": "q3", "answer": "7"}]
    )
    assert first[0].endswith("\n\nq1\n") and "- lookup(key: str, n: int = 1) -> str: Look a key up." in first[0]
    call = "<tool_call>lookup('1')</tool_call>"
    one = env.step(["156", "155", call], [True, True, True])
    assert [(s.reward, s.terminated, s.truncated) for s in one] == [
        (1.0, True, False),
        (0.0, True, False),
        (0.0, False, False),
    ]
    assert one[0].observation == one[1].observation == ""
    # the inactive episodes are not stepped; the third's second call turn is its last (max_turns=2)
    two = env.step(["ignored", "ignored", call], [False, False, True])
    assert (two[2].reward, two[2].terminated, two[2].truncated) == (0.0, False, True)
    assert two[2].observation == "\n<tool_response>1</tool_response>\n"
    assert env.turns == [1, 1, 2]


def test_math_verifier_scores_against_the_answer_column():
    pytest.importorskip("math_verify")
    env = calculator_env(max_turns=2)
    try:
        env.reset([{"prompt": "12*13?", "answer": "156"}, {"prompt": "12*13?", "answer": "156"}])
        out = env.step(["So the answer is \\boxed{156}.<|im_end|>", "It is 155.<|im_end|>"], [True, True])
        assert [(s.reward, s.terminated) for s in out] == [(1.0, True), (0.0, True)]
    finally:
        env.close()
        env.verifier.pool.close()


def test_calculator_env_runs_the_calculator():
    env = calculator_env(verifier=exact)
    try:
        env.reset([{"prompt": "What is 12*13?", "answer": "156"}])
        (out,) = env.step([QWEN_2_PLUS_3.replace("2+3", "12*13")], [True])
        want = "<|im_end|>\n<|im_start|>user\n<tool_response>\n156\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
        assert out.observation == want
    finally:
        env.close()


def _hang_step(env, result: list):
    env.reset([{"prompt": "p", "answer": "a"}])
    result.append(env.step(["<tool_call>hangs()</tool_call>"], [True])[0])


def test_a_hung_tool_is_stopped_at_its_timeout_on_any_thread():
    env = ToolEnv({"hangs": hangs}, fmt="plain", verifier=exact, timeout=1.0, workers=1)
    t = None
    try:
        for on_thread in (True, False):  # the thread first: a hang there fails at the join
            result, start = [], time.monotonic()
            if on_thread:
                t = threading.Thread(target=_hang_step, args=(env, result), daemon=True)
                t.start()
                t.join(60)
            else:
                _hang_step(env, result)
            # bounded: the call's 1 s, plus starting a worker (the hung one was killed)
            assert result and time.monotonic() - start < 60
            assert result[0].observation == (
                "\n<tool_response>error: the tool 'hangs' ran past its 1 s limit and was stopped</tool_response>\n"
            )
        assert env.counts.timeouts == 2 and env.counts.calls == 2
    finally:
        if t is None or not t.is_alive():  # a step still in flight holds the pool
            env.close()


def test_bad_construction_and_rows_are_clear_errors():
    with pytest.raises(ValueError, match="Python identifiers"):
        ToolEnv({"two words": lookup}, verifier=exact)
    with pytest.raises(ValueError, match="unknown tool-call format 'hermes'"):
        ToolEnv({"lookup": lookup}, fmt="hermes", verifier=exact)
    with pytest.raises(CheckPoolError, match="cannot be sent to a worker process"):
        ToolEnv({"locked": threading.Lock().acquire}, verifier=exact)
    env = ToolEnv({"lookup": lookup}, verifier=exact)
    with pytest.raises(ValueError, match="row 0 has no 'prompt' string"):
        env.reset([{"question": "q"}])
    env.reset([{"prompt": "q", "answer": "a"}])
    with pytest.raises(ValueError, match="2 actions and 2 flags for 1 episodes"):
        env.step(["a", "b"], [True, True])
    env.verifier = lambda prompts, completions, **columns: [None]
    with pytest.raises(ValueError, match="no score for row 0"):
        env.step(["a"], [True])


SIGINT_SCRIPT = textwrap.dedent("""
    import os, sys, time
    from purejaxppo.lm.envs.tool_env import ToolEnv

    def hang(path):
        with open(path + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.replace(path + ".tmp", path)
        time.sleep(600)

    env = ToolEnv({"hang": hang}, fmt="plain", verifier=lambda p, c, **k: [0.0] * len(c), timeout=300)
    env.reset([{"prompt": "go"}])
    env.step(["<tool_call>hang(%r)</tool_call>" % sys.argv[1]], [True])
""")


def _default_sigint():
    # a shell starts background jobs (nohup ... &, CI) with SIGINT ignored and children inherit
    # it: the script would never see the signal. Start it as from a terminal.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_sigint_during_a_tool_call_kills_its_worker_and_reaches_the_caller(tmp_path):
    pytest.importorskip("cloudpickle")  # the script's tool lives in __main__: sent by value
    marker = str(tmp_path / "worker.pid")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.Popen(
        [sys.executable, "-c", SIGINT_SCRIPT, marker],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_default_sigint,
    )
    worker = None
    try:
        deadline = time.monotonic() + 120
        while not os.path.exists(marker) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
        assert os.path.exists(marker), f"the tool never ran: {proc.communicate(timeout=30)}"
        worker = int(open(marker).read())
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode != 0 and "KeyboardInterrupt" in err, err
        assert not _alive(worker), "the tool's worker outlived the interrupt"
    finally:
        if proc.poll() is None:
            proc.kill()
        if worker is not None and _alive(worker):
            os.kill(worker, signal.SIGKILL)
