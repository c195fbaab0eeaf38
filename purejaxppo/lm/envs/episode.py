"""The multi-turn episode on a :class:`~purejaxppo.lm.envs.jax_env.JaxTextEnv`, compiled whole.

:func:`run_episode` is one ``lax.while_loop`` over turns (at most ``max_turns``; it stops once
every episode has ended, which a ``scan`` of ``max_turns`` steps could not): each turn samples
the model's action with :func:`~purejaxppo.lm.models.sampling.sample_response` on the context
so far, steps the environment (``jax.vmap`` over the batch) and appends the action and the
observation to a fixed-size buffer. The result is an :class:`Episode`: the whole episode as ONE
right-padded response after the prompt, with the masks and per-token rewards the update needs
(:mod:`purejaxppo.lm.envs.episode_credit`).

Layout of a row's response buffer (``T = cfg.budget`` slots)::

    [reset observation][action 1][observation 1][action 2][observation 2] ... [pad ...]

Context budget and truncation rule. A turn writes at most ``A = cfg.turn_tokens`` action tokens
and ``O = env.obs_width`` observation tokens, so a turn starts only when ``length + A + O <= T``:
nothing is ever cut mid-turn. An episode whose next turn would not fit is ``truncated`` before
it (a critic may bootstrap its last state: see :mod:`purejaxppo.lm.envs.episode_credit`), as is one still going after ``max_turns`` turns or one the
environment truncates. ``terminated`` (the environment says the task is over) wins over
``truncated``. Every step's observation is appended, the last one too (it is context only).

Keys. Row ``i``'s episode uses ``keys[i]`` alone (:func:`turn_keys`): the reset draws from
``split(keys[i])[0]``; turn ``t`` samples with, and steps the environment with, the two halves
of ``split(fold_in(split(keys[i])[1], t))``. A row's episode does not depend on its batch.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from purejaxppo.config.ppo_config import ConfigError
from purejaxppo.lm.models.sampling import Response, sample_response
from purejaxppo.lm.ppo.token_phases import position_rows


class Episode(NamedTuple):
    """A batch of finished episodes, each ONE right-padded response after its prompt.

    Attributes:
      tokens: ``[B, T]`` int (the prompt's dtype): the reset observation, then each turn's
        action and observation, then ``pad_id``.
      valid: ``[B, T]`` bool: the written slots (actions and observations), ``arange(T) < length``.
      action_mask: ``[B, T]`` bool: True on the tokens the model wrote (its stop tokens
        included), False on environment tokens and padding: the loss mask.
      logp: ``[B, T]`` float32: each action token's log-prob under the distribution it was sampled
        from; 0 off ``action_mask``.
      rewards: ``[B, T]`` float32: each step's reward on the last token of the action that
        earned it; 0 elsewhere.
      turns: ``[B]`` int32: the turns taken (actions written).
      terminated: ``[B]`` bool: the environment ended the task (nothing to bootstrap).
      truncated: ``[B]`` bool: cut by the budget, ``max_turns`` or the environment (a critic may bootstrap it).
      length: ``[B]`` int32: the written slots.
      obs_cut: ``[B]`` int32: observation tokens dropped to fit the observation bound (a host
        Python environment's long outputs; an environment keeping its contract: 0).
    """

    tokens: jax.Array
    valid: jax.Array
    action_mask: jax.Array
    logp: jax.Array
    rewards: jax.Array
    turns: jax.Array
    terminated: jax.Array
    truncated: jax.Array
    length: jax.Array
    obs_cut: jax.Array


@dataclasses.dataclass(frozen=True)
class EpisodeConfig:
    """The episode's static shape and sampling controls (hashable: a static ``jit`` argument).

    Attributes:
      max_turns: the most actions an episode takes.
      turn_tokens: ``A``, the most tokens of one action.
      budget: ``T``, the response buffer's slots (reset observation, actions, observations).
      stop_ids: a turn ends after one of these tokens (kept in the action).
      pad_id: fills the buffer past ``length``; never sampled.
      temperature, top_k, top_p: as :func:`~purejaxppo.lm.models.sampling.sample_tokens`.
    """

    max_turns: int
    turn_tokens: int
    budget: int
    stop_ids: tuple
    pad_id: int
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0

    def check(self, obs_width: int) -> None:
        """Raise :class:`~purejaxppo.config.ppo_config.ConfigError` unless the budget holds the
        reset observation and one whole turn (``O + A + O`` slots)."""
        if self.max_turns < 1 or self.turn_tokens < 1:
            raise ConfigError(f"max_turns={self.max_turns} and turn_tokens={self.turn_tokens} must be >= 1")
        need = 2 * obs_width + self.turn_tokens
        if self.budget < need:
            raise ConfigError(
                f"budget={self.budget} cannot hold the reset observation and one turn "
                f"(2 * obs_width + turn_tokens = {need}); raise the budget or shorten the turns"
            )


def check_inputs(lm, keys, prompt, prompt_valid, n_rows: int, cfg: EpisodeConfig) -> None:
    """Raise :class:`~purejaxppo.config.ppo_config.ConfigError` naming the fix unless ``prompt``
    and ``prompt_valid`` are one ``[B, P]`` shape, ``keys`` and the rows give one per episode,
    and the model's positions hold ``P + T`` tokens (past them positions would clamp silently)."""
    if len(prompt.shape) != 2 or tuple(prompt.shape) != tuple(prompt_valid.shape):
        raise ConfigError(
            f"prompt {tuple(prompt.shape)} and prompt_valid {tuple(prompt_valid.shape)} must both be [B, P]"
        )
    b = prompt.shape[0]
    if len(keys) != b or n_rows != b:
        raise ConfigError(f"keys ({len(keys)}) and rows ({n_rows}) must give one per episode (B = {b} prompts)")
    table = position_rows(lm)
    if table is not None and prompt.shape[1] + cfg.budget > table:
        raise ConfigError(
            f"prompts of {prompt.shape[1]} slots + budget={cfg.budget} exceed the model's {table} "
            "positions; shorten the prompts or the budget"
        )


class EpisodeCarry(NamedTuple):
    """The turn loop's state: the buffers of :class:`Episode` and the environment's."""

    t: jax.Array  # int32 scalar: the turn about to be taken
    tokens: jax.Array  # [B, T]
    length: jax.Array  # [B]
    action_mask: jax.Array  # [B, T]
    logp: jax.Array  # [B, T]
    rewards: jax.Array  # [B, T]
    state: Any  # the environment's states, [B, ...] leaves
    done: jax.Array  # [B] bool: the episode has ended
    terminated: jax.Array  # [B]
    truncated: jax.Array  # [B]
    turns: jax.Array  # [B] int32
    obs_cut: jax.Array  # [B] int32


def turn_keys(key: jax.Array, t) -> tuple[jax.Array, jax.Array]:
    """``(sample_key, env_key)`` of turn ``t`` of the episode drawn with ONE row ``key``."""
    k = jax.random.fold_in(jax.random.split(key)[1], t)
    sample_key, env_key = jax.random.split(k)
    return sample_key, env_key


def reset_key(key: jax.Array) -> jax.Array:
    """The key the environment's reset draws with, for the episode of ONE row ``key``."""
    return jax.random.split(key)[0]


def put(buf: jax.Array, chunk: jax.Array, start: jax.Array, n: jax.Array) -> jax.Array:
    """``buf [B, T]`` with ``chunk[:, :n]`` (``chunk [B, W]``) written at ``start [B]``, per row;
    ``n [B]`` may be 0 (nothing written). Slots past ``T`` are dropped, never clamped."""
    rel = jnp.arange(buf.shape[1])[None, :] - start[:, None]
    take = (rel >= 0) & (rel < n[:, None])
    vals = jnp.take_along_axis(chunk, jnp.clip(rel, 0, chunk.shape[1] - 1), axis=1)
    return jnp.where(take, vals.astype(buf.dtype), buf)


def context(prompt, prompt_valid, tokens, length) -> tuple[jax.Array, jax.Array]:
    """The context so far, LEFT-padded as the sampler reads prompts: ``prompt [B, P]`` (left-
    padded) then the response buffer's ``length [B]`` slots, each row rolled right by ``T -
    length`` so its padding sits in front. Returns ``(ctx [B, P + T], ctx_valid [B, P + T])``."""
    t = tokens.shape[1]
    ctx = jnp.concatenate([prompt, tokens.astype(prompt.dtype)], axis=1)
    valid = jnp.concatenate([prompt_valid.astype(bool), jnp.arange(t)[None, :] < length[:, None]], axis=1)
    width = ctx.shape[1]
    src = (jnp.arange(width)[None, :] - (t - length)[:, None]) % width
    return jnp.take_along_axis(ctx, src, axis=1), jnp.take_along_axis(valid, src, axis=1)


def sample_turn(lm, params, keys, prompt, prompt_valid, tokens, length, cfg: EpisodeConfig) -> Response:
    """One action per row on the context so far: :func:`sample_response` (``per_row``) of up to
    ``A`` tokens. Returns its :class:`~purejaxppo.lm.models.sampling.Response` ``[B, A]``."""
    ctx, ctx_valid = context(prompt, prompt_valid, tokens, length)
    stops = jnp.asarray(cfg.stop_ids, ctx.dtype).reshape(-1)
    return sample_response(
        lm, params, keys, ctx, ctx_valid, cfg.turn_tokens, stops, cfg.pad_id,
        cfg.temperature, cfg.top_k, cfg.top_p, per_row=True,
    )  # fmt: skip


def start(env, keys, rows, cfg: EpisodeConfig, dtype) -> EpisodeCarry:
    """The carry after every row's reset: its observation written at slot 0."""
    b, o = keys.shape[0], env.obs_width
    state, obs, olen = jax.vmap(env.reset)(jax.vmap(reset_key)(keys), rows)
    olen = jnp.asarray(olen, jnp.int32)
    kept = jnp.clip(olen, 0, o)
    zero_i, zero_f = jnp.zeros((b,), jnp.int32), jnp.zeros((b, cfg.budget), jnp.float32)
    tokens = put(jnp.full((b, cfg.budget), cfg.pad_id, dtype), obs, zero_i, kept)
    no = jnp.zeros((b,), bool)
    return EpisodeCarry(
        jnp.zeros((), jnp.int32), tokens, kept, zero_f.astype(bool), zero_f, zero_f,
        state, no, no, no, zero_i, olen - kept,
    )  # fmt: skip


def take_turn(lm, params, env, keys, prompt, prompt_valid, cfg: EpisodeConfig, c: EpisodeCarry) -> EpisodeCarry:
    """Turn ``c.t`` of every row still going: a row whose turn would not fit the budget is
    truncated first; the others sample an action, step the environment and append both."""
    a, o, t_slots = cfg.turn_tokens, env.obs_width, cfg.budget
    cut = ~c.done & (c.length + a + o > t_slots)
    truncated, done = c.truncated | cut, c.done | cut
    active = ~done
    sample_keys, env_keys = jax.vmap(turn_keys, in_axes=(0, None))(keys, c.t)
    resp = sample_turn(lm, params, sample_keys, prompt, prompt_valid, c.tokens, c.length, cfg)
    alen = jnp.sum(resp.mask, axis=1, dtype=jnp.int32)  # >= 1: a live row always writes a token
    # every row is stepped (fixed shapes); a finished row's new state is never read again
    st = jax.vmap(env.step)(env_keys, c.state, resp.tokens.astype(jnp.int32), alen)
    n, wrote = c.length, jnp.where(active, alen, 0)
    slots = jnp.arange(t_slots)[None, :]
    tokens = put(c.tokens, resp.tokens, n, wrote)
    action_mask = c.action_mask | ((slots >= n[:, None]) & (slots < (n + wrote)[:, None]))
    logp = put(c.logp, resp.logp, n, wrote)
    on_last = active[:, None] & (slots == (n + alen - 1)[:, None])
    rewards = c.rewards + jnp.where(on_last, jnp.asarray(st.reward, jnp.float32)[:, None], 0.0)
    olen = jnp.asarray(st.length, jnp.int32)
    kept = jnp.where(active, jnp.clip(olen, 0, o), 0)
    tokens = put(tokens, st.obs, n + wrote, kept)
    turns = c.turns + active.astype(jnp.int32)
    term = active & st.terminated
    trunc = active & ~st.terminated & (st.truncated | (turns >= cfg.max_turns))
    return EpisodeCarry(
        c.t + 1, tokens, n + wrote + kept, action_mask, logp, rewards,
        st.state, done | term | trunc, c.terminated | term,
        truncated | trunc, turns, c.obs_cut + jnp.where(active, olen - kept, 0),
    )  # fmt: skip


def as_episode(c: EpisodeCarry) -> Episode:
    """The loop's final carry as an :class:`Episode`."""
    valid = jnp.arange(c.tokens.shape[1])[None, :] < c.length[:, None]
    return Episode(
        c.tokens, valid, c.action_mask, c.logp, c.rewards, c.turns, c.terminated, c.truncated, c.length, c.obs_cut
    )


def run_episode(lm, params, env, keys, prompt, prompt_valid, rows, cfg: EpisodeConfig) -> Episode:
    """A batch of multi-turn episodes, compiled whole (jit it with ``lm``, ``env`` and ``cfg``
    static: ``jax.jit(run_episode, static_argnums=(0, 2, 7))``).

    Args:
      lm: a :class:`~purejaxppo.lm.models.causal_lm.CausalLM` (its positions must hold
        ``P + T`` valid tokens).
      params: its parameters.
      env: a :class:`~purejaxppo.lm.envs.jax_env.JaxTextEnv` (hashable).
      keys: ``[B]`` keys, one per row (the module docstring's schedule).
      prompt, prompt_valid: ``[B, P]`` int / bool, left-padded: the fixed prompt before the
        reset observation (``P`` may be 1 with a single valid token, e.g. a BOS).
      rows: ``[B]`` int32, each episode's row id given to ``env.reset``.
      cfg: the :class:`EpisodeConfig`.
    Returns:
      The :class:`Episode`, ``[B, T]`` with ``T = cfg.budget``.
    Raises:
      ConfigError: a budget that cannot hold one turn (:meth:`EpisodeConfig.check`), or inputs
        of mismatched shapes or a model too short for them (:func:`check_inputs`).
    """
    cfg.check(env.obs_width)
    rows = jnp.asarray(rows, jnp.int32)
    check_inputs(lm, keys, prompt, prompt_valid, rows.shape[0], cfg)
    c = start(env, keys, rows, cfg, prompt.dtype)
    c = jax.lax.while_loop(
        lambda c: (c.t < cfg.max_turns) & ~jnp.all(c.done),
        lambda c: take_turn(lm, params, env, keys, prompt, prompt_valid, cfg, c),
        c,
    )
    return as_episode(c)  # a row still going after max_turns turns was truncated by take_turn
