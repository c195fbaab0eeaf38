"""The multi-turn episode driven from the host, one turn per Python iteration: the same
:class:`~purejaxppo.lm.envs.episode.Episode` as the compiled
:func:`~purejaxppo.lm.envs.episode.run_episode`, with its buffers kept in NumPy.

* :func:`host_jax_episode`: a :class:`~purejaxppo.lm.envs.jax_env.JaxTextEnv` stepped by a
  jitted, vmapped ``step`` once per turn (the compiled episode's reference, and the slow path
  it is measured against). Same keys, same budget and truncation rule: the same episode.
* :func:`host_python_episode`: a :class:`~purejaxppo.lm.envs.python_env.PythonTextEnv` (tools,
  code, anything with side effects). Each action is decoded to text (its stop tokens and padding
  dropped) and the observations are encoded back; an observation longer than ``obs_width``
  tokens keeps its first ``obs_width`` and the tokens dropped are counted in ``obs_cut``.

Each turn samples with :func:`~purejaxppo.lm.models.sampling.sample_response` on the context
so far (left-padded to ``P + T`` slots: one compiled sampler for every turn).
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Mapping, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from purejaxppo.lm.envs.episode import Episode, EpisodeConfig, check_inputs, reset_key, turn_keys
from purejaxppo.lm.models.sampling import sample_response

#: ``reset() -> (obs [B, O] int, length [B] int, cut [B] int)``
ResetFn = Callable[[], tuple]
#: ``step(t, actions [B, A] int, lengths [B] int, active [B] bool) -> (obs [B, O], length [B],
#: reward [B], terminated [B], truncated [B], cut [B])``; rows outside ``active`` are ignored
StepFn = Callable[[int, np.ndarray, np.ndarray, np.ndarray], tuple]


@functools.lru_cache(maxsize=8)
def _sampler(lm, cfg: EpisodeConfig):
    """The jitted turn sampler of ``(lm, cfg)``, made once (both hashable)."""
    stops = jnp.asarray(cfg.stop_ids, jnp.int32).reshape(-1)

    def sample(params, keys, ctx, ctx_valid):
        return sample_response(
            lm, params, keys, ctx, ctx_valid, cfg.turn_tokens, stops.astype(ctx.dtype), cfg.pad_id,
            cfg.temperature, cfg.top_k, cfg.top_p, per_row=True,
        )  # fmt: skip

    return jax.jit(sample)


def _left_padded(prompt, prompt_valid, tokens, length):
    """The context of each row, its valid slots moved to the end (NumPy, row by row)."""
    b, p = prompt.shape
    width = p + tokens.shape[1]
    ctx = np.full((b, width), 0, prompt.dtype)
    valid = np.zeros((b, width), bool)
    for i in range(b):
        seq = np.concatenate([prompt[i][prompt_valid[i]], tokens[i, : length[i]]])
        ctx[i, width - len(seq) :], valid[i, width - len(seq) :] = seq, True
        ctx[i, : width - len(seq)] = prompt[i, 0]  # padding: any id (masked out)
    return ctx, valid


def host_episode(
    lm,
    params,
    keys,
    prompt,
    prompt_valid,
    reset: ResetFn,
    step: StepFn,
    cfg: EpisodeConfig,
    obs_width: int,
    n_rows: Optional[int] = None,
) -> Episode:
    """The turn loop on the host over an environment given as ``reset`` / ``step`` callables
    (:data:`ResetFn`, :data:`StepFn`); :func:`host_jax_episode` and :func:`host_python_episode`
    build them; ``n_rows``: the rows given, checked against the batch. Args and Returns as
    :func:`~purejaxppo.lm.envs.episode.run_episode`."""
    cfg.check(obs_width)
    prompt, prompt_valid = np.asarray(prompt), np.asarray(prompt_valid).astype(bool)
    check_inputs(lm, keys, prompt, prompt_valid, prompt.shape[0] if n_rows is None else n_rows, cfg)
    b, t_slots, a = prompt.shape[0], cfg.budget, cfg.turn_tokens
    tokens = np.full((b, t_slots), cfg.pad_id, prompt.dtype)
    action_mask = np.zeros((b, t_slots), bool)
    logp, rewards = np.zeros((b, t_slots), np.float32), np.zeros((b, t_slots), np.float32)
    turns, obs_cut = np.zeros(b, np.int32), np.zeros(b, np.int32)
    terminated, truncated, done = np.zeros(b, bool), np.zeros(b, bool), np.zeros(b, bool)
    obs, olen, cut = (np.asarray(x) for x in reset())
    length = np.zeros(b, np.int32)
    for i in range(b):
        n = min(int(olen[i]), obs_width)
        tokens[i, :n], length[i], obs_cut[i] = obs[i, :n], n, int(cut[i]) + int(olen[i]) - n
    sample = _sampler(lm, cfg)
    for t in range(cfg.max_turns):
        if done.all():
            break
        for i in range(b):  # the budget rule: a turn that might not fit is not started
            if not done[i] and length[i] + a + obs_width > t_slots:
                truncated[i] = done[i] = True
        active = ~done
        sample_keys = jax.vmap(turn_keys, in_axes=(0, None))(keys, t)[0]
        resp = sample(
            params, sample_keys, *(jnp.asarray(x) for x in _left_padded(prompt, prompt_valid, tokens, length))
        )
        r_tokens, r_logp, r_mask = (np.asarray(x) for x in resp)
        alen = r_mask.sum(axis=1).astype(np.int32)
        obs, olen, reward, term, trunc, cut = (np.asarray(x) for x in step(t, r_tokens, alen, active))
        for i in np.nonzero(active)[0]:
            n, m = int(length[i]), int(alen[i])
            tokens[i, n : n + m], logp[i, n : n + m], action_mask[i, n : n + m] = r_tokens[i, :m], r_logp[i, :m], True
            rewards[i, n + m - 1] += float(reward[i])
            k = min(int(olen[i]), obs_width)
            tokens[i, n + m : n + m + k] = obs[i, :k]
            length[i], obs_cut[i] = n + m + k, obs_cut[i] + int(cut[i]) + int(olen[i]) - k
            turns[i] += 1
            if term[i]:
                terminated[i] = done[i] = True
            elif trunc[i] or turns[i] >= cfg.max_turns:
                truncated[i] = done[i] = True
    valid = np.arange(t_slots)[None, :] < length[:, None]
    return Episode(
        *(jnp.asarray(x) for x in (tokens, valid, action_mask, logp, rewards, turns, terminated, truncated, length)),
        jnp.asarray(obs_cut),
    )


def host_jax_episode(lm, params, env, keys, prompt, prompt_valid, rows, cfg: EpisodeConfig) -> Episode:
    """A :class:`~purejaxppo.lm.envs.jax_env.JaxTextEnv`'s episodes driven from the host, its
    ``reset`` and ``step`` jitted and vmapped over the batch, called once per turn: the same
    keys give the compiled :func:`~purejaxppo.lm.envs.episode.run_episode`'s episode.

    Args:
      lm, params, env, keys, prompt, prompt_valid, rows, cfg: as
        :func:`~purejaxppo.lm.envs.episode.run_episode` (``keys [B]``, ``prompt [B, P]``).
    Returns:
      The :class:`~purejaxppo.lm.envs.episode.Episode` ``[B, T]``.
    """
    reset_fn, step_fn = jax.jit(jax.vmap(env.reset)), jax.jit(jax.vmap(env.step))
    held: dict[str, Any] = {}

    def reset():
        held["state"], obs, olen = reset_fn(jax.vmap(reset_key)(keys), jnp.asarray(rows, jnp.int32))
        return obs, olen, np.zeros(len(olen), np.int32)

    def step(t, actions, lengths, active):
        env_keys = jax.vmap(turn_keys, in_axes=(0, None))(keys, t)[1]
        st = step_fn(env_keys, held["state"], jnp.asarray(actions, jnp.int32), jnp.asarray(lengths, jnp.int32))
        held["state"] = st.state  # a finished row's is never read again
        return st.obs, st.length, st.reward, st.terminated, st.truncated, np.zeros(len(lengths), np.int32)

    return host_episode(lm, params, keys, prompt, prompt_valid, reset, step, cfg, env.obs_width, len(rows))


def host_python_episode(
    lm,
    params,
    env,
    tokenizer,
    keys,
    prompt,
    prompt_valid,
    rows: Sequence[Mapping[str, Any]],
    cfg: EpisodeConfig,
    obs_width: int,
) -> Episode:
    """A :class:`~purejaxppo.lm.envs.python_env.PythonTextEnv`'s episodes, stepped by the host
    once per turn with the batch's actions as text.

    Args:
      lm, params, keys, prompt, prompt_valid, cfg: as :func:`~purejaxppo.lm.envs.episode.run_episode`.
      env: the :class:`~purejaxppo.lm.envs.python_env.PythonTextEnv`.
      tokenizer: ``encode(text) -> ids`` and ``decode(ids) -> text`` (e.g.
        :class:`~purejaxppo.lm.checkpoints.tokenizer.TextTokenizer`).
      rows: one dataset row (a mapping of columns) per episode, given to ``env.reset``.
      obs_width: the bound on an observation's tokens (the reset text's too): longer ones keep
        their first ``obs_width`` tokens, the rest counted in ``obs_cut``.
    Returns:
      The :class:`~purejaxppo.lm.envs.episode.Episode` ``[B, T]``.
    Raises:
      ValueError: ``env`` returned a list of the wrong length (a bug in the environment).
    """
    b = len(rows)
    stops = set(int(s) for s in cfg.stop_ids)

    def encoded(texts, what):
        if len(texts) != b:
            raise ValueError(f"the environment's {what} returned {len(texts)} items for {b} episodes; return one each")
        obs = np.full((b, obs_width), cfg.pad_id, np.int32)
        olen, cut = np.zeros(b, np.int32), np.zeros(b, np.int32)
        for i, text in enumerate(texts):
            ids = list(tokenizer.encode(text)) if text else []
            k = min(len(ids), obs_width)
            obs[i, :k], olen[i], cut[i] = ids[:k], k, len(ids) - k
        return obs, olen, cut

    def reset():
        return encoded(env.reset(rows), "reset")

    def step(t, actions, lengths, active):
        texts = [
            tokenizer.decode([int(x) for x in actions[i, : lengths[i]] if int(x) not in stops and x != cfg.pad_id])
            for i in range(b)
        ]
        out = env.step(texts, [bool(x) for x in active])
        obs, olen, cut = encoded([s.observation for s in out], "step")
        reward = np.asarray([float(s.reward) for s in out], np.float32)
        return (
            obs,
            olen,
            reward,
            np.asarray([bool(s.terminated) for s in out]),
            np.asarray([bool(s.truncated) for s in out]),
            cut,
        )

    return host_episode(lm, params, keys, prompt, prompt_valid, reset, step, cfg, obs_width, b)
