"""Toy RLHF with token-level PPO on CPU, in minutes: a thin script over :mod:`purejaxppo.lm`.

1. The grammar task (:class:`purejaxppo.lm.tasks.builtin_tasks.GrammarTask`: a seeded sparse Markov chain)
   gives ``prompt SEP response EOS`` demonstrations; a tiny causal transformer is pretrained on
   them (:func:`purejaxppo.lm.sft.sft_training.train_sft`): the SFT model, also the frozen reference.
2. PPO (:func:`purejaxppo.lm.ppo.token_ppo.make_token_ppo`) fine-tunes it against the task's
   score, the number of TARGET tokens in the response, minus a penalty when no EOS is produced.
3. A beta sweep (``vmap`` over the traced beta: one compile) shows the trade-off: high beta
   stays close to the reference (grammatical) with a small score gain, low beta hacks the
   reward by spamming the target token ungrammatically.
4. An exact check on a tabular policy, where the KL-regularised optimum
   ``J* = max_pi E[score] - beta * KL(pi || ref)`` is known by dynamic programming: PPO (the
   library's token functions and ``update_epochs``) must approach ``J*`` and never exceed it.

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

import jax
import jax.numpy as jnp
import numpy as np
import optax

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from purejaxppo.lm import (
    kl_penalty,
    masked_whiten,
    shaped_rewards,
    shift_right,
    token_entropy,
    token_gae,
    token_logprobs,
    token_ppo_loss,
)  # noqa: E402
from purejaxppo.lm import GrammarTask, init_tiny_lm, make_token_ppo, TokenPPOConfig, train_sft  # noqa: E402
from purejaxppo.stages.update import TrainState, update_epochs  # noqa: E402


@dataclasses.dataclass(frozen=True)
class ToyConfig:
    seed: int = 0
    d_model: int = 32
    n_layers: int = 2
    n_heads: int = 2
    sft_steps: int = 600
    sft_batch: int = 128
    sft_lr: float = 3e-3
    iters: int = 120
    batch: int = 128
    epochs: int = 4
    minibatches: int = 4
    lr: float = 5e-4
    no_eos_penalty: float = 2.0
    kl_kind: str = "k1"
    adaptive_target: float | None = None  # KL per sequence; None = fixed beta
    adaptive_horizon: float = 1000.0

    def ppo(self, task) -> TokenPPOConfig:
        return TokenPPOConfig(
            batch_size=self.batch,
            num_iterations=self.iters,
            update_epochs=self.epochs,
            num_minibatches=self.minibatches,
            max_new_tokens=task.max_new,
            stop_ids=task.stop_ids,
            pad_id=task.pad_id,
            kl_estimator=self.kl_kind,
            adaptive_kl=self.adaptive_target is not None,
            kl_target=self.adaptive_target or 1.0,
            kl_horizon=self.adaptive_horizon,
            actor_lr=self.lr,
            critic_lr=self.lr,
            missing_eos_penalty=self.no_eos_penalty,
        )


# what the per-iteration table shows: the library's metrics, the task's grammaticality
SUMMARY_KEYS = ("score", "kl", "task_grammatical", "eos_rate", "response_length", "clip_frac", "approx_kl", "beta")


def quick_config(**kw) -> ToyConfig:
    base = dict(sft_steps=300, iters=25, batch=32, minibatches=2, epochs=2, lr=1e-3)
    base.update(kw)
    return ToyConfig(**base)


def run_toy(cfg: ToyConfig, betas, log=print):
    """SFT, then PPO for each beta (one vmapped compile). Returns ``(sft_nll, {beta: {name: [iters]}}, metrics)``."""
    task = GrammarTask(seed=cfg.seed)
    t0 = time.time()
    lm, params = init_tiny_lm(task, jax.random.PRNGKey(cfg.seed), cfg.d_model, cfg.n_layers, cfg.n_heads)
    params, losses = train_sft(
        lm,
        params,
        task,
        jax.random.PRNGKey(cfg.seed + 1),
        steps=cfg.sft_steps,
        batch=cfg.sft_batch,
        learning_rate=cfg.sft_lr,
    )
    sft_nll = float(np.mean(np.asarray(losses)[-20:]))
    log(f"SFT: {cfg.sft_steps} steps, final NLL/token {sft_nll:.3f} ({time.time() - t0:.1f}s)")
    config = cfg.ppo(task)
    tp = make_token_ppo(config, lm, lambda _, *b: task.score(*b), prompts=task.prompts, diagnostics=task.diagnostics)
    configs = jax.tree.map(lambda x: jnp.full((len(betas),), x, jnp.float32), config).replace(
        beta=jnp.asarray(betas, jnp.float32)
    )
    t0 = time.time()
    train = jax.jit(jax.vmap(tp.train, in_axes=(None, None, None, None, None, 0)))
    _, metrics = jax.device_get(train(jax.random.PRNGKey(cfg.seed + 2), params, params, None, None, configs))
    log(f"PPO: {len(betas)} beta(s) x {cfg.iters} iterations ({time.time() - t0:.1f}s incl. compile)")
    tables = {float(beta): {k: np.asarray(v[i]) for k, v in metrics.items()} for i, beta in enumerate(betas)}
    return sft_nll, tables, metrics


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
    c, t = cfg.n_content, cfg.horizon
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
        return logits, shift_right(params["critic"][batch["pos_states"]])

    def iteration(carry, key):
        params, opt_state = carry
        k_roll, k_upd = jax.random.split(key)
        batch = rollout(params, k_roll)
        logits, values = forward(params, batch)
        logp_old = token_logprobs(logits, batch["toks"])
        logp_ref = token_logprobs(ref[batch["pos_states"]], batch["toks"])
        kl = kl_penalty(logp_old, logp_ref, "k1", batch["mask"])
        rewards = shaped_rewards(batch["score"], kl, batch["mask"], cfg.beta)
        adv, ret = token_gae(rewards, values, batch["mask"], 1.0, cfg.gae_lambda)
        data = jax.lax.stop_gradient(dict(batch, logp_old=logp_old, values_old=values, adv=adv, ret=ret))

        def loss_fn(params, mb):
            logits, values = forward(params, mb)
            logp = token_logprobs(logits, mb["toks"])
            return token_ppo_loss(
                logp,
                token_entropy(logits),
                values,
                mb["logp_old"],
                mb["values_old"],
                masked_whiten(mb["adv"], mb["mask"]),
                mb["ret"],
                mb["mask"],
                clip_eps=cfg.clip_eps,
                vf_coef=0.5,
                ent_coef=0.0,
            )

        state, _ = update_epochs(
            k_upd,
            TrainState(params, opt_state),
            data,
            loss_fn=loss_fn,
            optimizer=opt,
            num_epochs=cfg.epochs,
            num_minibatches=m,
        )
        params, opt_state = state
        return (params, opt_state), exact_j(params["policy"])

    params = {"policy": ref, "critic": jnp.zeros(n_states)}
    run = jax.jit(lambda p, s, ks: jax.lax.scan(iteration, (p, s), ks))
    keys = jax.random.split(jax.random.PRNGKey(cfg.seed), cfg.iters)
    _, (js, scores, kls) = run(params, opt.init(params), keys)
    j_ref = float(exact_j(ref)[0])
    js = np.asarray(js)
    gap = lambda j: (j - j_ref) / (j_star - j_ref)  # noqa: E731
    return dict(
        j_star=j_star,
        j_ref=j_ref,
        j=js,
        score=np.asarray(scores),
        kl=np.asarray(kls),
        j_final=float(js[-1]),
        gap_closed_final=float(gap(js[-1])),
        gap_closed_best=float(gap(js.max())),
        max_excess=float(js.max() - j_star),
        n_states=n_states,
        n_sequences=len(sc),
    )


# --- driver --------------------------------------------------------------------------------
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
    ap.add_argument(
        "--adaptive-target",
        type=float,
        default=None,
        help="adaptive KL controller: target KL per sequence (betas become initial values)",
    )
    ap.add_argument("--no-plot", action="store_true")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    kw = dict(seed=args.seed, adaptive_target=args.adaptive_target) | ({"iters": args.iters} if args.iters else {})
    cfg = quick_config(**kw) if args.quick else ToyConfig(**kw)
    betas = (
        [float(x) for x in args.betas.split(",")]
        if args.betas
        else ([0.1] if args.quick else [0.3, 0.003, 0.03, 0.1, 1.0])
    )
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
        sweep_rows.append(
            [
                beta,
                f"{t['score'][0]:.2f}",
                f"{t['score'][-tail:].mean():.2f}",
                f"{t['kl'][-tail:].mean():.2f}",
                f"{t['task_grammatical'][-tail:].mean():.3f}",
                f"{t['eos_rate'][-tail:].mean():.2f}",
                f"{t['response_length'][-tail:].mean():.1f}",
            ]
        )
    sweep_md = markdown_table(
        ["beta", "score (SFT)", "score (final)", "KL/seq", "grammatical", "EOS rate", "resp len"], sweep_rows
    )
    print(f"\nbeta sweep (final = mean of last {tail} iterations):\n" + sweep_md)
    with open(os.path.join(args.out, "beta_sweep.csv"), "w", newline="") as f:
        csv.writer(f).writerows(
            [["beta", "score_sft", "score_final", "kl_seq", "grammatical", "eos_rate", "resp_len"], *sweep_rows]
        )

    # exact tabular check
    tcfg = TabularConfig(seed=args.seed, iters=100 if args.quick else 300)
    t0 = time.time()
    tres = run_tabular(tcfg)
    tab_md = markdown_table(
        ["beta", "J(ref)", "J* (DP)", "J(PPO, final)", "max J - J*", "gap closed (final)", "gap closed (best)"],
        [
            [
                tcfg.beta,
                f"{tres['j_ref']:.4f}",
                f"{tres['j_star']:.4f}",
                f"{tres['j_final']:.4f}",
                f"{tres['max_excess']:.2e}",
                f"{tres['gap_closed_final']:.3f}",
                f"{tres['gap_closed_best']:.3f}",
            ]
        ],
    )
    print(
        f"\ntabular check ({tres['n_states']} states, {tres['n_sequences']} sequences, {tcfg.iters} iters, "
        f"{time.time() - t0:.1f}s):\n" + tab_md
    )

    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(f"# rlhf_toy results ({'quick' if args.quick else 'full'} run, seed {args.seed})\n\n")
        f.write(f"config: `{dataclasses.asdict(cfg)}`\n\nSFT final NLL/token: {sft_nll:.3f}\n\n")
        f.write(f"## main run (beta={main_beta})\n\n{iter_md}\n\n## beta sweep\n\n{sweep_md}\n\n")
        f.write(f"## tabular exact check\n\n{tab_md}\n\n")
        f.write(f"total wall time: {time.time() - t_start:.0f}s\n")
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(
            {
                "sft_nll": sft_nll,
                "betas": betas,
                "sweep": {
                    str(b): {k: [float(x) for x in v] for k, v in tables[b].items() if k in SUMMARY_KEYS}
                    for b in tables
                },
                "tabular": {k: (float(v) if np.ndim(v) == 0 else [float(x) for x in v]) for k, v in tres.items()},
            },
            f,
        )
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
    keys = ["score", "kl", "task_grammatical", "eos_rate", "clip_frac", "approx_kl"]
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
    tail = lambda t, k: t[k][-max(1, len(t[k]) // 10) :].mean()  # noqa: E731
    ax = axes[0]
    ax.scatter([tail(tables[b], "kl") for b in betas], [tail(tables[b], "score") for b in betas])
    for b in betas:
        ax.annotate(f"{b:g}", (tail(tables[b], "kl"), tail(tables[b], "score")))
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
