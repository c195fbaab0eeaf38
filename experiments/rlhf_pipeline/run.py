"""The classic RLHF pipeline on a CPU, end to end, in one command:

1. a synthetic corpus (:mod:`objective`), a BPE tokenizer trained on it with ``tokenizers`` and a
   random Llama (GQA) in a Hugging Face folder (``init_model/``);
2. SFT from scratch on the corpus (``sft_model/``);
3. preference pairs: two SFT samples per prompt, labelled by the hidden TRUE objective with
   Bradley-Terry noise (``data/pairs.jsonl``);
4. a reward model trained on them with ``python -m purejaxppo reward`` (``rm/model``);
5. PPO against the reward model, ``seeds`` seeds for each of the ``betas``;
6. the same PPO with the true objective as the reward (``--reward objective.py:true_reward``);
7. every PPO checkpoint evaluated on fresh samples: true objective, proxy (reward model) and KL
   from the SFT model (``eval.csv``, ``summary.json``, plots).

Usage::

    python experiments/rlhf_pipeline/run.py --out runs/pipeline            # the full experiment (~14 min)
    python experiments/rlhf_pipeline/run.py --out /tmp/pipeline --quick    # every stage, tiny (~2 min)

The sizes are :data:`FULL` (or :data:`QUICK`); ``--set KEY=VALUE`` changes one (``--set
betas=0.005,0.02 --set rewards=rm --set kl_estimator=k3``). A stage whose record is in
``--out/stages/`` is not run again (delete it to redo the stage); the tables and figures are
rebuilt every time.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [HERE, ROOT]

FULL = dict(
    corpus=8000,
    vocab=384,
    width=64,
    layers=2,
    sft_steps=1500,
    pairs=4000,
    rm_epochs=5,
    seeds=4,
    betas=(0.005, 0.02, 0.08),
    iterations=100,
    batch=64,
    chunk=5,
    lr=3e-4,
    reps=4,
    rewards="rm,true",
    kl_estimator="k1",
)
QUICK = dict(
    corpus=2000,
    vocab=384,
    width=32,
    layers=1,
    sft_steps=200,
    pairs=400,
    rm_epochs=2,
    seeds=2,
    betas=(0.03,),
    iterations=4,
    batch=32,
    chunk=2,
    lr=3e-4,
    reps=1,
    rewards="rm,true",
    kl_estimator="k1",
)


TRAINING = ("score", "kl", "entropy", "response_length")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def reward_stage(out: str, epochs: int, seed: int) -> dict:
    """Stage 4 through the command line; its held-out pairwise accuracy per epoch."""
    run_dir = os.path.join(out, "rm")
    if not os.path.isdir(os.path.join(run_dir, "model")):
        cmd = [
            sys.executable,
            "-m",
            "purejaxppo",
            "reward",
            "--model",
            os.path.join(out, "sft_model"),
            "--pairs",
            os.path.join(out, "data", "pairs.jsonl"),
            "--epochs",
            str(epochs),
            "--lr",
            "1e-3",
            "--minibatch",
            "32",
            "--held-out",
            "0.2",
            "--seed",
            str(seed),
            "--run-dir",
            run_dir,
            "--quiet",
        ]
        log("reward model: " + " ".join(cmd[1:]))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
        subprocess.run(cmd, check=True, env=env)
    with open(os.path.join(run_dir, "metrics.csv")) as f:
        rows = list(csv.DictReader(f))
    return {
        "rm_eval_accuracy": [float(r["eval_accuracy"]) for r in rows],
        "rm_eval_loss": [float(r["eval_loss"]) for r in rows],
    }


def stage(out: str, name: str, fn, *args, **kwargs) -> dict:
    """Run ``fn`` unless ``out/stages/name.json`` holds its record; the record either way."""
    path = os.path.join(out, "stages", f"{name}.json")
    if os.path.exists(path):
        with open(path) as f:
            return json.load(f)
    t = time.time()
    log(f"{name} ...")
    record = {**fn(*args, **kwargs), "wall_s": round(time.time() - t, 1)}
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(record, f, indent=1)
    log(f"{name}: {json.dumps(record)[:400]}")
    return record


def build_models(out: str, p: dict, seed: int) -> dict:
    """Stages 1-4 (each skipped when ``out/stages/`` holds its record): the tokenizer, the SFT
    model, the preference pairs and the reward model in ``out``; their records by stage."""
    import world

    records = {}
    records["world"] = stage(
        out,
        "world",
        world.build_world,
        out,
        corpus_size=p["corpus"],
        vocab=p["vocab"],
        width=p["width"],
        layers=p["layers"],
        seed=seed,
    )
    records["sft"] = stage(out, "sft", world.run_sft, out, steps=p["sft_steps"], batch=64, lr=3e-3, seed=seed)
    records["pairs"] = stage(out, "pairs", world.make_pairs, out, n_pairs=p["pairs"], noise_scale=1.0, seed=seed)
    records["rm"] = stage(out, "rm", reward_stage, out, p["rm_epochs"], seed)
    return records


def apply_sets(ap, sizes: dict, items, tuple_key: str) -> dict:
    """``sizes`` with each ``--set KEY=VALUE`` applied (``tuple_key`` takes comma-separated floats,
    the others their default's type); an unknown key is a usage error naming the sizes."""
    for item in items:
        k, _, v = item.partition("=")
        if k not in sizes:
            ap.error(f"--set {item}: no size {k!r}; one of {', '.join(sizes)}")
        sizes[k] = tuple(float(x) for x in v.split(",")) if k == tuple_key else type(sizes[k])(v)
    return sizes


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="output folder (created)")
    ap.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run of every stage")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a size (betas=0.01,0.1)")
    args = ap.parse_args(argv)
    p = apply_sets(ap, dict(QUICK if args.quick else FULL), args.set, tuple_key="betas")
    out, seed, t0 = os.path.abspath(args.out), args.seed, time.time()
    os.makedirs(out, exist_ok=True)

    import world
    import ppo
    import plots

    records = {"sizes": {k: list(v) if isinstance(v, tuple) else v for k, v in p.items()}}
    records.update(build_models(out, p, seed))

    model, prompts = os.path.join(out, "sft_model"), os.path.join(out, "data", "prompts.jsonl")
    true_fn = os.path.join(HERE, "objective.py") + ":true_reward"
    runs = [(r, b) for r in p["rewards"].split(",") for b in p["betas"]]
    sampler = world.Sampler(model, prompts)
    evaluator = ppo.Evaluator(sampler, os.path.join(out, "rm", "model"), p["reps"])
    rows = []
    for reward, beta in runs:
        name = f"ppo_{reward}_beta{beta:g}"
        run_dir = os.path.join(out, name)

        def train_and_eval(run_dir=run_dir, reward=reward, beta=beta):
            t = time.time()
            if not os.path.exists(os.path.join(run_dir, "summary.json")):
                ppo.run_ppo(
                    run_dir,
                    model,
                    prompts,
                    beta=beta,
                    seeds=p["seeds"],
                    iterations=p["iterations"],
                    batch=p["batch"],
                    chunk=p["chunk"],
                    lr=p["lr"],
                    kl_estimator=p["kl_estimator"],
                    seed=seed,
                    reward_model=os.path.join(out, "rm", "model") if reward == "rm" else None,
                    reward=true_fn if reward == "true" else None,
                )
            train_s = time.time() - t
            return {"train_wall_s": round(train_s, 1), "rows": ppo.evaluate_run(run_dir, evaluator)}

        rec = stage(out, name, train_and_eval)
        rows += [{"reward": reward, "beta": beta, **r} for r in rec["rows"]]
        records[name] = {"train_wall_s": rec["train_wall_s"], "wall_s": rec["wall_s"]}

    fields = ["reward", "beta", "iteration", "seed", "true", "proxy", "kl", "corr", "eos_rate", "length", "example"]
    with open(os.path.join(out, "eval.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    training = []  # what PPO itself logged each iteration (on its training samples): the proxy or true score, KL
    for reward, beta in runs:
        with open(os.path.join(out, f"ppo_{reward}_beta{beta:g}", "metrics.csv")) as f:
            training += [{"reward": reward, "beta": beta, **r} for r in csv.DictReader(f)]
    with open(os.path.join(out, "training.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["reward", "beta", "update", "seed", *TRAINING], extrasaction="ignore")
        w.writeheader()
        w.writerows(training)
    records["table"] = plots.summary_table(rows)
    plots.plot_all(rows, out)
    records["wall_s"] = round(time.time() - t0, 1)  # this invocation (finished stages are not rerun)
    records["stages_wall_s"] = round(sum(r.get("wall_s", 0) for r in records.values() if isinstance(r, dict)), 1)
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(records, f, indent=1)
    log(f"done in {records['wall_s']:.0f}s: {out}/summary.json, eval.csv, *.png")
    print(plots.markdown_table(records["table"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
