"""Toy RLHF with token-level PPO on CPU (docs/conventions.md, "Token-level PPO"), in minutes.

1. A seeded synthetic grammar (a sparse Markov chain over content tokens) generates
   ``prompt SEP response EOS`` sequences. A tiny causal transformer is pretrained on them
   by supervised learning: the SFT model, which is also the frozen reference.
2. PPO fine-tunes it against a programmatic reward model: the number of TARGET tokens in
   the response, minus a penalty when no EOS is produced. Rewards are KL-shaped per token
   (``-beta * k1`` on every response token, the score on the last one), advantages come
   from masked GAE over response tokens, and the losses are the library's masked
   token-mean losses. One jitted iteration = generate (``lax.scan``) -> score -> shape ->
   GAE -> K epochs x M minibatches; the whole run is a ``lax.scan`` of iterations.
3. A beta sweep (``vmap`` over the traced beta: one compile) shows the trade-off: high beta
   stays close to the reference (grammatical) with a small score gain, low beta hacks
   the reward by spamming the target token ungrammatically.
4. An exact check on a tabular policy, where the KL-regularised optimum
   ``J* = max_pi E[score] - beta * KL(pi || ref)`` is known by dynamic programming: PPO's
   exactly evaluated ``J`` must approach ``J*`` and never exceed it.

Usage::

    python experiments/rlhf_toy.py                 # full run (a few minutes on 2 CPU cores)
    python experiments/rlhf_toy.py --quick --out /tmp/rlhf   # CI-sized
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import os
import sys
import time
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np
import optax

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from purejaxppo.lm import tokens as tk  # noqa: E402
from purejaxppo.lm.model import TinyLM, generate  # noqa: E402

PAD, EOS, SEP = 0, 1, 2
FIRST_CONTENT = 3


@dataclasses.dataclass(frozen=True)
class ToyConfig:
    seed: int = 0
    # grammar / data
    n_content: int = 8
    n_successors: int = 3
    prompt_min: int = 2
    prompt_max: int = 4
    resp_min: int = 2
    resp_max: int = 6  # SFT responses; generation may run to max_new
    max_new: int = 10
    target: int = FIRST_CONTENT  # the token the reward model counts
    no_eos_penalty: float = 2.0
    # model
    d_model: int = 32
    n_layers: int = 2
    n_heads: int = 2
    # SFT
    sft_steps: int = 600
    sft_batch: int = 128
    sft_lr: float = 3e-3
    # PPO
    iters: int = 120
    batch: int = 128
    epochs: int = 4
    minibatches: int = 4
    lr: float = 5e-4
    clip_eps: float = 0.2
    vf_clip_eps: Optional[float] = 0.2
    vf_coef: float = 0.5
    ent_coef: float = 0.0
    gamma: float = 1.0
    gae_lambda: float = 0.95
    beta: float = 0.1
    kl_kind: str = "k1"
    aggregation: str = "token-mean"
    max_grad_norm: float = 1.0
    adaptive_target: Optional[float] = None  # KL per sequence; None = fixed beta
    adaptive_horizon: float = 1000.0

    @property
    def vocab(self) -> int:
        return FIRST_CONTENT + self.n_content

    @property
    def prompt_len(self) -> int:
        return self.prompt_max + 1  # + SEP


# --- grammar -----------------------------------------------------------------------------
def make_grammar(cfg: ToyConfig):
    """``(trans [C, C], allowed [C, C])``: each content token has ``n_successors`` allowed
    successors (never itself) with Dirichlet probabilities. Seeded."""
    rng = np.random.default_rng(cfg.seed + 1000)
    c = cfg.n_content
    trans = np.zeros((c, c))
    for i in range(c):
        succ = rng.choice([j for j in range(c) if j != i], size=cfg.n_successors, replace=False)
        trans[i, succ] = rng.dirichlet(np.ones(cfg.n_successors))
    return jnp.asarray(trans, jnp.float32), jnp.asarray(trans > 0)


def sample_sequences(key, cfg: ToyConfig, trans, batch: int):
    """SFT data: ``(tokens [B, P+T], valid [B, P+T])``; prompt left-padded (+SEP),
    response = continuation of the chain + EOS, right-padded."""
    k_len, k_start, k_chain = jax.random.split(key, 3)
    lp = jax.random.randint(k_len, (batch,), cfg.prompt_min, cfg.prompt_max + 1)
    lr = jax.random.randint(jax.random.fold_in(k_len, 1), (batch,), cfg.resp_min, cfg.resp_max + 1)
    n_chain = cfg.prompt_max + cfg.resp_max
    x0 = jax.random.randint(k_start, (batch,), 0, cfg.n_content)

    def step(x, k):
        nxt = jax.random.categorical(k, jnp.log(trans[x] + 1e-30), axis=-1)
        return nxt, nxt

    _, rest = jax.lax.scan(step, x0, jax.random.split(k_chain, n_chain - 1))
    chain = jnp.concatenate([x0[:, None], rest.T], axis=1) + FIRST_CONTENT  # [B, n_chain]
    p = cfg.prompt_len
    j = jnp.arange(p)[None, :]
    k = j - (p - 1 - lp[:, None])  # index into the chain
    prompt = jnp.where(k < 0, PAD, jnp.take_along_axis(chain, jnp.clip(k, 0, n_chain - 1), axis=1))
    prompt = prompt.at[:, -1].set(SEP)
    j = jnp.arange(cfg.max_new)[None, :]
    idx = jnp.clip(lp[:, None] + j, 0, n_chain - 1)
    resp = jnp.where(j < lr[:, None], jnp.take_along_axis(chain, idx, axis=1),
                     jnp.where(j == lr[:, None], EOS, PAD))
    toks = jnp.concatenate([prompt, resp], axis=1).astype(jnp.int32)
    return toks, toks != PAD


# --- reward model and diagnostics ---------------------------------------------------------
def score_fn(cfg: ToyConfig, toks, action_mask):
    """``[B]``: count of target tokens in the response, minus a penalty without EOS."""
    count = jnp.sum((toks == cfg.target) & action_mask, axis=1).astype(jnp.float32)
    has_eos = jnp.any((toks == EOS) & action_mask, axis=1)
    return count - cfg.no_eos_penalty * (~has_eos), has_eos


def grammatical_fraction(cfg: ToyConfig, allowed, toks, action_mask):
    """Fraction of content->content transitions in the responses (the first one from the
    last prompt token, skipping SEP) that the grammar allows."""
    prev = tk.shift_right(toks)
    prev = jnp.where(prev == SEP, tk.shift_right(prev), prev)
    is_pair = action_mask & (toks >= FIRST_CONTENT) & (prev >= FIRST_CONTENT)
    ok = allowed[jnp.clip(prev - FIRST_CONTENT, 0), jnp.clip(toks - FIRST_CONTENT, 0)]
    return jnp.sum(ok & is_pair) / jnp.maximum(jnp.sum(is_pair), 1)


# --- SFT -----------------------------------------------------------------------------------
def make_model(cfg: ToyConfig) -> TinyLM:
    return TinyLM(cfg.vocab, cfg.d_model, cfg.n_layers, cfg.n_heads, max_len=cfg.prompt_len + cfg.max_new)


def train_sft(cfg: ToyConfig, trans):
    """Supervised next-token training on grammar samples; returns ``(params, final_nll)``."""
    model = make_model(cfg)
    key = jax.random.PRNGKey(cfg.seed)
    total = cfg.prompt_len + cfg.max_new
    params = model.init(key, jnp.zeros((1, total), jnp.int32), jnp.ones((1, total), bool))
    opt = optax.adam(cfg.sft_lr)

    def nll(params, toks, valid):
        logits, _ = model.apply(params, toks, valid)
        m = valid & tk.shift_right(valid, False)  # predict every non-pad token after another
        return -tk.masked_mean(tk.token_logprobs(logits, toks), m)

    def step(carry, k):
        params, opt_state = carry
        toks, valid = sample_sequences(k, cfg, trans, cfg.sft_batch)
        loss, g = jax.value_and_grad(nll)(params, toks, valid)
        upd, opt_state = opt.update(g, opt_state, params)
        return (optax.apply_updates(params, upd), opt_state), loss

    keys = jax.random.split(jax.random.fold_in(key, 1), cfg.sft_steps)
    (params, _), losses = jax.jit(lambda p, s, ks: jax.lax.scan(step, (p, s), ks))(params, opt.init(params), keys)
    return params, float(np.mean(np.asarray(losses[-20:])))


# --- PPO -----------------------------------------------------------------------------------
def make_rl_train(cfg: ToyConfig, trans, allowed, ref_params):
    """``train(key, beta0) -> (params, metrics)``: ``cfg.iters`` PPO iterations as one
    ``lax.scan``. ``beta0`` is traced (vmap it for a sweep). ``metrics`` are ``[iters]``
    (``[iters, K, M]`` for per-minibatch ones)."""
    model = make_model(cfg)
    apply = model.apply
    b, m = cfg.batch, cfg.minibatches
    assert b % m == 0, "batch must be divisible by minibatches"
    opt = optax.chain(optax.clip_by_global_norm(cfg.max_grad_norm), optax.adam(cfg.lr))

    def forward(params, toks, valid):
        logits, values = apply(params, toks, valid)
        return logits, tk.shift_right(values)

    def rollout(params, ref_params, key, beta):
        k_prompt, k_gen = jax.random.split(key)
        seqs, _ = sample_sequences(k_prompt, cfg, trans, b)
        prompt = seqs[:, : cfg.prompt_len]
        toks, valid, amask = generate(apply, params["policy"], k_gen, prompt, prompt != PAD,
                                      cfg.max_new, EOS, PAD)
        logits, _ = forward(params["policy"], toks, valid)
        _, values = forward(params["critic"], toks, valid)
        ref_logits, _ = forward(ref_params, toks, valid)
        logp_old, logp_ref = tk.token_logprobs(logits, toks), tk.token_logprobs(ref_logits, toks)
        score, has_eos = score_fn(cfg, toks, amask)
        kl = tk.kl_penalty(logp_old, logp_ref, cfg.kl_kind, amask)
        rewards = tk.shaped_rewards(score, kl, amask, beta)
        adv, ret = tk.token_gae(rewards, values, amask, cfg.gamma, cfg.gae_lambda)
        # exact KL(pi||ref) of each visited next-token distribution, summed along the response
        lp, lr_ = jax.nn.log_softmax(logits), jax.nn.log_softmax(ref_logits)
        kl_full = tk.shift_right(jnp.sum(jnp.exp(lp) * (lp - lr_), axis=-1))
        batch = dict(toks=toks, valid=valid, mask=amask, logp_old=logp_old, values_old=values,
                     adv=adv, ret=ret)
        stats = dict(
            score=jnp.mean(score),
            kl_seq=jnp.mean(tk.sequence_kl(kl_full, amask)),
            kl_seq_k1=jnp.mean(tk.sequence_kl(tk.kl_penalty(logp_old, logp_ref, "k1", amask), amask)),
            grammatical=grammatical_fraction(cfg, allowed, toks, amask),
            eos_rate=jnp.mean(has_eos),
            resp_len=jnp.mean(jnp.sum(amask, axis=1)),
            target_count=jnp.mean(jnp.sum((toks == cfg.target) & amask, axis=1)),
        )
        return jax.lax.stop_gradient(batch), stats

    def loss_fn(params, mb):
        logits, _ = forward(params["policy"], mb["toks"], mb["valid"])
        _, values = forward(params["critic"], mb["toks"], mb["valid"])
        logp = tk.token_logprobs(logits, mb["toks"])
        adv = tk.masked_whiten(mb["adv"], mb["mask"])
        loss, metrics = tk.token_ppo_loss(
            logp, tk.token_entropy(logits), values, mb["logp_old"], mb["values_old"], adv, mb["ret"],
            mb["mask"], clip_eps=cfg.clip_eps, vf_coef=cfg.vf_coef, ent_coef=cfg.ent_coef,
            vf_clip_eps=cfg.vf_clip_eps, aggregation=cfg.aggregation)
        ratio_dev = jnp.max(jnp.where(mb["mask"], jnp.abs(jnp.exp(logp - jnp.where(mb["mask"], mb["logp_old"], 0.0)) - 1), 0.0))
        return loss, {**metrics, "max_ratio_dev": jax.lax.stop_gradient(ratio_dev)}

    def update(params, opt_state, batch, key):
        def epoch(carry, k):
            params, opt_state = carry
            perm = jax.random.permutation(k, b).reshape(m, b // m)

            def minibatch(carry, idx):
                params, opt_state = carry
                mb = jax.tree_util.tree_map(lambda x: x[idx], batch)
                (_, metrics), g = jax.value_and_grad(loss_fn, has_aux=True)(params, mb)
                upd, opt_state = opt.update(g, opt_state, params)
                metrics["grad_norm"] = optax.tree.norm(g)
                return (optax.apply_updates(params, upd), opt_state), metrics

            return jax.lax.scan(minibatch, (params, opt_state), perm)

        (params, opt_state), metrics = jax.lax.scan(epoch, (params, opt_state), jax.random.split(key, cfg.epochs))
        return params, opt_state, metrics

    def iteration(state, ref_params):
        params, opt_state, beta, key = state
        key, k_roll, k_upd = jax.random.split(key, 3)
        batch, stats = rollout(params, ref_params, k_roll, beta)
        params, opt_state, upd_metrics = update(params, opt_state, batch, k_upd)
        stats = {**stats, "beta": beta, **upd_metrics}
        if cfg.adaptive_target is not None:
            beta = tk.adaptive_kl_update(beta, stats["kl_seq_k1"], cfg.adaptive_target, b, cfg.adaptive_horizon)
        return (params, opt_state, beta, key), stats

    def init(key, beta0, sft_params):
        params = {"policy": sft_params, "critic": sft_params}
        return params, opt.init(params), jnp.asarray(beta0, jnp.float32), key

    def train(key, beta0, sft_params):
        state = init(key, beta0, sft_params)
        state, metrics = jax.lax.scan(lambda s, _: iteration(s, ref_params), state, None, length=cfg.iters)
        return state[0], metrics

    return dict(train=train, iteration=iteration, init=init, rollout=rollout, loss_fn=loss_fn)


# --- exact tabular check -------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class TabularConfig:
    seed: int = 0
    n_content: int = 2  # actions: 0 = EOS, 1..n_content = content tokens (1 is the target)
    horizon: int = 4  # at most this many tokens; no EOS by then -> penalty
    no_eos_penalty: float = 2.0
    beta: float = 0.5
    ref_scale: float = 1.0
    iters: int = 300
    batch: int = 256
    epochs: int = 4
    minibatches: int = 4
    lr: float = 0.03
    clip_eps: float = 0.2
    gae_lambda: float = 0.95


def tabular_problem(cfg: TabularConfig):
    """Prefix tree: state = content prefix, ids in BFS order of the complete C-ary tree
    (children of ``s`` are ``s*C + 1 .. s*C + C``); ``n_states = (C^T - 1)/(C - 1)``.
    Returns ``(ref_logits [S, A], sequences)`` with every complete sequence enumerated as
    ``(states [T], actions [T], mask [T], score)``."""
    c, t = cfg.n_content, cfg.horizon
    n_states = sum(c**k for k in range(t))
    rng = np.random.default_rng(cfg.seed + 7)
    ref_logits = rng.normal(size=(n_states, c + 1)) * cfg.ref_scale
    seqs = []

    def rec(state, depth, states, actions, count):
        for a in range(c + 1):
            s2, a2 = states + [state], actions + [a]
            if a == 0:
                seqs.append((s2, a2, float(count)))
            elif depth + 1 == t:
                seqs.append((s2, a2, float(count + (a == 1)) - cfg.no_eos_penalty))
            else:
                rec(state * c + a, depth + 1, s2, a2, count + (a == 1))

    rec(0, 0, [], [], 0)
    n = len(seqs)
    st, ac, mk, sc = np.zeros((n, t), int), np.zeros((n, t), int), np.zeros((n, t), bool), np.zeros(n)
    for i, (s, a, score) in enumerate(seqs):
        st[i, : len(s)], ac[i, : len(a)], mk[i, : len(s)], sc[i] = s, a, True, score
    return ref_logits.astype(np.float32), (st, ac, mk, sc)


def tabular_optimum(cfg: TabularConfig, ref_logits):
    """Soft Bellman DP: ``V(s) = beta * log sum_a ref(a|s) exp(Q(s,a)/beta)``; returns ``V(root)``.
    ``Q(s, EOS) = count(prefix)``; at the last depth a content token ends the sequence
    without EOS (penalty); otherwise ``Q(s, c) = V(child)`` (+1 into the count if target)."""
    c, t, beta = cfg.n_content, cfg.horizon, cfg.beta
    ref_logits = np.asarray(ref_logits, np.float64)
    logref = ref_logits - np.logaddexp.reduce(ref_logits, axis=1, keepdims=True)

    def v(state, depth, count):
        q = np.zeros(c + 1)
        q[0] = count
        for a in range(1, c + 1):
            cnt = count + (a == 1)
            q[a] = cnt - cfg.no_eos_penalty if depth + 1 == t else v(state * c + a, depth + 1, cnt)
        return beta * np.logaddexp.reduce(logref[state] + q / beta)

    return float(v(0, 0, 0))


def run_tabular(cfg: TabularConfig):
    """PPO with the library's token functions on a tabular policy/critic; ``J`` evaluated
    exactly (enumeration) after every iteration. Returns a dict of results."""
    ref_logits, (st, ac, mk, sc) = tabular_problem(cfg)
    j_star = tabular_optimum(cfg, ref_logits)
    c, t, a_n = cfg.n_content, cfg.horizon, cfg.n_content + 1
    n_states = ref_logits.shape[0]
    ref = jnp.asarray(ref_logits)
    st_, ac_, mk_, sc_ = map(jnp.asarray, (st, ac, mk, sc))
    opt = optax.adam(cfg.lr)
    b, m = cfg.batch, cfg.minibatches

    def exact_j(logits):
        lp = jax.nn.log_softmax(logits)[st_, ac_]
        lr_ = jax.nn.log_softmax(ref)[st_, ac_]
        logp_seq = jnp.sum(jnp.where(mk_, lp, 0.0), axis=1)
        kl_seq = jnp.sum(jnp.where(mk_, lp - lr_, 0.0), axis=1)
        p = jnp.exp(logp_seq)
        return jnp.sum(p * (sc_ - cfg.beta * kl_seq)), jnp.sum(p * sc_), jnp.sum(p * kl_seq)

    def rollout(params, key):
        # sequences laid out as [BOS, a_0, ..., a_{T-1}]: logits at position k = table[state after k tokens]
        def step(carry, k):
            state, done = carry
            a = jax.random.categorical(k, params["policy"][state])
            out = (state, a, ~done)
            done = done | (a == 0)
            state = jnp.where(done, 0, state * c + a)
            return (state, done), out

        keys = jax.random.split(key, t)
        _, (states, actions, live) = jax.lax.scan(step, (jnp.zeros(b, jnp.int32), jnp.zeros(b, bool)), keys)
        states, actions, live = states.T, actions.T, live.T  # [B, T]
        toks = jnp.concatenate([jnp.zeros((b, 1), jnp.int32), actions], axis=1)
        mask = jnp.concatenate([jnp.zeros((b, 1), bool), live], axis=1)
        pos_states = jnp.concatenate([states, jnp.zeros((b, 1), jnp.int32)], axis=1)  # state after k tokens
        count = jnp.sum((actions == 1) & live, axis=1)
        has_eos = jnp.any((actions == 0) & live, axis=1)
        score = count - cfg.no_eos_penalty * (~has_eos)
        return dict(toks=toks, mask=mask, pos_states=pos_states, score=score.astype(jnp.float32))

    def forward(params, batch):
        logits = params["policy"][batch["pos_states"]]
        return logits, tk.shift_right(params["critic"][batch["pos_states"]])

    def iteration(carry, key):
        params, opt_state = carry
        k_roll, k_upd = jax.random.split(key)
        batch = rollout(params, k_roll)
        logits, values = forward(params, batch)
        logp_old = tk.token_logprobs(logits, batch["toks"])
        logp_ref = tk.token_logprobs(ref[batch["pos_states"]], batch["toks"])
        kl = tk.kl_penalty(logp_old, logp_ref, "k1", batch["mask"])
        rewards = tk.shaped_rewards(batch["score"], kl, batch["mask"], cfg.beta)
        adv, ret = tk.token_gae(rewards, values, batch["mask"], 1.0, cfg.gae_lambda)
        data = jax.lax.stop_gradient(dict(batch, logp_old=logp_old, values_old=values, adv=adv, ret=ret))

        def loss_fn(params, mb):
            logits, values = forward(params, mb)
            logp = tk.token_logprobs(logits, mb["toks"])
            loss, _ = tk.token_ppo_loss(logp, tk.token_entropy(logits), values, mb["logp_old"], mb["values_old"],
                                        tk.masked_whiten(mb["adv"], mb["mask"]), mb["ret"], mb["mask"],
                                        clip_eps=cfg.clip_eps, vf_coef=0.5, ent_coef=0.0)
            return loss

        def epoch(carry, k):
            def minibatch(carry, idx):
                params, opt_state = carry
                g = jax.grad(loss_fn)(params, jax.tree_util.tree_map(lambda x: x[idx], data))
                upd, opt_state = opt.update(g, opt_state, params)
                return (optax.apply_updates(params, upd), opt_state), None

            return jax.lax.scan(minibatch, carry, jax.random.permutation(k, b).reshape(m, b // m))[0], None

        (params, opt_state), _ = jax.lax.scan(epoch, (params, opt_state), jax.random.split(k_upd, cfg.epochs))
        return (params, opt_state), exact_j(params["policy"])

    params = {"policy": ref, "critic": jnp.zeros(n_states)}
    run = jax.jit(lambda p, s, ks: jax.lax.scan(iteration, (p, s), ks))
    keys = jax.random.split(jax.random.PRNGKey(cfg.seed), cfg.iters)
    _, (js, scores, kls) = run(params, opt.init(params), keys)
    j_ref = float(exact_j(ref)[0])
    js = np.asarray(js)
    gap = lambda j: (j - j_ref) / (j_star - j_ref)  # noqa: E731
    return dict(j_star=j_star, j_ref=j_ref, j=js, score=np.asarray(scores), kl=np.asarray(kls),
                j_final=float(js[-1]), gap_closed_final=float(gap(js[-1])), gap_closed_best=float(gap(js.max())),
                max_excess=float(js.max() - j_star), n_states=n_states, n_sequences=len(sc))


# --- driver --------------------------------------------------------------------------------
SUMMARY_KEYS = ("score", "kl_seq", "grammatical", "eos_rate", "resp_len", "clip_frac", "approx_kl", "beta")


def per_iteration_table(metrics) -> dict:
    """Host-side ``{name: [iters]}``: rollout stats as is, update stats averaged over K x M."""
    out = {}
    for k, v in metrics.items():
        v = np.asarray(v)
        out[k] = v.reshape(v.shape[0], -1).mean(axis=1) if v.ndim > 1 else v
    return out


def quick_config(**kw) -> ToyConfig:
    base = dict(sft_steps=300, iters=25, batch=32, minibatches=2, epochs=2, lr=1e-3)
    base.update(kw)
    return ToyConfig(**base)


def run_toy(cfg: ToyConfig, betas, log=print):
    """SFT, then PPO for each beta (one vmapped compile). Returns ``(sft_nll, {beta: table})``."""
    trans, allowed = make_grammar(cfg)
    t0 = time.time()
    sft_params, sft_nll = train_sft(cfg, trans)
    log(f"SFT: {cfg.sft_steps} steps, final NLL/token {sft_nll:.3f} ({time.time() - t0:.1f}s)")
    fns = make_rl_train(cfg, trans, allowed, sft_params)
    t0 = time.time()
    train = jax.jit(jax.vmap(fns["train"], in_axes=(None, 0, None)))
    _, metrics = train(jax.random.PRNGKey(cfg.seed + 1), jnp.asarray(betas, jnp.float32), sft_params)
    metrics = jax.device_get(metrics)
    log(f"PPO: {len(betas)} beta(s) x {cfg.iters} iterations ({time.time() - t0:.1f}s incl. compile)")
    tables = {}
    for i, beta in enumerate(betas):
        tables[float(beta)] = per_iteration_table({k: v[i] for k, v in metrics.items()})
    return sft_nll, tables, metrics


def fmt_row(vals, widths):
    return "| " + " | ".join(str(v).rjust(w) for v, w in zip(vals, widths)) + " |"


def markdown_table(header, rows):
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) for i, h in enumerate(header)]
    lines = [fmt_row(header, widths), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    return "\n".join(lines + [fmt_row(r, widths) for r in rows])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="CI-sized run (well under 2 minutes)")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "rlhf_toy"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--betas", default=None, help="comma-separated beta sweep (first = main run)")
    ap.add_argument("--iters", type=int, default=None)
    ap.add_argument("--adaptive-target", type=float, default=None,
                    help="adaptive KL controller: target KL per sequence (betas become initial values)")
    ap.add_argument("--no-plot", action="store_true")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    kw = dict(seed=args.seed, adaptive_target=args.adaptive_target) | ({"iters": args.iters} if args.iters else {})
    cfg = quick_config(**kw) if args.quick else ToyConfig(**kw)
    betas = ([float(x) for x in args.betas.split(",")] if args.betas
             else ([0.1] if args.quick else [0.3, 0.003, 0.03, 0.1, 1.0]))
    t_start = time.time()
    sft_nll, tables, _ = run_toy(cfg, betas)
    main_beta = betas[0]

    # per-iteration table of the main run
    tab = tables[main_beta]
    with open(os.path.join(args.out, "iterations.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["iter", *SUMMARY_KEYS])
        for i in range(cfg.iters):
            w.writerow([i, *(f"{tab[k][i]:.5g}" for k in SUMMARY_KEYS)])
    print(f"\nmain run, beta={main_beta}:")
    every = max(1, cfg.iters // 10)
    rows = [[i, *(f"{tab[k][i]:.3f}" for k in SUMMARY_KEYS)] for i in range(0, cfg.iters, every)]
    if (cfg.iters - 1) % every:
        rows.append([cfg.iters - 1, *(f"{tab[k][-1]:.3f}" for k in SUMMARY_KEYS)])
    iter_md = markdown_table(["iter", *SUMMARY_KEYS], rows)
    print(iter_md)

    # beta sweep summary: first iteration (= SFT policy) vs mean of the last 10%
    tail = max(1, cfg.iters // 10)
    sweep_rows = []
    for beta in sorted(tables):
        t = tables[beta]
        sweep_rows.append([beta, f"{t['score'][0]:.2f}", f"{t['score'][-tail:].mean():.2f}",
                           f"{t['kl_seq'][-tail:].mean():.2f}", f"{t['grammatical'][-tail:].mean():.3f}",
                           f"{t['eos_rate'][-tail:].mean():.2f}", f"{t['resp_len'][-tail:].mean():.1f}"])
    sweep_md = markdown_table(["beta", "score (SFT)", "score (final)", "KL/seq", "grammatical", "EOS rate",
                               "resp len"], sweep_rows)
    print(f"\nbeta sweep (final = mean of last {tail} iterations):\n" + sweep_md)
    with open(os.path.join(args.out, "beta_sweep.csv"), "w", newline="") as f:
        csv.writer(f).writerows([["beta", "score_sft", "score_final", "kl_seq", "grammatical", "eos_rate",
                                  "resp_len"], *sweep_rows])

    # exact tabular check
    tcfg = TabularConfig(seed=args.seed, iters=100 if args.quick else 300)
    t0 = time.time()
    tres = run_tabular(tcfg)
    tab_md = markdown_table(
        ["beta", "J(ref)", "J* (DP)", "J(PPO, final)", "max J - J*", "gap closed (final)", "gap closed (best)"],
        [[tcfg.beta, f"{tres['j_ref']:.4f}", f"{tres['j_star']:.4f}", f"{tres['j_final']:.4f}",
          f"{tres['max_excess']:.2e}", f"{tres['gap_closed_final']:.3f}", f"{tres['gap_closed_best']:.3f}"]])
    print(f"\ntabular check ({tres['n_states']} states, {tres['n_sequences']} sequences, {tcfg.iters} iters, "
          f"{time.time() - t0:.1f}s):\n" + tab_md)

    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(f"# rlhf_toy results ({'quick' if args.quick else 'full'} run, seed {args.seed})\n\n")
        f.write(f"config: `{dataclasses.asdict(cfg)}`\n\nSFT final NLL/token: {sft_nll:.3f}\n\n")
        f.write(f"## main run (beta={main_beta})\n\n{iter_md}\n\n## beta sweep\n\n{sweep_md}\n\n")
        f.write(f"## tabular exact check\n\n{tab_md}\n\n")
        f.write(f"total wall time: {time.time() - t_start:.0f}s\n")
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump({"sft_nll": sft_nll, "betas": betas,
                   "sweep": {str(b): {k: [float(x) for x in v] for k, v in tables[b].items()
                                      if k in SUMMARY_KEYS} for b in tables},
                   "tabular": {k: (float(v) if np.ndim(v) == 0 else [float(x) for x in v]) for k, v in tres.items()}},
                  f)
    if not args.no_plot:
        plot(args.out, tables, main_beta, tres)
    print(f"\nwrote {args.out} ({time.time() - t_start:.0f}s)")
    return sft_nll, tables, tres


def plot(out, tables, main_beta, tres):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed (pip install purejaxppo[plot]): skipping plots")
        return
    keys = ["score", "kl_seq", "grammatical", "eos_rate", "clip_frac", "approx_kl"]
    fig, axes = plt.subplots(2, 3, figsize=(11, 5.5))
    for ax, k in zip(axes.flat, keys):
        for beta in sorted(tables):
            ax.plot(tables[beta][k], label=f"beta={beta:g}", lw=2.0 if beta == main_beta else 1.0)
        ax.set_title(k)
        ax.set_xlabel("iteration")
    axes[0, 0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "training.png"), dpi=80)
    plt.close(fig)

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
    betas = sorted(tables)
    tail = lambda t, k: t[k][-max(1, len(t[k]) // 10):].mean()  # noqa: E731
    ax = axes[0]
    ax.scatter([tail(tables[b], "kl_seq") for b in betas], [tail(tables[b], "score") for b in betas])
    for b in betas:
        ax.annotate(f"{b:g}", (tail(tables[b], "kl_seq"), tail(tables[b], "score")))
    ax.set_xlabel("KL(pi || ref) per sequence")
    ax.set_ylabel("score")
    ax.set_title("beta sweep: score vs KL")
    ax = axes[1]
    ax.plot(tres["j"], label="J(PPO)")
    ax.axhline(tres["j_star"], color="k", ls="--", label="J* (DP)")
    ax.axhline(tres["j_ref"], color="gray", ls=":", label="J(ref)")
    ax.set_xlabel("iteration")
    ax.set_title("tabular: E[score] - beta KL")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "sweep_tabular.png"), dpi=80)
    plt.close(fig)


if __name__ == "__main__":
    main()
