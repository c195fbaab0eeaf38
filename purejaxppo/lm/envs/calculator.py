"""The built-in calculator tool and its environment for arithmetic word problems.

:func:`evaluate` reads an expression with :mod:`ast` and computes it itself: numbers (``int``
and ``float`` literals), ``+ - * / **``, unary ``+ -`` and parentheses, nothing else (no names,
attributes, calls, comparisons or other operators), so no text can run code. The arithmetic is
Python's (``/`` is true division); each step is bounded: an integer past :data:`MAX_BITS` bits,
a power whose result would be, and a float that overflows are refused, as are a division by
zero and a negative number to a fractional power. Every refusal is a :class:`CalculatorError`
whose message says why (the model sees it as its call's response).
"""

from __future__ import annotations

import ast
import math
import operator
from typing import Union

from purejaxppo.lm.envs.tool_env import ToolEnv

MAX_BITS = 4096  # the largest integer kept: about 1,233 digits
MAX_LENGTH = 500  # the longest expression read
BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}
UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}
SYMBOLS = {ast.FloorDiv: "//", ast.Mod: "%", ast.BitXor: "^ (for a power write **)", ast.MatMult: "@"}
ALLOWED = "only numbers, + - * / ** and parentheses"

Number = Union[int, float]


class CalculatorError(ValueError):
    """An expression the calculator refuses: the message says why."""


def _checked(x: Number) -> Number:
    if isinstance(x, float) and not math.isfinite(x):
        raise CalculatorError("overflow: the result is too large for a float")
    if isinstance(x, int) and x.bit_length() > MAX_BITS:
        raise CalculatorError(f"overflow: the result has more than {MAX_BITS} bits")
    return x


def _power(base: Number, exponent: Number) -> Number:
    if base == 0 and exponent < 0:
        raise CalculatorError("division by zero: 0 to a negative power")
    if base < 0 and isinstance(exponent, float) and not exponent.is_integer():
        raise CalculatorError("a negative number to a fractional power is not a real number")
    # the result's size, bounded before it is computed: log2|base ** exponent|
    if abs(base) > 1 and exponent > 0 and exponent * math.log2(abs(base)) > MAX_BITS:
        raise CalculatorError(f"overflow: the power would have more than {MAX_BITS} bits")
    try:
        return base**exponent
    except OverflowError:
        raise CalculatorError("overflow: the power is too large for a float") from None


def _eval(node: ast.AST) -> Number:
    if isinstance(node, ast.Constant):
        if type(node.value) in (int, float):
            return _checked(node.value)
        raise CalculatorError(f"{node.value!r} is not a number ({ALLOWED})")
    if isinstance(node, ast.UnaryOp) and type(node.op) in UNARY:
        return UNARY[type(node.op)](_eval(node.operand))
    if isinstance(node, ast.BinOp):
        op = type(node.op)
        if op not in BINARY and op is not ast.Pow:
            raise CalculatorError(f"the operator {SYMBOLS.get(op, op.__name__)} is not allowed ({ALLOWED})")
        left, right = _eval(node.left), _eval(node.right)
        if op is ast.Pow:
            return _checked(_power(left, right))
        if op is ast.Div and right == 0:
            raise CalculatorError("division by zero")
        try:
            return _checked(BINARY[op](left, right))
        except OverflowError:  # an integer too large for a true division's float
            raise CalculatorError("overflow: the result is too large for a float") from None
    if isinstance(node, ast.Name):
        raise CalculatorError(f"names are not allowed: {node.id!r} ({ALLOWED})")
    if isinstance(node, ast.Attribute):
        raise CalculatorError(f"attributes are not allowed: {ast.unparse(node)!r} ({ALLOWED})")
    if isinstance(node, ast.Call):
        raise CalculatorError(f"function calls are not allowed: {ast.unparse(node)!r} ({ALLOWED})")
    raise CalculatorError(f"{ast.unparse(node)!r} is not arithmetic ({ALLOWED})")


def evaluate(expression: str) -> Number:
    """The value of an arithmetic expression (see the module).

    Args:
      expression: e.g. ``"(3 + 4) * 2 / 5"``.

    Returns:
      An ``int`` or a ``float``, as Python's own arithmetic gives it.

    Raises:
      CalculatorError: not arithmetic, or refused (the message says why).
    """
    if not isinstance(expression, str):
        raise CalculatorError(f"the expression must be a string, not {type(expression).__name__}")
    if len(expression) > MAX_LENGTH:
        raise CalculatorError(f"the expression is longer than {MAX_LENGTH} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as e:
        raise CalculatorError(f"not an arithmetic expression ({e.msg})") from None
    return _eval(tree.body)


def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression: numbers, + - * / ** and parentheses.

    (The first paragraph is the tool's description the model reads.)

    Args:
      expression: e.g. ``"(3 + 4) * 2 / 5"``.

    Returns:
      The value as Python prints it (``"2.8"``).

    Raises:
      CalculatorError: not arithmetic, or refused (:func:`evaluate`).
    """
    return str(evaluate(expression))


def calculator_env(**kwargs) -> ToolEnv:
    """The calculator :class:`~purejaxppo.lm.envs.tool_env.ToolEnv` for arithmetic word
    problems: rows with ``prompt`` and ``answer`` columns, the final answer scored by the
    ``math`` reward.

    Args:
      **kwargs: :class:`~purejaxppo.lm.envs.tool_env.ToolEnv`'s options (``fmt``,
        ``max_turns``, ``timeout``, ...).

    Returns:
      The environment, with one tool: ``calculator``.
    """
    return ToolEnv({"calculator": calculator}, **kwargs)
