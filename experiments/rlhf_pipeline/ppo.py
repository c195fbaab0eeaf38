"""Stages 5-6 of the pipeline: token-level PPO from the SFT model, against the learned reward
model (``rlhf --reward-model``) or the true objective itself (``rlhf --reward FILE.py:FUNC``),
through the library's front door :func:`purejaxppo.programs.rlhf_run.train_rlhf` (what the
``rlhf`` command calls), and an independent evaluation of its checkpoints.

The run folder keeps the newest checkpoints only, so every chunk's checkpoint is copied to
``RUN_DIR/snapshots/`` as the run goes; :func:`evaluate_run` then samples fresh responses from
each (every prompt ``reps`` times, temperature 1) and measures, per seed: the TRUE objective
(decoded text), the PROXY (the reward model's score) and the KL from the SFT model (the sum over
response tokens of ``log pi - log ref`` on the policy's own samples: an unbiased estimate of
``KL(pi || ref)`` per sequence).
"""

from __future__ import annotations

import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np

import objective as obj
from purejaxppo.lm import load_reward_model, policy_params, token_logprobs, TokenPPOConfig
from purejaxppo.programs import kinds
from purejaxppo.programs.rlhf_settings import RLHFSettings
from purejaxppo.programs.rlhf_run import run_keys, train_rlhf
from purejaxppo.run import run_folder as rf
from purejaxppo.run.checkpoint import latest_checkpoint, restore_checkpoint
from world import MAX_NEW

SNAPSHOTS = "snapshots"


def run_ppo(
    run_dir: str,
    model: str,
    prompts: str,
    *,
    reward_model=None,
    reward=None,
    beta: float,
    seeds: int,
    iterations: int,
    batch: int,
    chunk: int,
    lr: float,
    kl_estimator: str = "k1",
    seed: int = 0,
    **config,
) -> None:
    """``seeds`` PPO runs of ``iterations`` from the SFT folder ``model``, a snapshot per chunk;
    ``config``: further :class:`TokenPPOConfig` fields (``advantage="rloo", group_size=4``)."""
    settings = RLHFSettings(
        task="text",
        model_dir=os.path.abspath(model),
        prompts=os.path.abspath(prompts),
        reward_model=reward_model and os.path.abspath(reward_model),
        reward=reward,
        max_new_tokens=MAX_NEW,
        sft_steps=0,
        eval_every=0,
        eval_batch=len(obj.prompts()),
    )
    config = TokenPPOConfig(
        num_iterations=iterations,
        batch_size=batch,
        beta=beta,
        actor_lr=lr,
        critic_lr=lr,
        max_new_tokens=MAX_NEW,
        kl_estimator=kl_estimator,
        **config,
    )
    ckpts = os.path.join(run_dir, rf.CHECKPOINTS)

    def snapshot(_progress):
        path = latest_checkpoint(ckpts)
        target = os.path.join(run_dir, SNAPSHOTS, os.path.basename(path))
        if path and not os.path.exists(target):
            shutil.copytree(path, target)

    train_rlhf(config, settings, seed=seed, num_seeds=seeds, run_dir=run_dir, chunk_updates=chunk, on_chunk=snapshot)
    snapshot(None)  # the final checkpoint is written after the last chunk's callback


class Evaluator:
    """Fresh samples of a policy, scored three ways (see the module docstring)."""

    def __init__(self, sampler, reward_model: str, reps: int):
        self.sampler, self.reps = sampler, reps
        self.rm_fn, self.rm_params = load_reward_model(reward_model)
        self.prompt, self.valid, self.texts = sampler.rows(reps)
        lm, rm_fn = sampler.lm, self.rm_fn

        def measure(params, ref, rm_params, key, prompt, valid):
            response, mask = sampler.sample_fn(params, key, prompt, valid)[::2]
            toks = jnp.concatenate([prompt, response], axis=1)
            full = jnp.concatenate([valid.astype(bool), mask], axis=1)
            lp = token_logprobs(lm.logits(params, toks, full), toks)[:, -MAX_NEW:]
            lr = token_logprobs(lm.logits(ref, toks, full), toks)[:, -MAX_NEW:]
            kl = jnp.sum(jnp.where(mask, lp - lr, 0.0), axis=1)
            return response, mask, rm_fn(rm_params, prompt, valid, response, mask), kl

        self._measure = jax.jit(measure)

    def __call__(self, params, key) -> dict:
        response, mask, proxy, kl = self._measure(
            params, self.sampler.sft_params, self.rm_params, key, self.prompt, self.valid
        )
        text = self.sampler.decode(response)
        true = np.array([obj.true_score(t) for t in text])
        mask, response = np.asarray(mask), np.asarray(response)
        stopped = (np.isin(response, self.sampler.tok.stop_ids) & mask).any(1)
        proxy = np.asarray(proxy)
        corr = float(np.corrcoef(true, proxy)[0, 1]) if true.std() > 0 and proxy.std() > 0 else float("nan")
        return {
            "true": float(true.mean()),
            "corr": corr,
            "proxy": float(np.mean(proxy)),
            "kl": float(np.mean(kl)),
            "eos_rate": float(stopped.mean()),
            "length": float(mask.sum(1).mean()),
            "example": text[0],
        }


def evaluate_run(run_dir: str, evaluator: Evaluator, key_seed: int = 123) -> list:
    """One row per snapshot (and the SFT model at iteration 0) and seed:
    ``{iteration, seed, true, proxy, kl, eos_rate, length, example}``."""
    kind, record = kinds.folder(run_dir)
    prog = kind.program(record, num_devices=1)
    template = jax.eval_shape(prog.init, *run_keys(record.seed, record.num_seeds))
    folder = os.path.join(run_dir, SNAPSHOTS)
    rows = []
    for s in range(record.num_seeds):
        key = jax.random.fold_in(jax.random.PRNGKey(key_seed), s)
        rows.append({"iteration": 0, "seed": s, **evaluator(evaluator.sampler.sft_params, key)})
    for name in sorted(os.listdir(folder)):
        state, meta = restore_checkpoint(os.path.join(folder, name), template)
        for s in range(record.num_seeds):
            params = policy_params(jax.tree.map(lambda x: x[s], state))
            key = jax.random.fold_in(jax.random.PRNGKey(key_seed), s)
            rows.append({"iteration": int(meta["update"]), "seed": s, **evaluator(params, key)})
    return rows
