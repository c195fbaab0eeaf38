"""The experience stage of token-level PPO: sample responses, score them, shape the rewards.

:func:`collect` is the token world's rollout, in two steps. Given left-padded prompts, :func:`sample` draws
responses with the policy's KV cache (:func:`purejaxppo.lm.models.sampling.sample_response`, one key per
row); :func:`score` re-reads the whole sequences teacher-forced (policy, reference, critic) and scores them:
an :class:`~purejaxppo.lm.ppo.token_records.Experience`. :func:`finish` folds the per-token KL into the
rewards and puts the score on the LAST valid response token (the stop token when one was generated; never a
prompt or pad slot), giving the update's :class:`~purejaxppo.lm.ppo.token_records.TokenBatch`. The
advantages (GAE and whitening, or a group baseline: :mod:`purejaxppo.lm.ppo.sequence_rewards`) are computed
over the whole batch (over every device's rows, see :mod:`purejaxppo.lm.ppo.token_phases`).

Old log-probs. The policy being trained is the distribution responses are sampled FROM: the policy's logits
divided by ``temperature`` and cut to the top-k / top-p set (:func:`purejaxppo.lm.models.sampling.filter_logits`).
``logp_old`` is the teacher-forced log-prob under that distribution, and the loss computes ``logp_new`` the
same way, so the first minibatch's ratio is 1 (to float rounding) with every sampling control. The log-probs
the sampler reported are kept only to measure ``logp_mismatch`` (the decode path against the teacher-forced
pass). With one gradient step per batch the update's own log-probs, gradient stopped, are the old ones
instead (no policy pass: :func:`~purejaxppo.lm.ppo.token_update.detached`). The reference is scored at the
same temperature and never cut (a cut reference would make the KL infinite on tokens outside its set),
except for the pad id: the sampler never draws it (:func:`~purejaxppo.lm.models.sampling.sample_response`),
so the policy's law, its old and new log-probs and the reference all renormalise without it.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp

from purejaxppo.lm.models.sampling import filter_logits, sample_response
from purejaxppo.lm.ppo import token_stages as tk
from purejaxppo.lm.ppo.sequence_rewards import advantages, shaped_score, stopped  # noqa: F401  (named here too)
from purejaxppo.lm.ppo.token_records import Experience, TokenBatch, update_batch

#: ``reward(reward_params, prompt [B, P], prompt_valid [B, P], response [B, T], mask [B, T]) -> [B]``
RewardFn = Callable[[Any, jax.Array, jax.Array, jax.Array, jax.Array], jax.Array]


class Models(NamedTuple):
    """The models of the iteration's roles.

    Attributes:
      policy: the actor, a :class:`~purejaxppo.lm.models.causal_lm.CausalLM`.
      reference: scores the KL; frozen.
      critic: its ``values(params, tokens [B, L], valid [B, L]) -> [B, L]``; None when the
        values come from the policy's own value head.
      reward: a :data:`RewardFn`, ``-> [B]``.
      values: False: no critic at all (a group baseline): no value is computed, values read 0.
    """

    policy: Any
    reference: Any
    critic: Optional[Any]
    reward: RewardFn
    values: bool = True


def _aligned(per_position, first: int):
    """``[B, L - first]`` values of positions ``first..L-1`` (position ``t`` predicts token
    ``t + 1``) -> ``[B, L]`` aligned to tokens: zeros at slots ``0..first``, the last dropped."""
    pad = jnp.zeros(per_position.shape[:1] + (first + 1,), per_position.dtype)
    return jnp.concatenate([pad, per_position[:, :-1]], axis=1)


def picked_logprobs(logp_all, tokens, first: int = 0):
    """``logp_all [B, L - first, V]`` (log-probs of positions ``first..L-1``) -> ``[B, L]``: the
    log-prob of each token given those before it, aligned to tokens
    (:func:`purejaxppo.lm.ppo.token_stages.token_logprobs`'s layout), 0 at slots ``0..first``."""
    picked = jnp.take_along_axis(logp_all[:, :-1], tokens[:, first + 1 :, None].astype(jnp.int32), axis=-1)[..., 0]
    return _aligned(jnp.concatenate([picked, picked[:, :1]], axis=1), first)


def filtered_logprobs(logits, tokens, cfg, first: int = 0):
    """Log-probs and entropies of the sampled-from distribution (the pad id cut, as the sampler
    does), aligned to tokens (:func:`purejaxppo.lm.ppo.token_stages.token_logprobs`'s layout).

    One ``log_softmax`` serves both. Tokens cut by top-k / top-p or as pad have probability 0:
    their entropy terms are 0, never NaN (a pad in the PROMPT gets ``logp = -inf``; it is
    outside the mask).

    Args:
      logits: ``[B, L - first, V]``, the logits of positions ``first..L-1``.
      tokens: ``[B, L]`` int.
      cfg: its ``temperature``, ``top_k``, ``top_p`` and ``pad_id`` are read.
      first: static; with ``first = P - 1`` the prompt's positions, which predict no response
        token, are never computed.
    Returns:
      ``(logp [B, L], entropy [B, L])`` float32; slots ``0..first`` read 0.
    """
    x = filter_logits(logits, cfg.temperature, cfg.top_k, cfg.top_p, cfg.pad_id)
    logp_all = jax.nn.log_softmax(x, axis=-1)
    finite = jnp.isfinite(logp_all)
    plogp = jnp.where(finite, jnp.exp(logp_all) * jnp.where(finite, logp_all, 0.0), 0.0)
    return picked_logprobs(logp_all, tokens, first), _aligned(-jnp.sum(plogp, axis=-1), first)


def _takes_first(fn) -> bool:
    return "first" in inspect.signature(fn).parameters


def role_logits(model, params, tokens, valid, first: int = 0):
    """``[B, L - first, V]``: a model's logits of positions ``first..L-1`` (computed only there
    when its ``logits`` takes ``first``, e.g. :class:`~purejaxppo.lm.models.adapters.FlaxLM`)."""
    if first and _takes_first(model.logits):
        return model.logits(params, tokens, valid, first)
    return model.logits(params, tokens, valid)[:, first:]


def heads(models: Models, params: dict, tokens, valid, first: int = 0):
    """``(logits [B, L - first, V], values [B, L])`` of the policy (positions ``first..L-1``)
    and the critic, values aligned to tokens (``values[:, t]`` is V of the state before token
    ``t``; zeros without a critic)."""
    if not models.values:
        logits = role_logits(models.policy, params["policy"], tokens, valid, first)
        return logits, jnp.zeros(tokens.shape, jnp.float32)
    if models.critic is None:
        if first and _takes_first(models.policy.forward):
            logits, values = models.policy.forward(params["policy"], tokens, valid, first)
        else:
            logits, values = models.policy.forward(params["policy"], tokens, valid)
            logits = logits[:, first:]
    else:
        logits = role_logits(models.policy, params["policy"], tokens, valid, first)
        values = models.critic.values(params["critic"], tokens, valid)
    return logits, tk.shift_right(values)


#: token slots per teacher-forced scoring pass (:func:`pass_rows`): on CPU, a T = 256 batch of 64 rows
#: scored in 8 passes of 8 rows took 0.12 s against 0.23 s in one pass (cache-sized activations,
#: benchmarks/NOTES.md); shorter batches stay one pass.
PASS_SLOTS = 4096


def pass_rows(rows: int, length: int, slots: int = PASS_SLOTS) -> int:
    """The largest divisor of ``rows`` whose sequences of ``length`` hold at most ``slots``
    token slots (at least 1): the rows per scoring pass."""
    fit = max(1, slots // max(length, 1))
    return max(d for d in range(1, rows + 1) if rows % d == 0 and d <= fit)


def in_row_chunks(fn, rows: int, *arrays):
    """``fn(*arrays)`` for row-wise ``fn`` (every output ``[B, ...]``, row ``i`` a function of
    the inputs' row ``i``), computed ``rows`` rows at a time (``lax.map``) when ``rows < B``."""
    b = arrays[0].shape[0]
    if rows >= b:
        return fn(*arrays)
    out = jax.lax.map(lambda a: fn(*a), jax.tree.map(lambda x: x.reshape((b // rows, rows) + x.shape[1:]), arrays))
    return jax.tree.map(lambda x: x.reshape((b,) + x.shape[2:]), out)


def sample(models: Models, params: dict, row_keys, prompt, prompt_valid, cfg):
    """Responses of the policy to the prompts, with its KV cache
    (:func:`~purejaxppo.lm.models.sampling.sample_response`, ``per_row``).

    The cache grows in ``cfg.length_buckets`` rungs (``sample_response``'s ``rungs``; kept
    without stop ids too: early decode steps then attend over fewer slots).

    Args:
      models: the :class:`Models`; the policy samples.
      params: ``{"policy", "critic"}`` as the models run them (LoRA merged or attached).
      row_keys: ``[B]`` keys; row ``i`` is drawn with ``row_keys[i]`` alone.
      prompt, prompt_valid: ``[B, P]`` int / bool, left-padded.
      cfg: the :class:`~purejaxppo.lm.ppo.token_config.TokenPPOConfig` (its sampling fields).
    Returns:
      A :class:`~purejaxppo.lm.models.sampling.Response` ``(response [B, T] int, logp_sampled
      [B, T] float32, mask [B, T] bool)`` with ``T = cfg.max_new_tokens``, right-padded
      (``pad_id``, 0, False after a row's stop token).
    """
    return sample_response(
        models.policy,
        params["policy"],
        row_keys,
        prompt,
        prompt_valid,
        cfg.max_new_tokens,
        jnp.asarray(cfg.stop_ids, jnp.int32),
        cfg.pad_id,
        cfg.temperature,
        cfg.top_k,
        cfg.top_p,
        per_row=True,
        rungs=cfg.length_buckets,
    )


def collect(models: Models, params: dict, reference_params, reward_params, row_keys, prompt, prompt_valid, cfg):
    """The rows' experience before the advantages: :func:`score` of :func:`sample`'s responses.

    Args:
      models, params, row_keys, prompt, prompt_valid, cfg: as :func:`sample`.
      reference_params: the reference's parameters; reward_params: the reward's.
    Returns:
      The :class:`~purejaxppo.lm.ppo.token_records.Experience` of the ``B`` rows, ``[B, P + T]``.
    """
    return score(
        models,
        params,
        reference_params,
        reward_params,
        prompt,
        prompt_valid,
        *sample(models, params, row_keys, prompt, prompt_valid, cfg),
        cfg,
    )


def score(
    models: Models,
    params: dict,
    reference_params,
    reward_params,
    prompt,
    prompt_valid,
    response,
    logp_sampled,
    rmask,
    cfg,
    scores=None,
    policy: bool = True,
    reference: bool = True,
):
    """Sampled responses read back teacher-forced (policy, reference, critic) and scored by the
    reward.

    The passes run ``pass_rows`` rows at a time (:data:`PASS_SLOTS`); the policy's logits are
    computed from the last prompt position on. ``policy`` False (the update's own log-probs are the
    old ones, :func:`~purejaxppo.lm.ppo.token_update.detached`): no policy pass (a critic's runs);
    ``logp_old`` holds the sampler's log-probs (the KL statistics read them), ``logp_sampled`` None
    (no mismatch to measure). ``reference`` False (no KL term, :func:`~purejaxppo.lm.ppo.token_update.kl_off`):
    no reference pass, ``logp_ref`` None.

    Args:
      models, params, cfg: as :func:`sample`.
      reference_params, reward_params: the reference's and the reward's parameters.
      prompt, prompt_valid: ``[B, P]``, left-padded.
      response, logp_sampled, rmask: :func:`sample`'s ``[B, W]`` outputs (``W <= T``: cut to
        a width that holds every response).
      scores: ``[B]``, the reward's, when the caller computed them already (then
        ``reward_params`` is not read); None: the reward is called here.
    Returns:
      The :class:`~purejaxppo.lm.ppo.token_records.Experience` of the rows, ``[B, P + W]``
      (``score``, ``has_stop`` ``[B]``).
    """
    prompt_valid = prompt_valid.astype(bool)
    tokens = jnp.concatenate([prompt, response.astype(prompt.dtype)], axis=1)
    valid = jnp.concatenate([prompt_valid, rmask], axis=1)
    mask = jnp.concatenate([jnp.zeros_like(prompt_valid), rmask], axis=1)
    first = prompt.shape[1] - 1  # the last prompt slot predicts the first response token

    def passes(tokens, valid):  # the teacher-forced passes of some rows: (logp_old, logp_ref, values), None: not run
        logp_old = logp_ref = None
        if policy or (models.values and models.critic is None):  # a value head rides on the policy's pass
            logits, values = heads(models, params, tokens, valid, first)
            logp_old = filtered_logprobs(logits, tokens, cfg, first)[0] if policy else None
        elif models.values:
            values = tk.shift_right(models.critic.values(params["critic"], tokens, valid))
        else:
            values = jnp.zeros(tokens.shape, jnp.float32)
        if reference:
            ref_logits = role_logits(models.reference, reference_params, tokens, valid, first)
            ref_x = filter_logits(ref_logits, cfg.temperature, banned=cfg.pad_id)
            logp_ref = picked_logprobs(jax.nn.log_softmax(ref_x, axis=-1), tokens, first)
        return logp_old, logp_ref, values

    logp_old, logp_ref, values = in_row_chunks(passes, pass_rows(*tokens.shape, PASS_SLOTS), tokens, valid)
    if scores is None:
        scores = models.reward(reward_params, prompt, prompt_valid, response, rmask)
    scores = scores.astype(jnp.float32)
    has_stop = stopped(response, rmask, cfg.stop_ids)
    zeros = jnp.zeros_like(logp_old[:, : prompt.shape[1]]) if policy else jnp.zeros(prompt.shape, jnp.float32)
    logp_sampled = jnp.concatenate([zeros, logp_sampled], axis=1) if not policy else logp_sampled
    # computed in this order, the order the program has always computed them in
    logp_old = jnp.where(mask, logp_old if policy else logp_sampled, 0.0)
    logp_ref = jnp.where(mask, logp_ref, 0.0) if reference else None
    values_old = jnp.where(mask, values, 0.0)
    logp_sampled = jnp.concatenate([zeros, logp_sampled], axis=1) if policy else None
    return Experience(has_stop, logp_old, logp_ref, logp_sampled, mask, scores, tokens, valid, values_old)


def finish(exp: Experience, beta, cfg, keep: Optional[jax.Array] = None) -> tuple[TokenBatch, dict]:
    """The advantages of the whole batch (:func:`~purejaxppo.lm.ppo.sequence_rewards.advantages`) and
    its statistics.

    The score of a sequence is the reward's, minus ``missing_eos_penalty`` without a stop token,
    plus DAPO's soft overlong punishment under ``overlong_buffer``
    (:func:`~purejaxppo.lm.ppo.sequence_rewards.shaped_score`).
    Under ``mask_truncated`` the rows without a stop token leave the update's ``mask`` (no
    weight in any loss term; their advantages and returns 0) after the advantages are computed
    with them. The rows outside ``keep`` (dynamic sampling's filler) are out of the update's
    ``mask`` and out of the advantages' too (a batch normalisation, reinforce++-baseline's,
    reads the kept rows alone): the update then is the one of the kept rows alone.

    Args:
      exp: every row's :class:`~purejaxppo.lm.ppo.token_records.Experience` (``[B, L]``; rows
        ``[g*G, (g+1)*G)`` one prompt's under a group baseline).
      beta: the KL coefficient (scalar, may be traced).
      cfg: the :class:`~purejaxppo.lm.ppo.token_config.TokenPPOConfig`.
      keep: ``[B]`` bool, the rows trained on (whole groups), or None: every row. The
        statistics are over every row either way.
    Returns:
      ``(data, stats)``: ``data`` the :class:`~purejaxppo.lm.ppo.token_records.TokenBatch`
      the update reads (``[B, L]``, gradients stopped; ``logp_ref`` under ``kl_in == "loss"``,
      the ptx fields None); ``stats`` a dict of float32 scalars, the batch's means: ``score``,
      ``score_with_penalty``, ``kl`` (per sequence, ``cfg.kl_estimator``), ``kl_k1``,
      ``non_score_reward``, ``response_length``, ``eos_rate``, ``logp_mismatch`` (the largest
      ``|logp_sampled - logp_old|``) and ``beta``; ``kl`` and ``kl_k1`` absent without a reference
      pass, ``logp_mismatch`` without a policy pass (:func:`score`).
    """
    mask = exp.mask
    total = shaped_score(exp.score, exp.has_stop, mask, cfg)
    no_ref = exp.logp_ref is None  # no KL term (beta 0), no reference pass: 0 x the KL is all it added
    kl = jnp.zeros(mask.shape) if no_ref else tk.kl_penalty(exp.logp_old, exp.logp_ref, cfg.kl_estimator, mask)
    trained = mask if keep is None else mask & keep[:, None]
    adv, ret = advantages(total, kl, exp.values_old, trained, beta, cfg)
    loss_mask = trained
    if cfg.mask_truncated:
        loss_mask = trained & exp.has_stop[:, None]
        adv, ret = jnp.where(loss_mask, adv, 0.0), jnp.where(loss_mask, ret, 0.0)
    data = update_batch(exp, adv, ret, loss_mask, cfg.kl_in)
    k1 = None if no_ref else tk.sequence_kl(tk.kl_penalty(exp.logp_old, exp.logp_ref, "k1", mask), mask)
    seq_kl = tk.sequence_kl(kl, mask)
    stats = dict(
        score=jnp.mean(exp.score),
        score_with_penalty=jnp.mean(total),
        kl=None if no_ref else jnp.mean(seq_kl),
        kl_k1=None if no_ref else jnp.mean(k1),
        non_score_reward=jnp.mean(-beta * seq_kl) if cfg.kl_in == "reward" and not no_ref else jnp.float32(0.0),
        response_length=jnp.mean(jnp.sum(mask, axis=1)),
        eos_rate=jnp.mean(exp.has_stop),
        logp_mismatch=None
        if exp.logp_sampled is None
        else jnp.max(jnp.where(mask, jnp.abs(exp.logp_sampled - exp.logp_old), 0.0)),
        beta=jnp.asarray(beta, jnp.float32),
    )
    return jax.lax.stop_gradient(data), {k: v for k, v in stats.items() if v is not None}
