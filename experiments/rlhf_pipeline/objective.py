"""The pipeline's synthetic world: the text corpus (prompts asking to describe a thing, answers
listing adjectives) and the hidden TRUE objective the preferences are labelled with.

No JAX here: this file is also the ``--reward FILE.py:true_reward`` of the ceiling runs.

True objective of a response (verifiable, on the decoded text)::

    true = #distinct positive adjectives - #negative adjectives - #repeated adjectives

The corpus draws 1-4 adjectives uniformly (with replacement) from 8 positive, 6 negative and
8 neutral ones, so the SFT model scores about 0.2 on average and the best answer within the
token budget (all 8 positive adjectives once) scores 8. Repeats are rare in the corpus (a
preference pair seldom tells "happy, happy" from "happy, kind"), the place where a learned
reward model is most likely to be wrong and PPO against it to over-optimise.
"""

from __future__ import annotations

import re

import numpy as np

NOUNS = "cat dog house tree river city garden song bird car book lake road cake room sky".split()
POSITIVE = tuple("happy kind bright warm lovely gentle calm sweet".split())
NEGATIVE = tuple("sad cold dark angry dull ugly".split())
NEUTRAL = tuple("big small old new red green tall round".split())
ADJECTIVES = POSITIVE + NEGATIVE + NEUTRAL
PROMPT_FORMS = ("describe the {}:", "tell me about the {}:", "what is the {} like?")


def prompts() -> list:
    """Every prompt (3 forms x 16 nouns = 48), in a fixed order."""
    return [form.format(n) for form in PROMPT_FORMS for n in NOUNS]


def adjective_list(words) -> str:
    """``a``, ``a and b``, ``a , b and c``, ...: the corpus's way of listing."""
    words = list(words)
    if len(words) == 1:
        return words[0]
    return " , ".join(words[:-1]) + " and " + words[-1]


def response(rng: np.random.Generator, noun: str) -> str:
    """One demonstration answer about ``noun``: 1-4 adjectives drawn uniformly with replacement
    in one of four sentence forms (a leading space: it follows the prompt's colon)."""
    adjs = adjective_list(rng.choice(ADJECTIVES, size=int(rng.integers(1, 5))))
    form = int(rng.integers(4))
    if form == 0:
        return f" the {noun} is {adjs} ."
    if form == 1:
        return f" it is {adjs} ."
    if form == 2:
        return f" the {noun} looks {adjs} ."
    return f" a {adjs} {noun} ."


def corpus(n: int, seed: int) -> list:
    """``n`` ``(prompt, response)`` pairs from a seeded generator."""
    rng = np.random.default_rng(seed)
    table = prompts()
    out = []
    for _ in range(n):
        p = table[int(rng.integers(len(table)))]
        noun = next(w for w in NOUNS if f" {w}" in f" {p.replace(':', ' ').replace('?', ' ')} ")
        out.append((p, response(rng, noun)))
    return out


def words(text: str) -> list:
    return re.findall(r"[a-z]+", text.lower())


def true_score(response_text: str) -> float:
    """The hidden objective of one response (see the module docstring)."""
    adjs = [w for w in words(response_text) if w in ADJECTIVES]
    positive = len({w for w in adjs if w in POSITIVE})
    negative = sum(w in NEGATIVE for w in adjs)
    return float(positive - negative - (len(adjs) - len(set(adjs))))


def true_reward(prompts: list, responses: list) -> list:
    """The ``--reward`` form: ``(prompts, responses) -> [float]``."""
    return [true_score(r) for r in responses]
