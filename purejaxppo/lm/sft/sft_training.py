"""Supervised pretraining (SFT) of any :class:`purejaxppo.lm.models.causal_lm.CausalLM` on a task's
demonstrations (:mod:`purejaxppo.lm.tasks.builtin_tasks`), and evaluation of a policy by sampling.

The SFT model is what token-level PPO starts from and, frozen, its KL reference.

Measure how a task's score grows with SFT steps (the numbers in the tasks' docstrings)::

    python -m purejaxppo.lm.sft.sft_training --task reverse --chunk 25 --chunks 16 --eval-batch 2048
"""

from __future__ import annotations

import argparse
import functools
import time

import jax
import jax.numpy as jnp
import optax

from purejaxppo.lm.ppo import token_stages as tk
from purejaxppo.lm.models.adapters import FlaxLM
from purejaxppo.lm.models.tiny_lm import TinyLM
from purejaxppo.lm.models.sampling import sample_response
from purejaxppo.lm.ppo.pass_at_k_eval import evaluation_prompts, evaluation_rows, task_scores
from purejaxppo.lm.tasks.builtin_tasks import make_task


def sft_loss(lm, params, prompt, prompt_valid, response, response_mask):
    """Mean next-token NLL over the response tokens (EOS included), one teacher-forced pass.

    Prompt tokens and padding are not predicted: every valid response token of the batch
    counts once (a token mean). Differentiable in ``params``.

    Args:
      lm: a :class:`~purejaxppo.lm.models.causal_lm.CausalLM`.
      params: its parameters.
      prompt: ``[B, P]`` int32, LEFT-padded.
      prompt_valid: ``[B, P]`` bool.
      response: ``[B, T]`` int32, RIGHT-padded.
      response_mask: ``[B, T]`` bool, True on the response's tokens.

    Returns:
      A float32 scalar.
    """
    toks = jnp.concatenate([prompt, response], axis=1)
    valid = jnp.concatenate([prompt_valid.astype(bool), response_mask.astype(bool)], axis=1)
    target = jnp.concatenate([jnp.zeros(prompt.shape, bool), response_mask.astype(bool)], axis=1)
    logp = tk.token_logprobs(lm.logits(params, toks, valid), toks)
    return -tk.masked_mean(logp, target)


@functools.partial(jax.jit, static_argnames=("lm", "task", "steps", "batch"))
def _train(lm, params, task, key, learning_rate, *, steps: int, batch: int):
    opt = optax.adam(learning_rate)  # traced rate: changing it does not recompile

    def step(carry, k):
        params, opt_state = carry
        loss, g = jax.value_and_grad(sft_loss, argnums=1)(lm, params, *task.demonstrations(k, batch))
        upd, opt_state = opt.update(g, opt_state, params)
        return (optax.apply_updates(params, upd), opt_state), loss

    (params, _), losses = jax.lax.scan(step, (params, opt.init(params)), jax.random.split(key, steps))
    return params, losses


def train_sft(lm, params, task, key, *, steps: int, batch: int, learning_rate=3e-3):
    """Supervised fine-tuning: ``steps`` Adam steps on fresh ``task.demonstrations`` as ONE
    jitted ``lax.scan``. Pure: the same inputs give the same compiled program, hence
    bit-identical parameters.

    Args:
      lm: a :class:`~purejaxppo.lm.models.causal_lm.CausalLM` (static, hashable).
      params: the starting parameters.
      task: a :class:`~purejaxppo.lm.tasks.task_protocol.Task` (static, hashable).
      key: a PRNG key; step ``i`` draws its batch with ``split(key, steps)[i]``.
      steps: optimizer steps (static; ``<= 0``: ``params`` back unchanged).
      batch: demonstrations per step (static).
      learning_rate: Adam's rate (traced: changing it does not recompile).

    Returns:
      ``(params, losses [steps] float32)``, each loss :func:`sft_loss` before its step's update.
    """
    if steps <= 0:
        return params, jnp.zeros((0,), jnp.float32)
    return _train(lm, params, task, key, jnp.asarray(learning_rate, jnp.float32), steps=steps, batch=batch)


def init_tiny_lm(task, key, d_model: int = 32, n_layers: int = 2, n_heads: int = 2, dtype=jnp.float32):
    """A freshly initialised :class:`~purejaxppo.lm.models.tiny_lm.TinyLM` sized for a task: its
    vocabulary, and position rows for ``prompt_len + max_new`` tokens (the longest prompt plus
    a full response).

    Args:
      task: a :class:`~purejaxppo.lm.tasks.task_protocol.Task` (``vocab_size``, ``prompt_len``,
        ``max_new``).
      key: the PRNG key of the init.
      d_model: the hidden width (a multiple of ``n_heads``).
      n_layers: transformer blocks.
      n_heads: attention heads.
      dtype: the compute dtype (parameters are float32).

    Returns:
      ``(FlaxLM(TinyLM), params)``, the variables ``{"params": ...}``.
    """
    total = task.prompt_len + task.max_new
    model = TinyLM(task.vocab_size, d_model, n_layers, n_heads, max_len=total, dtype=dtype)
    # jitted: an eager init dispatches op by op, several times slower than compiling it
    params = jax.jit(model.init)(key, jnp.zeros((1, total), jnp.int32), jnp.ones((1, total), bool))
    return FlaxLM(model), params


