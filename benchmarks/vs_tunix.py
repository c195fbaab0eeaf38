"""Token-level PPO side by side with google-tunix 0.1.7's PPO learner: same model, weights, prompts, hyperparameters.

tunix runs in its own virtual environment: ``pip install --dry-run google-tunix==0.1.7`` in the
project's venv resolves without touching jax 0.10.2, but it would install transformers and move
``huggingface_hub`` 2.4.0 -> 1.33.0 (and pull datasets, tensorflow-datasets, grain, ...) into an
environment other code shares, so it gets its own, with the project's jax/flax versions pinned.
One-time install::

    python3 -m venv /tmp/tunix-venv && /tmp/tunix-venv/bin/pip install jax==0.10.2 jaxlib==0.10.2 flax==0.12.8 optax==0.2.8 numpy==2.4.6 google-tunix==0.1.7

Then::

    flock /tmp/purejaxppo-timing.lock python benchmarks/vs_tunix.py [--tunix-python /tmp/tunix-venv/bin/python]
        [--lengths 16,64,256] [--iterations 4] [--learning-iterations 20] [--betas 0.03,0.1,0.3] [--seeds 3]
        [--json benchmarks/results/vs_tunix.json]

The setup is ``benchmarks/vs_trl.py``'s (the same SFT GPT-2 in HF layout, prompt pool, task and
hyperparameters; our side is the same worker). tunix has no GPT-2, so ``benchmarks/_tunix_side.py``
writes one as a flax ``nnx`` module in tunix's model protocol and loads the same safetensors; the
critic is that trunk with a zero-initialised ``score`` head; the reward is a ``reward_fn`` on the
decoded texts (exact match, minus the missing-EOS penalty, which tunix does not have). tunix's
rollout is its "vanilla" engine (its own KV-cache sampler), all roles on one CPU device (a 1x1 mesh).

Matched: batch 64; 4 epochs (``PPOConfig.num_iterations``) x minibatches of 16; Adam lr 1e-3, eps 1e-8,
gradient clip 1.0 per network (actor and critic optimizers apart, as ours); temperature 1.0,
top-p 1, no top-k; k1 KL (``kl_method="kl"``) in the reward at the given beta; clip 0.2, value clip
0.2; gamma 1, lambda 0.95; no entropy bonus.

Not matchable (tunix's code fixes them):
* the EOS action: tunix's sampler cuts each completion BEFORE its stop token, so EOS is never in
  the completion mask (never trained, never KL-penalised) and the score sits on the last content
  token; ours trains the EOS token and puts the score on it;
* the iteration's structure: tunix's global step of 64 prompts is four rounds of (sample 16 rows,
  score them, 4 epochs of one 16-row minibatch step each), each round sampled with the policy the
  previous round updated (so its first iteration already has KL > 0) and its advantages whitened
  over 16 rows; ours samples all 64 rows with one policy, whitens over the 64 and takes 4 epochs x
  4 shuffled minibatches. Both take 16 optimizer steps per 64 prompts;
* tunix's value loss is 0.5 * squared error (clipped) with its own optimizer: ``vf_coef`` has no
  equivalent (ours 0.5, scaling a separate Adam's gradients, which Adam nearly ignores);
* generation: tunix's sampler stops once every row is done; the throughput rows turn EOS off on
  both sides (tunix: a stop id no model emits) so every response is ``T`` tokens;
* advantages: both whiten; tunix's GAE skips masked steps inside the scan.

Timing: tunix's first iteration (its jit compiles) is reported apart; the split hooks
``RLCluster.generate`` (generation), ``_generate_and_compute_advantage`` (generation + reference,
old-policy and value passes, reward, GAE) and ``_run_global_step`` (the whole iteration).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import vs_trl  # noqa: E402
from vs_trl import HERE, HYPER, _interval, _median, _spawn, loadavg, prepare, run_ours  # noqa: E402

TUNIX_PYTHON = "/tmp/tunix-venv/bin/python"
INSTALL = (
    "python3 -m venv /tmp/tunix-venv && /tmp/tunix-venv/bin/pip install jax==0.10.2 jaxlib==0.10.2 "
    "flax==0.12.8 optax==0.2.8 numpy==2.4.6 google-tunix==0.1.7"
)


def run_tunix(python, spec, tag, timeout=3600):
    return _spawn(python, [os.path.join(HERE, "_tunix_side.py")], spec, tag, timeout)


def check(python: str) -> str | None:
    """None when the tunix side can run, else why not."""
    if not os.path.exists(python):
        return f"no tunix environment at {python}; install it once with:\n  {INSTALL}"
    probe = subprocess.run(
        [python, "-c", "import tunix.rl.ppo.ppo_learner, jax; print(jax.__version__)"], capture_output=True, text=True
    )
    if probe.returncode != 0:
        return f"tunix does not import in {python}:\n{probe.stderr[-2000:]}"
    return None


def throughput_row(t, ours, peer):
    b = HYPER["batch_size"]
    tm = {k: v[1:] for k, v in ours["times"].items()}
    it, g, gs = _median(tm["iteration"]), _median(tm["gen"]), _median(tm["gen_score"])
    o = dict(
        iteration_s=it,
        generation_s=g,
        scoring_s=max(gs - g, 0.0),
        update_s=max(it - gs, 0.0),
        first_s=sum(ours["compile_s"].values()),
        peak_rss_mb=ours["peak_rss_mb"],
        tokens_per_s=b * t / it,
    )
    rows = peer["rows"][1:]
    med = lambda k: _median([r[k] for r in rows])  # noqa: E731
    p = dict(
        iteration_s=med("iteration_s"),
        generation_s=med("generation_s"),
        scoring_s=med("scoring_s"),
        update_s=med("update_s"),
        first_s=peer["rows"][0]["iteration_s"],
        peak_rss_mb=peer["peak_rss_mb"],
    )
    p["tokens_per_s"] = b * t / p["iteration_s"]
    return {
        "T": t,
        "ours": o,
        "tunix": p,
        "ratio": o["tokens_per_s"] / p["tokens_per_s"],
        "loadavg": [ours["loadavg_before"], peer["loadavg_after"]],
    }


def print_tables(result):
    print(f"\nthroughput vs tunix (batch {HYPER['batch_size']}, EOS off: every response is T tokens; medians)")
    print(
        f"{'T':>4} {'side':>6} {'first s':>8} {'iter s':>8} {'gen s':>7} {'score s':>8} {'update s':>9} "
        f"{'tok/s':>8} {'peak MB':>8} {'ours/tunix':>10}  load"
    )
    for row in result["throughput"]:
        for side in ("ours", "tunix"):
            s = row[side]
            ratio = f"{row['ratio']:10.2f}" if side == "ours" else " " * 10
            print(
                f"{row['T']:>4} {side:>6} {s['first_s']:8.2f} {s['iteration_s']:8.3f} {s['generation_s']:7.3f} "
                f"{s['scoring_s']:8.3f} {s['update_s']:9.3f} {s['tokens_per_s']:8.0f} {s['peak_rss_mb']:8.0f} "
                f"{ratio}  {' / '.join(row['loadavg']) if side == 'ours' else ''}"
            )
    if result.get("learning"):
        print(
            f"\nlearning vs tunix (T=16, EOS on, {result['learning_iterations']} iterations; mean of the last "
            f"{result['tail']} per seed, mean +- 95% t-interval over seeds)"
        )
        print(f"{'beta':>5} {'side':>6} {'seeds':>5} {'score it1':>9} {'score':>15} {'KL/seq':>15}")
        for row in result["learning"]:
            for side in ("ours", "tunix"):
                if f"{side}_score" not in row:
                    print(f"{row['beta']:>5} {side:>6} {0:>5}  (not run)")
                    continue
                sc, kl = row[f"{side}_score"], row[f"{side}_kl"]
                print(
                    f"{row['beta']:>5} {side:>6} {row[f'{side}_seeds']:>5} {row[f'{side}_score_first']:9.3f} "
                    f"{sc[0]:7.3f} +- {sc[1]:5.3f} {kl[0]:7.3f} +- {kl[1]:5.3f}  "
                    f"{row[f'{side}_collapsed']} of {row[f'{side}_seeds']} collapsed (score < 0.05)"
                )
    for note in result.get("not_run", []):
        print("not run:", note)


def learning_rows(ours_runs, peer_runs, tail):
    import numpy as np

    out = []
    for beta in sorted({r["beta"] for r in ours_runs}):
        row = {"beta": beta}
        for side, runs in (("ours", ours_runs), ("tunix", peer_runs)):
            mine = [r for r in runs if r["beta"] == beta]
            row[f"{side}_seeds"] = len(mine)
            if mine:  # nan-aware: a collapsed run (every completion empty) has no tokens, so no KL
                row[f"{side}_score"] = _interval([np.nanmean(r["score"][-tail:]) for r in mine])
                row[f"{side}_kl"] = _interval([np.nanmean(r["kl"][-tail:]) for r in mine])
                row[f"{side}_collapsed"] = sum(bool(np.mean(r["score"][-tail:]) < 0.05) for r in mine)
                row[f"{side}_score_first"] = float(np.mean([r["score"][0] for r in mine]))
        out.append(row)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tunix-python", default=TUNIX_PYTHON)
    ap.add_argument("--lengths", default="16,64,256")
    ap.add_argument("--iterations", type=int, default=4, help="per throughput row (the first compiles)")
    ap.add_argument("--learning-iterations", type=int, default=20)
    ap.add_argument("--tail", type=int, default=5)
    ap.add_argument("--betas", default="0.03,0.1,0.3")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--budget-s", type=float, default=2400, help="stop starting tunix learning runs past this")
    ap.add_argument("--skip-learning", action="store_true")
    ap.add_argument(
        "--ours-learning",
        default=None,
        help="reuse our learning runs from a vs_trl.py JSON (same grid) instead of rerunning them",
    )
    ap.add_argument("--json", default=os.path.join(HERE, "results", "vs_tunix.json"))
    ap.add_argument("--tables", metavar="JSON", default=None, help="print the tables of a saved run and exit")
    args = ap.parse_args(argv)
    if args.tables:
        with open(args.tables) as f:
            saved = json.load(f)
        if saved.get("learning_raw"):
            saved["learning"] = learning_rows(
                saved["learning_raw"]["ours"]["runs"], saved["learning_raw"]["tunix"], saved["tail"]
            )
        print_tables(saved)
        return saved
    why = check(args.tunix_python)
    if why:
        print(f"tunix side cannot run: {why}")
        sys.exit(2)
    t_start = time.perf_counter()
    info = prepare()
    from _common import hardware

    result = {
        "benchmark": "vs_tunix",
        "hardware": hardware(),
        "sft": info,
        "hyper": HYPER,
        "model": vs_trl.MODEL,
        "task": vs_trl.TASK,
        "command": "python benchmarks/vs_tunix.py " + " ".join(argv or sys.argv[1:]),
        "loadavg_start": loadavg(),
        "throughput": [],
        "not_run": [],
    }
    base = {**HYPER, "model_dir": info["model_dir"], "prompts": info["prompts"], "threads": 2, "seed": 0}
    for t in [int(x) for x in args.lengths.split(",")]:
        spec = {
            **base,
            "mode": "throughput",
            "iterations": args.iterations,
            "response_length": t,
            "stop": None,
            "beta": 0.1,
        }
        ours = run_ours(spec, f"ours_T{t}_vs_tunix")
        peer = run_tunix(args.tunix_python, spec, f"tunix_T{t}")
        row = throughput_row(t, ours, peer)
        row["raw"] = {"ours": ours, "tunix": peer}
        result["throughput"].append(row)
        print(
            f"T={t}: ours {row['ours']['tokens_per_s']:.0f} tok/s, tunix {row['tunix']['tokens_per_s']:.0f} tok/s, "
            f"ratio {row['ratio']:.2f} (load {loadavg()})",
            flush=True,
        )
        vs_trl._write(args.json, result)
    if not args.skip_learning:
        betas, seeds = [float(x) for x in args.betas.split(",")], list(range(args.seeds))
        spec = {
            **base,
            "mode": "learning",
            "iterations": args.learning_iterations,
            "response_length": 16,
            "stop": 1,
            "beta": betas[0],
            "betas": betas,
            "seeds": seeds,
        }
        if args.ours_learning:
            with open(args.ours_learning) as f:
                ours = json.load(f)["learning_raw"]["ours"]
        else:
            ours = run_ours(spec, "ours_learning_vs_tunix")
        runs = vs_trl.peer_grid(
            "tunix",
            lambda s, tag: run_tunix(args.tunix_python, s, tag),
            spec,
            betas,
            seeds,
            args,
            t_start,
            result["not_run"],
        )
        result.update(
            learning_iterations=args.learning_iterations,
            tail=args.tail,
            learning=learning_rows(ours["runs"], runs, args.tail),
            learning_raw={"ours": ours, "tunix": runs},
        )
    result["loadavg_end"] = loadavg()
    result["wall_s"] = time.perf_counter() - t_start
    vs_trl._write(args.json, result)
    print_tables(result)
    return result


if __name__ == "__main__":
    main()
