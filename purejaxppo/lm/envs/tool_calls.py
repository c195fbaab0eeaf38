"""Tool calls in the chat template: how tools are described to the model, how its calls are
read out of a turn's text, and how the tools' responses are written back.

Two formats (:data:`FORMATS`), one :class:`ToolFormat` record each:

* ``qwen``: Qwen2.5 / Qwen3's own markers, as their chat templates render them. The tools are
  listed as JSON function schemas in the system turn; a call is
  ``<tool_call>\\n{"name": NAME, "arguments": {...}}\\n</tool_call>``; the responses come back in
  a user turn, one ``<tool_response>\\n...\\n</tool_response>`` block per call, then the
  assistant's turn opens again.
* ``plain``: for models without tool markers. A call is ``<tool_call>NAME(ARGS)</tool_call>``
  with ARGS written as in Python, literals only (``calculator("2 + 3")``,
  ``lookup(key="a", n=2)``); a response is ``<tool_response>...</tool_response>`` on its own line.

Parsing rules (:func:`parse_turn`), the same for both formats:

* A turn without a call marker is the final answer.
* Every ``call_open ... call_close`` span is one call, in order; a call whose body does not
  parse, names an unknown tool, or has no closing marker becomes a :class:`CallError` whose
  message is said to the model in that call's response; the turn's other calls still run.
* A turn with more than ``max_calls`` calls: the first ``max_calls`` run, each further one is a
  :class:`CallError` saying so (the model sees one response per call it wrote).
* Text around the calls (reasoning, a preamble) is allowed and ignored.
"""

from __future__ import annotations

import ast
import inspect
import json
import re
import typing
from typing import Callable, Mapping, NamedTuple, Optional, Sequence, Union

END = "<|im_end|>"  # Qwen's end of a chat turn
# Qwen2.5's default system text (its template's, when no system message is given); Qwen3 has none
QWEN25_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."


class Call(NamedTuple):
    """One well-formed tool call: ``tools[name](*positional, **arguments)``.

    Attributes:
      name: the tool's name.
      arguments: keyword arguments (JSON values, or Python literals in the ``plain`` format).
      positional: positional arguments (the ``plain`` format only).
    """

    name: str
    arguments: dict
    positional: tuple = ()


class CallError(NamedTuple):
    """One call that cannot run.

    Attributes:
      message: what is wrong and how to write it (the model sees it as the call's response).
    """

    message: str


class Turn(NamedTuple):
    """A model's turn, parsed.

    Attributes:
      calls: :class:`Call` or :class:`CallError` per call written, in order; empty: the turn is
        the final answer (``final``).
    """

    calls: tuple

    @property
    def final(self) -> bool:
        return not self.calls


class ToolFormat(NamedTuple):
    """How one model family writes tool calls.

    Attributes:
      name: the format's name (a key of :data:`FORMATS`).
      call_open, call_close: the markers around one call.
      parse_body: ``(text between the markers) -> Call``; raises ``ValueError`` whose message
        the model sees.
      describe: ``(tools, system) -> str``: the instructions listing the tools (``system``: the
        system prompt's own text, "" for none).
      prompt: ``(instructions, row prompt) -> str``: the episode's first text.
      observation: ``(action, responses) -> str``: the text after the model's turn ``action``
        carrying one response per call, in order.
    """

    name: str
    call_open: str
    call_close: str
    parse_body: Callable[[str], Call]
    describe: Callable[[Mapping[str, Callable], str], str]
    prompt: Callable[[str, str], str]
    observation: Callable[[str, Sequence[str]], str]


# --- describing the tools --------------------------------------------------------------------
JSON_TYPES = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    list: "array",
    tuple: "array",
    dict: "object",
}


def _hints(fn: Callable) -> dict:
    try:
        return typing.get_type_hints(fn if inspect.isroutine(fn) else type(fn).__call__)
    except Exception:  # an annotation that does not resolve: described without types
        return {}


def signature(fn: Callable) -> Optional[inspect.Signature]:
    """``inspect.signature(fn)``, or None for a builtin without one."""
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):
        return None


def summary(fn: Callable) -> str:
    """A tool's description: its docstring's first paragraph, on one line ("" for none)."""
    doc = inspect.getdoc(fn) or ""
    return " ".join(doc.split("\n\n")[0].split())


def tool_schema(name: str, fn: Callable) -> dict:
    """The JSON function schema Qwen's template lists: name, description (:func:`summary`) and
    parameters (JSON types from the annotations; required: those without a default)."""
    hints, props, required, sig = _hints(fn), {}, [], signature(fn)
    for p in sig.parameters.values() if sig is not None else ():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        origin = typing.get_origin(hints.get(p.name)) or hints.get(p.name)
        props[p.name] = {"type": JSON_TYPES[origin]} if origin in JSON_TYPES else {}
        if p.default is p.empty:
            required.append(p.name)
    params = {"type": "object", "properties": props, "required": required}
    return {"type": "function", "function": {"name": name, "description": summary(fn), "parameters": params}}


# --- qwen ------------------------------------------------------------------------------------
QWEN_TOOLS = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
)
QWEN_CALL_HOW = (
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}'
    "\n</tool_call>"
)
QWEN_CALL = '<tool_call>\n{"name": NAME, "arguments": {...}}\n</tool_call>'


def _qwen_describe(tools: Mapping[str, Callable], system: str) -> str:
    # as Qwen's template renders a system turn with tools (json.dumps's separators are its tojson's)
    listed = "".join("\n" + json.dumps(tool_schema(n, f), ensure_ascii=False) for n, f in tools.items())
    head = system + "\n\n" if system else ""
    return f"<|im_start|>system\n{head}{QWEN_TOOLS}{listed}{QWEN_CALL_HOW}{END}\n"


