"""Evaluation by pass@k: ``n`` completions sampled per held-out prompt, each scored by the
task's reward, summed up as pass@k and mean@n (:mod:`purejaxppo.lm.ppo.pass_at_k`).

:func:`sample_and_score` is the compiled part (jittable, vmappable over policies);
:func:`evaluate_pass_at_k` runs it and returns a :class:`PassAtK` with the per-sample scores
and, decoded, the prompts and completions.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from purejaxppo.lm.models.sampling import Response, sample_response
from purejaxppo.lm.ppo.pass_at_k import correct_counts, mean_at_k, pass_at_k


def resolved_ks(ks, n: int) -> tuple:
    """``ks`` ascending without repeats, each checked against ``n``; ``()``: ``(1, n)``."""
    ks = tuple(sorted(set(ks or (1, n))))
    bad = [k for k in ks if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= n]
    if n < 1 or bad:
        raise ValueError(f"each k of pass@k must be an integer in [1, n] (n = {n} samples per prompt), got {bad or n}")
    return tuple(int(k) for k in ks)


@dataclasses.dataclass(frozen=True)
class PassAtK:
    """A pass@k evaluation of ``P`` prompts, ``n`` sampled completions each.

    Attributes:
      n: completions sampled per prompt.
      ks: the k of each pass@k, ascending, each ``<= n``.
      threshold: a completion counts as correct where its score is ``>= threshold``.
      temperature: the sampling temperature.
      pass_at: ``{k: pass@k}``, the unbiased estimate per prompt averaged over the prompts.
      mean: mean@n, the mean score over every sample of every prompt.
      counts: ``[P]`` int: the correct completions of each prompt.
      scores: ``[P, n]`` float32: each completion's score.
      prompts: ``P`` decoded prompts (``()`` when not decoded).
      samples: ``P`` tuples of ``n`` decoded completions (``()`` when not decoded).
    """

    n: int
    ks: tuple
    threshold: float
    temperature: float
    pass_at: dict
    mean: float
    counts: np.ndarray
    scores: np.ndarray
    prompts: tuple = ()
    samples: tuple = ()

    @classmethod
    def from_scores(cls, scores, ks=(), threshold=1.0, temperature=1.0, prompts=(), samples=()) -> "PassAtK":
        """The record of ``scores [P, n]`` (``ks``: ``()`` is ``(1, n)``)."""
        scores = np.asarray(scores, np.float32)
        n = scores.shape[-1]
        ks = resolved_ks(ks, n)
        counts = correct_counts(scores, threshold)
        pass_at = {k: float(np.mean(pass_at_k(n, counts, k))) for k in ks}
        mean = float(np.mean(mean_at_k(scores)))
        return cls(
            n, ks, float(threshold), float(temperature), pass_at, mean, counts, scores, tuple(prompts), tuple(samples)
        )

    def metrics(self, prefix: str = "") -> dict:
        """``{"pass@1": ..., "pass@8": ..., "mean@8": ...}`` (each name after ``prefix``)."""
        return {**{f"{prefix}pass@{k}": v for k, v in self.pass_at.items()}, f"{prefix}mean@{self.n}": self.mean}

    def rows(self) -> list:
        """One JSON-ready dict per prompt: its text, completions, scores and correct count
        (needs the decoded record)."""
        return [
            {"prompt": prompt, "completions": list(texts), "scores": [float(s) for s in scores], "correct": int(c)}
            for prompt, texts, scores, c in zip(self.prompts, self.samples, self.scores, self.counts)
        ]


def sample_and_score(
    lm, params, task, prompt, prompt_valid, key, n: int, temperature=1.0, top_k: int = 0, top_p=1.0, rows=None
):
    """``n`` completions of every prompt, sampled with the KV cache, and the task's score of each.

    Jittable and vmappable (``lm``, ``task``, ``n`` and ``top_k`` static; :func:`evaluate_pass_at_k`
    also keeps ``top_p`` static, so at 1.0 the vocabulary is never sorted). Sample ``j`` of prompt
    ``i`` draws with its own key, ``split(key, P * n)[i * n + j]`` (``per_row``), so its tokens
    do not depend on the rows beside it.

    Args:
      lm: a :class:`~purejaxppo.lm.models.causal_lm.CausalLM`.
      params: its parameters.
      task: a :class:`~purejaxppo.lm.tasks.task_protocol.Task` (``score``, ``max_new``,
        ``stop_ids``, ``pad_id``).
      prompt, prompt_valid: ``[P, L]`` left-padded prompts.
      key: a PRNG key.
      n: completions per prompt.
      temperature, top_k, top_p: as :func:`~purejaxppo.lm.models.sampling.sample_tokens`.
      rows: ``[P]`` the prompts' row ids (:func:`evaluation_rows`: a text task's rewards read
        their columns), or None.

    Returns:
      ``(Response, scores)``: the completions, a :class:`~purejaxppo.lm.models.sampling.Response`
      of ``[P, n, T]`` arrays, and ``scores [P, n]`` float32.
    """
    p = prompt.shape[0]
    repeated = jnp.repeat(prompt, n, axis=0), jnp.repeat(prompt_valid, n, axis=0)
    out = sample_response(
        lm,
        params,
        jax.random.split(key, p * n),
        *repeated,
        task.max_new,
        jnp.asarray(task.stop_ids),
        task.pad_id,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        per_row=True,
    )
    ids = None if rows is None else jnp.repeat(rows, n)
    scores = task_scores(task, *repeated, out.tokens, out.mask, ids).astype(jnp.float32)
    return Response(*(x.reshape(p, n, -1) for x in out)), scores.reshape(p, n)


_compiled = jax.jit(sample_and_score, static_argnames=("lm", "task", "n", "top_k", "top_p"))


def evaluation_rows(task, batch: int):
    """The row ids ``[batch]`` of :func:`evaluation_prompts`' prompts where the task has rows (a
    text task: its rewards read the rows' columns by id), else None."""
    rows = getattr(task, "evaluation_rows", None)
    return rows(batch) if rows else None