@functools.partial(jax.jit, static_argnames=("lm", "task", "batch", "greedy"))
def _evaluate(lm, params, task, key, temperature, *, batch: int, greedy: bool):
    k_prompt, k_gen = jax.random.split(key)
    prompt, prompt_valid = evaluation_prompts(task, batch, k_prompt)  # a text task's own, else drawn
    rows = evaluation_rows(task, batch)  # their row ids (a text task's rewards read the columns), or None
    response, _, mask = sample_response(
        lm,
        params,
        k_gen,
        prompt,
        prompt_valid,
        task.max_new,
        jnp.asarray(task.stop_ids),
        task.pad_id,
        temperature=temperature,
        top_k=1 if greedy else 0,
    )
    score = task_scores(task, prompt, prompt_valid, response, mask, rows)
    return {"score": jnp.mean(score), **task.diagnostics(prompt, prompt_valid, response, mask)}


def evaluate_policy(lm, params, task, key, batch: int, temperature=1.0, greedy: bool = False):
    """Score a policy by sampling one response per prompt, jitted.

    The prompts are ``task.prompts(split(key)[0], batch)`` (a text task's fixed
    ``evaluation_prompts(batch)`` when it has them), so one key gives the same prompts whatever
    the settings; responses come from :func:`~purejaxppo.lm.models.sampling.sample_response`.

    Args:
      lm: a :class:`~purejaxppo.lm.models.causal_lm.CausalLM` (static).
      params: its parameters.
      task: a :class:`~purejaxppo.lm.tasks.task_protocol.Task` (static).
      key: a PRNG key.
      batch: prompts ``B`` (static).
      temperature: the sampling temperature (traced).
      greedy: top-1, i.e. argmax, sampling (static).

    Returns:
      ``{"score": mean score, **task.diagnostics(...)}``, 0-d arrays.
    """
    return _evaluate(lm, params, task, key, jnp.asarray(temperature, jnp.float32), batch=batch, greedy=greedy)


def sample_table(lm, params, task, key, n: int = 5, greedy: bool = True) -> str:
    """Host-side: ``n`` prompts and the policy's responses, one ``task.decode`` line each."""
    k_prompt, k_gen = jax.random.split(key)
    prompt, pv = task.prompts(k_prompt, n)
    resp, _, _ = sample_response(
        lm, params, k_gen, prompt, pv, task.max_new, jnp.asarray(task.stop_ids), task.pad_id, top_k=1 if greedy else 0
    )
    return "\n".join(f"{task.decode(p)}  ->  {task.decode(r)}" for p, r in zip(prompt, resp))


def measure_curve(
    task,
    chunk: int,
    n_chunks: int,
    *,
    seed=0,
    batch=64,
    learning_rate=3e-3,
    eval_batch=1024,
    d_model=32,
    n_layers=2,
    n_heads=2,
    log=print,
):
    """One SFT run of ``chunk * n_chunks`` steps, evaluated before it and after every ``chunk``
    steps (one compile: every chunk is the same program). Rows of ``(steps, mean loss of the
    chunk, greedy score, temperature-1 score, seconds)``, then the final ``lm, params``. Keys:
    init ``PRNGKey(seed)``, chunk ``i`` ``fold_in(PRNGKey(seed + 1), i)``, evaluation
    ``PRNGKey(seed + 2)`` (the same prompts at every point)."""
    lm, params = init_tiny_lm(task, jax.random.PRNGKey(seed), d_model, n_layers, n_heads)
    k_eval, rows, t0 = jax.random.PRNGKey(seed + 2), [], time.time()
    for i in range(n_chunks + 1):
        loss = float("nan")
        if i:
            params, losses = train_sft(
                lm,
                params,
                task,
                jax.random.fold_in(jax.random.PRNGKey(seed + 1), i),
                steps=chunk,
                batch=batch,
                learning_rate=learning_rate,
            )
            loss = float(jnp.mean(losses))
        g = float(evaluate_policy(lm, params, task, k_eval, eval_batch, greedy=True)["score"])
        t = float(evaluate_policy(lm, params, task, k_eval, eval_batch)["score"])
        rows.append((i * chunk, loss, g, t, time.time() - t0))
        log(f"steps {i * chunk:5d}  loss {loss:.3f}  greedy {g:.3f}  temp1 {t:.3f}  ({rows[-1][-1]:.1f}s)")
    return rows, lm, params


def main(argv=None):
    ap = argparse.ArgumentParser(description="SFT curve of a built-in task: score vs SFT steps")
    ap.add_argument("--task", default="reverse")
    ap.add_argument("--chunk", type=int, default=100, help="SFT steps between evaluations")
    ap.add_argument("--chunks", type=int, default=8, help="number of chunks")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--d-model", type=int, default=32)
    ap.add_argument("--n-layers", type=int, default=2)
    ap.add_argument("--eval-batch", type=int, default=1024)
    ap.add_argument("--set", action="append", default=[], metavar="FIELD=INT", help="task override (ints)")
    args = ap.parse_args(argv)
    task = make_task(args.task, **{k: int(v) for k, v in (s.split("=", 1) for s in args.set)})
    print(task)
    rows, lm, params = measure_curve(
        task,
        args.chunk,
        args.chunks,
        seed=args.seed,
        batch=args.batch,
        learning_rate=args.lr,
        eval_batch=args.eval_batch,
        d_model=args.d_model,
        n_layers=args.n_layers,
    )
    print("greedy samples after the last step:\n" + sample_table(lm, params, task, jax.random.PRNGKey(args.seed + 3)))
    return rows


if __name__ == "__main__":
    main()
