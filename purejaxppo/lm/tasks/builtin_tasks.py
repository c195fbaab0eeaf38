"""Built-in tasks for token-level PPO: prompts, demonstrations (SFT data), a reward and metrics.

A task is a frozen (hashable) dataclass, so it can be a static argument under ``jit``; every
array method is pure and jittable. Token ids share one layout: ``PAD = 0``, ``EOS = 1``,
``SEP = 2`` (ends every prompt), content tokens from ``FIRST_CONTENT = 3``.

* :class:`GrammarTask` (``"grammar"``): the toy grammar of experiments/rlhf_toy.py, a seeded
  sparse Markov chain; the reward counts one TARGET token, so it is hackable (spam the target
  ungrammatically) and the interesting metric is the KL / grammaticality trade-off.
* :class:`ReverseTask` (``"reverse"``): a skill with an exact-match reward: reverse the digits.

Get one by name with :func:`make_task`. Both meet
:class:`~purejaxppo.lm.tasks.task_protocol.Task` (the protocol, re-exported here).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from purejaxppo.lm.tasks.task_protocol import Task  # noqa: F401  (the face imports it from here)

PAD, EOS, SEP = 0, 1, 2
FIRST_CONTENT = 3


# --- shared layout helpers -----------------------------------------------------------------
def _left_padded(content, length, prompt_len: int):
    """``content [B, N]``, ``length [B]`` -> ``(prompt [B, P], valid [B, P])``: the first
    ``length`` content tokens then SEP, ending at slot ``P-1``, PAD before them."""
    n = content.shape[1]
    k = jnp.arange(prompt_len)[None, :] - (prompt_len - 1 - length[:, None])  # index into content
    tok = jnp.take_along_axis(content, jnp.clip(k, 0, n - 1), axis=1)
    prompt = jnp.where(k < 0, PAD, jnp.where(k == length[:, None], SEP, tok)).astype(jnp.int32)
    return prompt, k >= 0


def _right_padded(content, length, max_new: int):
    """``content [B, N]`` (``N <= T``), ``length [B]`` -> ``(response [B, T], mask [B, T])``:
    the first ``length`` tokens, then EOS, then PAD."""
    n = content.shape[1]
    j = jnp.arange(max_new)[None, :]
    tok = jnp.take_along_axis(content, jnp.clip(j, 0, n - 1), axis=1)
    response = jnp.where(j < length[:, None], tok, jnp.where(j == length[:, None], EOS, PAD))
    return response.astype(jnp.int32), j <= length[:, None]


def _decode(tokens) -> str:
    """Content tokens as their index (``id - FIRST_CONTENT``), SEP as ``|``, EOS as ``<eos>``."""
    names = {EOS: "<eos>", SEP: "|"}
    return " ".join(names.get(t, str(t - FIRST_CONTENT)) for t in np.asarray(tokens).tolist() if t != PAD)


# --- the toy grammar -----------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def _grammar(seed: int, n_content: int, n_successors: int) -> np.ndarray:
    # the same draws as experiments/rlhf_toy.py's make_grammar, so the grammar is the toy's
    rng = np.random.default_rng(seed + 1000)
    trans = np.zeros((n_content, n_content))
    for i in range(n_content):
        succ = rng.choice([j for j in range(n_content) if j != i], size=n_successors, replace=False)
        trans[i, succ] = rng.dirichlet(np.ones(n_successors))
    trans.setflags(write=False)
    return trans


@dataclass(frozen=True)
class GrammarTask:
    """A seeded sparse Markov chain over ``n_content`` tokens: each has ``n_successors`` allowed
    successors (never itself) with Dirichlet probabilities. Prompt = ``prompt_min..prompt_max``
    chain tokens + SEP; demonstration = the chain's next ``resp_min..resp_max`` tokens + EOS.
    Score = the number of ``target`` tokens in the response (hackable on purpose).
    Diagnostics: ``grammatical`` (fraction of content->content transitions in the responses
    that the grammar allows, the first from the last prompt token across SEP),
    ``target_count``, ``eos_rate``, ``response_len``. ``ValueError`` for sizes that do not fit.

    Attributes:
      seed: the grammar's seed (the draws of experiments/rlhf_toy.py's grammar).
      n_content: content tokens ``C`` (``vocab_size = 3 + C``).
      n_successors: allowed successors per token, ``1 <= n_successors < C``.
      prompt_min, prompt_max: chain tokens per prompt (``prompt_len = prompt_max + 1``).
      resp_min, resp_max: chain tokens per demonstration, ``resp_max < max_new``.
      max_new: ``T``, the response budget.
      target: the content token id the score counts.
    """

    seed: int = 0
    n_content: int = 8
    n_successors: int = 3
    prompt_min: int = 2
    prompt_max: int = 4
    resp_min: int = 2
    resp_max: int = 6
    max_new: int = 10
    target: int = FIRST_CONTENT  # a token id

    name = "grammar"
    pad_id = PAD
    stop_ids = (EOS,)

    def __post_init__(self):
        if not (1 <= self.prompt_min <= self.prompt_max and 0 <= self.resp_min <= self.resp_max < self.max_new):
            raise ValueError(
                f"GrammarTask: need 1 <= prompt_min <= prompt_max and 0 <= resp_min <= resp_max < "
                f"max_new (room for EOS); got {self}"
            )
        if not 1 <= self.n_successors < self.n_content:
            raise ValueError(f"GrammarTask: need 1 <= n_successors < n_content, got {self}")
        if not FIRST_CONTENT <= self.target < self.vocab_size:
            raise ValueError(
                f"GrammarTask: target {self.target} is not a content id ({FIRST_CONTENT}..{self.vocab_size - 1})"
            )

    @property
    def vocab_size(self) -> int:
        return FIRST_CONTENT + self.n_content

    @property
    def prompt_len(self) -> int:
        return self.prompt_max + 1  # + SEP

    def transitions(self) -> np.ndarray:
        """``[C, C]`` float64 transition matrix (row ``i``: successors of content index ``i``)."""
        return _grammar(self.seed, self.n_content, self.n_successors)

    def prompts(self, key, batch: int):
        return self.demonstrations(key, batch)[:2]

    def demonstrations(self, key, batch: int):
        k_lp, k_lr, k_start, k_chain = jax.random.split(key, 4)
        lp = jax.random.randint(k_lp, (batch,), self.prompt_min, self.prompt_max + 1)
        lr = jax.random.randint(k_lr, (batch,), self.resp_min, self.resp_max + 1)
        log_trans = jnp.log(jnp.asarray(self.transitions(), jnp.float32) + 1e-30)
        x0 = jax.random.randint(k_start, (batch,), 0, self.n_content)

        def step(x, k):
            nxt = jax.random.categorical(k, log_trans[x], axis=-1)
            return nxt, nxt

        n = self.prompt_max + self.resp_max
        _, rest = jax.lax.scan(step, x0, jax.random.split(k_chain, n - 1))
        chain = jnp.concatenate([x0[:, None], rest.T], axis=1) + FIRST_CONTENT  # [B, n]
        prompt, prompt_valid = _left_padded(chain, lp, self.prompt_len)
        cont = jnp.take_along_axis(chain, jnp.clip(lp[:, None] + jnp.arange(self.resp_max), 0, n - 1), axis=1)
        response, mask = _right_padded(cont, lr, self.max_new)
        return prompt, prompt_valid, response, mask

    def score(self, prompt, prompt_valid, response, response_mask):
        return jnp.sum((response == self.target) & response_mask, axis=1).astype(jnp.float32)

    def diagnostics(self, prompt, prompt_valid, response, response_mask):
        mask = response_mask.astype(bool)
        # the token before response[j]: the last prompt token before SEP for j = 0
        prev = jnp.concatenate([prompt[:, -2:-1], response[:, :-1]], axis=1)
        is_content = lambda t: t >= FIRST_CONTENT  # noqa: E731
        pair = mask & is_content(response) & is_content(prev)
        allowed = jnp.asarray(self.transitions() > 0)
        ok = allowed[jnp.clip(prev - FIRST_CONTENT, 0), jnp.clip(response - FIRST_CONTENT, 0)]
        return {
            "grammatical": jnp.sum(ok & pair) / jnp.maximum(jnp.sum(pair), 1),
            "target_count": jnp.mean(self.score(prompt, prompt_valid, response, mask)),
            "eos_rate": jnp.mean(jnp.any((response == EOS) & mask, axis=1)),
            "response_len": jnp.mean(jnp.sum(mask, axis=1)),
        }

    decode = staticmethod(_decode)


# --- reversal: a skill with an exact-match reward ------------------------------------------
@dataclass(frozen=True)
class ReverseTask:
    """Reverse a digit string. Prompt = ``L`` digits (``L`` uniform in ``min_len..max_len``,
    digits uniform in ``0..n_digits-1``, token ``FIRST_CONTENT + digit``) + SEP; the correct
    response is the digits reversed + EOS (``L + 1`` tokens). ``ValueError`` unless
    ``1 <= min_len <= max_len < max_new`` and ``n_digits >= 2``.

    Attributes:
      n_digits: the alphabet (``vocab_size = 3 + n_digits``).
      min_len, max_len: the digits per prompt (``prompt_len = max_len + 1``).
      max_new: ``T``, the response budget (room for EOS and for an overrun to be seen).
      partial_credit: score the share of correct positions instead of the exact match.

    Score: 1.0 for an exact match (the ``L`` reversed digits, EOS right after them, nothing
    else in the mask), else 0. With ``partial_credit`` the score is instead the number of
    correct target positions (digits and the EOS) divided by ``max(L + 1, response length)``,
    so 1.0 exactly when the match is exact. Diagnostics: ``exact_match``,
    ``position_accuracy`` (fraction of the ``L + 1`` target positions right), ``digit_accuracy``
    (the ``L`` digit positions only), ``length_ok`` (exactly ``L`` tokens then EOS),
    ``eos_rate``, ``response_len``.

    Sizes: with the defaults a tiny TinyLM learns the skill only gradually, so a short SFT
    leaves room for RL. Measured (exact-match rate on 2048 prompts, greedy / temperature 1;
    ``init_tiny_lm`` d_model 32 (64 in the last column), 2 layers, 2 heads; ``train_sft``
    batch 64, lr 3e-3; x86 CPU)::

        python -m purejaxppo.lm.sft.sft_training --task reverse --chunk 25 --chunks 16 --eval-batch 2048 [--seed 1] [--d-model 64]

        SFT steps | seed 0       | seed 1       | seed 0, d_model 64
               0  | 0.000 / 0.000| 0.000 / 0.000| 0.000 / 0.000
              50  | 0.090 / 0.027| 0.115 / 0.045| 0.191 / 0.143
             100  | 0.437 / 0.276| 0.241 / 0.171| 0.500 / 0.400
             200  | 0.848 / 0.749| 0.597 / 0.521| 0.722 / 0.646
             400  | 0.962 / 0.931| 0.875 / 0.826| 0.833 / 0.755

    About 2 s of training per 100 steps plus ~20 s to compile on one core; at
    ``max_len=6`` the skill is too easy (0.93 greedy after 100 steps).
    """

    n_digits: int = 10
    min_len: int = 2
    max_len: int = 10
    max_new: int = 12  # > max_len: room for EOS and for an overrun to be seen
    partial_credit: bool = False

    name = "reverse"
    pad_id = PAD
    stop_ids = (EOS,)

    def __post_init__(self):
        if not (1 <= self.min_len <= self.max_len < self.max_new and self.n_digits >= 2):
            raise ValueError(f"ReverseTask: need 1 <= min_len <= max_len < max_new and n_digits >= 2; got {self}")

    @property
    def vocab_size(self) -> int:
        return FIRST_CONTENT + self.n_digits

    @property
    def prompt_len(self) -> int:
        return self.max_len + 1  # + SEP

    def prompts(self, key, batch: int):
        return self.demonstrations(key, batch)[:2]

    def demonstrations(self, key, batch: int):
        k_len, k_dig = jax.random.split(key)
        length = jax.random.randint(k_len, (batch,), self.min_len, self.max_len + 1)
        digits = jax.random.randint(k_dig, (batch, self.max_len), 0, self.n_digits) + FIRST_CONTENT
        prompt, prompt_valid = _left_padded(digits, length, self.prompt_len)
        rev = jnp.take_along_axis(digits, jnp.clip(length[:, None] - 1 - jnp.arange(self.max_len), 0), axis=1)
        response, mask = _right_padded(rev, length, self.max_new)
        return prompt, prompt_valid, response, mask

    def _check(self, prompt, prompt_valid, response, response_mask):
        """``(correct [B, T], target_mask [B, T], length [B])``: ``correct`` where the response
        has the target token at a target position (``j <= L``) inside its mask."""
        length = jnp.sum(prompt_valid, axis=1) - 1  # minus SEP
        p, j = prompt.shape[1], jnp.arange(response.shape[1])[None, :]
        # the prompt's digits end at slot P-2, so response digit j is prompt slot P-2-j whatever L is
        mirrored = jnp.take_along_axis(prompt, jnp.clip(p - 2 - j, 0, p - 1), axis=1)
        target = jnp.where(j < length[:, None], mirrored, EOS)
        target_mask = j <= length[:, None]
        return (response == target) & response_mask.astype(bool) & target_mask, target_mask, length

    def score(self, prompt, prompt_valid, response, response_mask):
        correct, target_mask, length = self._check(prompt, prompt_valid, response, response_mask)
        if self.partial_credit:
            n = jnp.maximum(length + 1, jnp.sum(response_mask, axis=1))
            return (jnp.sum(correct, axis=1) / n).astype(jnp.float32)
        exact = jnp.all(jnp.where(target_mask, correct, ~response_mask.astype(bool)), axis=1)
        return exact.astype(jnp.float32)

    def diagnostics(self, prompt, prompt_valid, response, response_mask):
        mask = response_mask.astype(bool)
        correct, target_mask, length = self._check(prompt, prompt_valid, response, mask)
        digit_pos = target_mask & (jnp.arange(response.shape[1])[None, :] < length[:, None])
        n_resp = jnp.sum(mask, axis=1)
        last = jnp.take_along_axis(response, jnp.clip(n_resp - 1, 0)[:, None], axis=1)[:, 0]
        exact = jnp.all(jnp.where(target_mask, correct, ~mask), axis=1)
        return {
            "exact_match": jnp.mean(exact),
            "position_accuracy": jnp.mean(jnp.sum(correct, axis=1) / (length + 1)),
            "digit_accuracy": jnp.sum(correct & digit_pos) / jnp.maximum(jnp.sum(digit_pos), 1),
            "length_ok": jnp.mean((n_resp == length + 1) & (last == EOS)),
            "eos_rate": jnp.mean(jnp.any((response == EOS) & mask, axis=1)),
            "response_len": jnp.mean(n_resp),
        }

    decode = staticmethod(_decode)


TASKS = {"grammar": GrammarTask, "reverse": ReverseTask}


def make_task(name: str, **overrides):
    """A built-in task by name.

    Args:
      name: ``"grammar"`` or ``"reverse"`` (:data:`TASKS`).
      **overrides: dataclass fields of the task (e.g. ``max_len=6``).

    Returns:
      The :class:`GrammarTask` or :class:`ReverseTask` (frozen, hashable).

    Raises:
      ValueError: an unknown name, or fields that do not fit the task.
      TypeError: a field the task does not have.
    """
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; known tasks: {', '.join(sorted(TASKS))}")
    return TASKS[name](**overrides)