def task_scores(task, prompt, prompt_valid, response, mask, rows=None):
    """``task.score`` of ``[B]`` responses, given their row ids where there are some (None: the
    task's plain four-argument score)."""
    if rows is None:
        return task.score(prompt, prompt_valid, response, mask)
    return task.score(prompt, prompt_valid, response, mask, rows=rows)


def decoded(task, prompt, prompt_valid, tokens) -> tuple:
    """Host side: ``(prompts, samples)``, the decoded text of ``prompt [P, L]`` and of each
    completion ``tokens [P, n, T]`` (a text task's own ``decode_prompt`` when it has one)."""
    prompt, prompt_valid, tokens = np.asarray(prompt), np.asarray(prompt_valid, bool), np.asarray(tokens)
    show = getattr(task, "decode_prompt", None)
    prompts = tuple(show(p, v) if show else task.decode(p[v]) for p, v in zip(prompt, prompt_valid))
    return prompts, tuple(tuple(task.decode(t) for t in row) for row in tokens)


def evaluate_pass_at_k(
    lm,
    params,
    task,
    prompt,
    prompt_valid,
    key,
    *,
    n: int,
    ks=(),
    temperature=1.0,
    threshold=1.0,
    top_k: int = 0,
    top_p=1.0,
    decode: bool = True,
    rows=None,
) -> PassAtK:
    """pass@k of a policy on held-out prompts: ``n`` completions sampled per prompt
    (:func:`sample_and_score`, jitted), each scored by the task's reward.

    Args:
      lm: a :class:`~purejaxppo.lm.models.causal_lm.CausalLM` (static, hashable).
      params: its parameters.
      task: a :class:`~purejaxppo.lm.tasks.task_protocol.Task` (static, hashable).
      prompt, prompt_valid: ``[P, L]`` left-padded held-out prompts (a text task's
        ``evaluation_prompts(P)``, or a built-in task's ``prompts(key, P)``).
      key: the sampling key.
      n: completions per prompt (``>= 1``).
      ks: the k of each pass@k (each ``<= n``); ``()``: 1 and ``n``.
      temperature, top_k, top_p: the sampling controls
        (:func:`~purejaxppo.lm.models.sampling.sample_tokens`).
      threshold: a completion counts as correct where its score is ``>= threshold``.
      decode: decode the prompts and completions (``task.decode``) into the record.
      rows: ``[P]`` the prompts' row ids (:func:`evaluation_rows`), or None.

    Returns:
      A :class:`PassAtK`: pass@k for each k, mean@n, the correct counts, every score and
      (``decode``) the texts.

    Raises:
      ValueError: a k outside ``[1, n]``.
      RewardFunctionError: a text task's Python reward failed on these completions.
    """
    ks = resolved_ks(ks, n)
    before = getattr(task, "reward_error", lambda: None)()
    response, scores = _compiled(
        lm, params, task, prompt, prompt_valid, key, n, jnp.asarray(temperature, jnp.float32), top_k, top_p, rows
    )
    if before is None:  # a text reward that failed on these completions
        getattr(task, "check_reward", lambda _: None)(before)
    texts = decoded(task, prompt, prompt_valid, response.tokens) if decode else ((), ())
    return PassAtK.from_scores(jax.device_get(scores), ks, threshold, temperature, *texts)


def evaluation_prompts(task, batch: int, key: Optional[jax.Array] = None) -> tuple:
    """``(prompt, prompt_valid)`` ``[batch, L]``: a text task's fixed evaluation prompts, else
    the task's ``prompts(key, batch)``."""
    fixed = getattr(task, "evaluation_prompts", None)
    return fixed(batch) if fixed else task.prompts(key, batch)
