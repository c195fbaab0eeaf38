"""A verifier that needs no dataset column: the gold answer of a chain-sum prompt computed from
its own text, the completion's final answer read as the library's ``math`` reward reads it (the
last ``<answer>`` tag, else the last number). ``python -m purejaxppo rlhf --reward
experiments/rlvr/rlvr_verifier.py:chain_sum``; the demonstration itself uses the built-in
``--reward math`` / ``--reward reasoning-gym``, which read the rows' columns."""

from __future__ import annotations

import re

TAG = re.compile(r"<answer>(.*?)</answer>", re.S)
NUMBER = re.compile(r"-?\d+")
EXPRESSION = re.compile(r":\s*(-?\d+(?:\s*[-+]\s*\d+)*)\s*=\s*$")


def gold(prompt: str):
    """The value of the expression ending a chain-sum prompt (``... problem: 4 - 6 + 3 =``), or
    None when the prompt ends with none."""
    m = EXPRESSION.search(prompt)
    if not m:
        return None
    toks = re.findall(r"-?\d+|[-+]", m.group(1).replace(" ", " "))
    total = int(toks[0])
    for op, t in zip(toks[1::2], toks[2::2]):
        total = total + int(t) if op == "+" else total - int(t)
    return total


def final_number(text: str):
    """The completion's final answer as an integer (None: none)."""
    tags = TAG.findall(text)
    found = NUMBER.findall(tags[-1] if tags else text)
    return int(found[-1]) if found else None


def chain_sum(prompts, completions):
    """1.0 where the completion's final answer equals the prompt's value, else 0.0."""
    return [float(g is not None and final_number(c) == g) for p, c in zip(prompts, completions) for g in [gold(p)]]