def _qwen_prompt(instructions: str, prompt: str) -> str:
    return f"{instructions}<|im_start|>user\n{prompt}{END}\n<|im_start|>assistant\n"


def _qwen_observation(action: str, responses: Sequence[str]) -> str:
    # the assistant turn closes (unless its own end token was kept), the responses come back in a
    # user turn, and the assistant's next turn opens
    close = "" if action.rstrip().endswith(END) else END
    blocks = "".join(f"\n<tool_response>\n{r}\n</tool_response>" for r in responses)
    return f"{close}\n<|im_start|>user{blocks}{END}\n<|im_start|>assistant\n"


def _qwen_body(body: str) -> Call:
    try:
        obj = json.loads(body)
    except json.JSONDecodeError as e:
        raise ValueError(f"the tool call is not valid JSON ({e}); write {QWEN_CALL}") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        raise ValueError(f'the tool call needs a JSON object with a "name" string; write {QWEN_CALL}')
    arguments = obj.get("arguments", {})
    if not isinstance(arguments, dict):
        raise ValueError(f'"arguments" must be a JSON object, not {type(arguments).__name__}; write {QWEN_CALL}')
    return Call(obj["name"], arguments)


QWEN = ToolFormat("qwen", "<tool_call>", "</tool_call>", _qwen_body, _qwen_describe, _qwen_prompt, _qwen_observation)


# --- plain -----------------------------------------------------------------------------------
PLAIN_CALL = "<tool_call>NAME(ARGUMENTS)</tool_call>"


def _plain_describe(tools: Mapping[str, Callable], system: str) -> str:
    lines = [f"- {n}{signature(f) or '(...)'}" + (f": {summary(f)}" if summary(f) else "") for n, f in tools.items()]
    how = (
        f"You can call a tool by writing {PLAIN_CALL}, the arguments written as in Python "
        "(literals only); its result comes back as <tool_response>...</tool_response>. "
        "A turn without a tool call is your final answer.\nTools:\n"
    )
    return (system + "\n\n" if system else "") + how + "\n".join(lines)


def _plain_prompt(instructions: str, prompt: str) -> str:
    return f"{instructions}\n\n{prompt}\n"


def _plain_observation(action: str, responses: Sequence[str]) -> str:
    return "\n" + "".join(f"<tool_response>{r}</tool_response>\n" for r in responses)


def _literal(node: ast.AST):
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, RecursionError):
        raise ValueError(
            f"the argument {ast.unparse(node)!r} is not a literal (a number, a string, a list ...)"
        ) from None


def _plain_body(body: str) -> Call:
    try:
        node = ast.parse(body.strip(), mode="eval").body
    except SyntaxError as e:
        raise ValueError(f"the tool call does not parse ({e.msg}); write {PLAIN_CALL}") from None
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise ValueError(f"the tool call must be one call of a tool by its name; write {PLAIN_CALL}")
    if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
        raise ValueError("the tool call cannot use * or ** arguments; write each argument")
    arguments = {k.arg: _literal(k.value) for k in node.keywords}
    return Call(node.func.id, arguments, tuple(_literal(a) for a in node.args))


PLAIN = ToolFormat(
    "plain", "<tool_call>", "</tool_call>", _plain_body, _plain_describe, _plain_prompt, _plain_observation
)

FORMATS = {"qwen": QWEN, "plain": PLAIN}


def get_format(fmt: Union[str, ToolFormat]) -> ToolFormat:
    """A format by name (a :class:`ToolFormat` passes through).

    Args:
      fmt: ``"qwen"``, ``"plain"`` (:data:`FORMATS`) or a :class:`ToolFormat`.

    Returns:
      The :class:`ToolFormat`.

    Raises:
      ValueError: an unknown name (the message lists the known ones).
    """
    if isinstance(fmt, ToolFormat):
        return fmt
    if fmt not in FORMATS:
        raise ValueError(f"unknown tool-call format {fmt!r}: use one of {sorted(FORMATS)} or a ToolFormat")
    return FORMATS[fmt]


# --- parsing a turn --------------------------------------------------------------------------
def parse_turn(text: str, fmt: ToolFormat, names: Sequence[str] = (), max_calls: int = 4) -> Turn:
    """A model's turn read by the module's rules.

    Args:
      text: the turn's text.
      fmt: the :class:`ToolFormat`.
      names: the known tools (a call to another name is a :class:`CallError`); empty: any name.
      max_calls: the most calls run in one turn.

    Returns:
      The :class:`Turn`.
    """
    calls, at = [], 0
    opener = re.compile(re.escape(fmt.call_open))
    while True:
        m = opener.search(text, at)
        if m is None:
            break
        end = text.find(fmt.call_close, m.end())
        if end < 0:
            calls.append(CallError(f"a {fmt.call_open} without its closing {fmt.call_close}"))
            break
        calls.append(_one_call(text[m.end() : end], fmt, names))
        at = end + len(fmt.call_close)
    over = CallError(f"at most {max_calls} tool calls a turn: this call was not run")
    return Turn(tuple(c if i < max_calls else over for i, c in enumerate(calls)))


def _one_call(body: str, fmt: ToolFormat, names: Sequence[str]) -> Union[Call, CallError]:
    try:
        call = fmt.parse_body(body)
    except ValueError as e:
        return CallError(str(e))
    if names and call.name not in names:
        return CallError(f"unknown tool {call.name!r}: the tools are {', '.join(names)}")
    return call
