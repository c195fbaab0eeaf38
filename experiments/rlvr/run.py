"""Reinforcement learning from verifiable rewards on a CPU, end to end, in one command:

1. reasoning-gym rows (``chain_sum``: sums and differences of 2-4 one-digit numbers) written as
   ``data/train.jsonl`` and ``data/heldout.jsonl`` (prompt, answer, question, metadata; no
   held-out expression in the training rows), worked solutions written from each row's metadata
   (``data/sft.jsonl``), a byte-level BPE tokenizer trained on them with ``tokenizers`` and a
   random Llama (GQA) in a Hugging Face folder (``init_model/``);
2. SFT from scratch on the worked solutions, just enough to score a little (``sft_model/``);
3. RL from the SFT model with the verifier as the reward (``python -m purejaxppo rlhf --recipe
   R --reward math``: the completion's final answer against the row's ``answer`` column), one
   program per recipe training ``seeds`` seeds at once, every recipe drawing the same responses
   per iteration (DAPO's dynamic sampling draws more: counted, and the recipes compared at the
   common sample budget); held-out pass@1 and pass@8 every ``eval_every`` iterations
   (``--pass-samples 8 --pass-k 1,8``);
4. the tables and figures: pass@1 / pass@8 against samples and against wall time, means and
   95% intervals over seeds (``summary.json``, ``eval.csv``, ``training.csv``, ``*.png``).

Usage::

    python experiments/rlvr/run.py           # the full experiment (~19 min on 2 cores), into runs/rlvr
    python experiments/rlvr/run.py --quick   # every stage, tiny, ppo and grpo only (~2 min), into runs/rlvr-quick

The sizes are :data:`FULL` (or :data:`QUICK`); ``--set KEY=VALUE`` changes one (``--set
recipes=grpo,dapo --set seeds=2 --set reward=reasoning-gym``). A stage whose record is in
``--out/stages/`` is not run again (delete it to redo the stage); the tables and figures are
rebuilt every time. The results and their reading: RESULTS.md.
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

import rlvr_plots as plots  # noqa: E402  (this folder's modules, found through the path just set)
from rlvr_world import MAX_NEW  # noqa: E402

FULL = dict(
    train=3000,
    held_out=128,
    sft_pairs=3000,
    vocab=512,
    width=64,
    layers=2,
    sft_steps=600,
    recipes="ppo,grpo,dapo,dr-grpo,reinforce++",
    reward="math",
    seeds=4,
    iterations=30,
    batch=128,
    group=8,
    lr=1e-4,
    epochs=2,
    minibatches=2,
    eval_every=6,
    pass_samples=8,
    length_buckets=16,  # the rlhf default: the passes run at the narrowest of 16, 32, 40 tokens that fits
)
QUICK = dict(
    train=1000,
    held_out=16,
    sft_pairs=1000,
    vocab=512,
    width=32,
    layers=1,
    sft_steps=150,
    recipes="ppo,grpo",  # two programs to compile (every recipe: --set recipes=ppo,grpo,dapo,dr-grpo,reinforce++)
    reward="math",
    seeds=2,
    iterations=2,
    batch=32,
    group=4,
    lr=1e-4,
    epochs=2,
    minibatches=2,
    eval_every=1,
    pass_samples=8,
    length_buckets=0,  # one response width: half the compile, which is most of a quick run
)
#: recipes that sample a group of responses per prompt (the others: one response per prompt)
GROUPED = {"grpo", "dapo", "dr-grpo", "gspo", "rloo"}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


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


def rl_command(out: str, recipe: str, p: dict, seed: int, run_dir: str) -> list:
    """The ``rlhf`` command of one recipe: its seeds at once, the built-in verifier as the
    reward, the held-out pass@k (every held-out prompt) every ``eval_every`` iterations."""
    data = os.path.join(out, "data")
    group = p["group"] if recipe in GROUPED else 1
    return [
        sys.executable,
        "-m",
        "purejaxppo",
        "rlhf",
        "--model",
        os.path.join(out, "sft_model"),
        "--prompts",
        os.path.join(data, "train.jsonl"),
        "--eval-prompts",
        os.path.join(data, "heldout.jsonl"),
        "--reward",
        p["reward"],
        "--recipe",
        recipe,
        "--group-size",
        str(group),
        "--batch",
        str(p["batch"]),
        "--iterations",
        str(p["iterations"]),
        "--epochs",
        str(p["epochs"]),
        "--minibatches",
        str(p["minibatches"]),
        "--seeds",
        str(p["seeds"]),
        "--seed",
        str(seed),
        "--actor-lr",
        str(p["lr"]),
        "--critic-lr",
        str(p["lr"]),
        "--max-new-tokens",
        str(MAX_NEW),
        "--sft-steps",
        "0",
        "--eval-every",
        str(p["eval_every"]),
        "--chunk",
        str(p["eval_every"]),
        "--pass-samples",
        str(p["pass_samples"]),
        "--pass-k",
        f"1,{p['pass_samples']}",
        "--length-buckets",
        str(p["length_buckets"]),
        "--run-dir",
        run_dir,
    ]


def run_logged(cmd: list, log_path: str) -> None:
    """Run ``cmd`` (this checkout's ``purejaxppo`` first on the path), its output into ``log_path``."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
    with open(log_path, "wb") as logf:  # run from ROOT: python -m finds this checkout's package first
        code = subprocess.run(cmd, stdout=logf, stderr=subprocess.STDOUT, env=env, cwd=ROOT).returncode
    if code != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({code}); see {log_path}")


def rl_stage(out: str, recipe: str, p: dict, seed: int) -> dict:
    run_dir = os.path.join(out, f"rl_{recipe}")
    cmd = rl_command(out, recipe, p, seed, run_dir)
    log(" ".join(["python", *cmd[1:]]).replace(out + "/", ""))
    t = time.time()
    run_logged(cmd, os.path.join(out, f"rl_{recipe}.log"))
    with open(os.path.join(run_dir, "summary.json")) as f:
        summary = json.load(f)
    return {
        "command": " ".join(["python", *cmd[1:]]),
        "total_s": round(time.time() - t, 1),
        "compile_s": round(summary.get("compile_s", 0.0), 1),
        "run_s": round(summary.get("run_s", 0.0), 1),
    }


def read_metrics(out: str, recipe: str, record: dict, p: dict, start: dict) -> tuple:
    """``(eval rows, training rows)`` of a recipe's run.

    Each evaluated update and seed gets the responses that seed has sampled so far
    (``samples``: ``batch`` per iteration, and ``batch`` more for each of dynamic sampling's
    extra draws, its ``extra_draws`` column, where the recipe draws them) and the wall time to
    it (``wall_s``: the run's own seconds after its compile, ``run_s``, training and
    evaluations of every seed at once, spread evenly over its iterations: an iteration's cost is
    about constant through a run). The SFT model's evaluation ``start`` (``{"eval_pass@1":
    ...}``) comes first, at 0 samples, for each seed."""
    per_iteration, batch = record["run_s"] / p["iterations"], p["batch"]
    evals, training, drawn = [], [], {}
    with open(os.path.join(out, f"rl_{recipe}", "metrics.csv")) as f:
        rows = sorted(csv.DictReader(f), key=lambda r: (int(r["seed"]), int(r["update"])))
    for s in sorted({int(r["seed"]) for r in rows}):
        evals.append({"recipe": recipe, "seed": s, "update": -1, "samples": 0, "wall_s": 0.0, **start})
    for r in rows:
        base = {"recipe": recipe, "seed": int(r["seed"]), "update": int(r["update"])}
        extra = float(r.get("extra_draws") or 0.0)
        drawn[base["seed"]] = drawn.get(base["seed"], 0) + round(batch * (1 + extra))
        training.append({**base, "samples": drawn[base["seed"]], **{k: r.get(k, "") for k in plots.TRAINING}})
        if r.get("eval_pass@1", "") not in ("", "nan"):
            done = base["update"] + 1  # the metrics row of update u is logged after its iteration
            evals.append(
                {
                    **base,
                    "samples": drawn[base["seed"]],
                    "wall_s": round(done * per_iteration, 2),
                    **{k: float(r[k]) for k in r if k.startswith("eval_")},
                }
            )
    return evals, training


def apply_sets(ap, sizes: dict, items) -> dict:
    """``sizes`` with each ``--set KEY=VALUE`` applied (the type of its default); an unknown key
    is a usage error naming the sizes."""
    for item in items:
        k, _, v = item.partition("=")
        if k not in sizes:
            ap.error(f"--set {item}: no size {k!r}; one of {', '.join(sizes)}")
        sizes[k] = type(sizes[k])(v)
    return sizes


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="output folder (created; default runs/rlvr, runs/rlvr-quick with --quick)")
    ap.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run of every stage")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a size (seeds=2)")
    args = ap.parse_args(argv)
    p = apply_sets(ap, dict(QUICK if args.quick else FULL), args.set)
    out = os.path.abspath(args.out or os.path.join("runs", "rlvr-quick" if args.quick else "rlvr"))
    seed, t0 = args.seed, time.time()
    os.makedirs(out, exist_ok=True)

    import rlvr_world as world

    records = {"sizes": p}
    records["world"] = stage(
        out,
        "world",
        world.build_world,
        out,
        train=p["train"],
        held_out=p["held_out"],
        sft_pairs=p["sft_pairs"],
        vocab=p["vocab"],
        width=p["width"],
        layers=p["layers"],
        seed=seed,
    )
    records["sft"] = stage(
        out,
        "sft",
        world.run_sft,
        out,
        steps=p["sft_steps"],
        batch=64,
        lr=3e-3,
        seed=seed,
        eval_prompts=p["held_out"],
        eval_n=p["pass_samples"],
    )
    evals, training = [], []
    recipes = p["recipes"].split(",")
    for recipe in recipes:
        rec = stage(out, f"rl_{recipe}", rl_stage, out, recipe, p, seed)
        records[f"rl_{recipe}"] = rec
        start = {f"eval_{k}": v for k, v in records["sft"]["held_out"].items() if k != "examples"}
        e, t = read_metrics(out, recipe, rec, p, start)
        evals += e
        training += t

    plots.write_csv(os.path.join(out, "eval.csv"), evals)
    plots.write_csv(os.path.join(out, "training.csv"), training)
    records["table"] = plots.summary_table(evals, recipes)
    for row in records["table"]:
        row["compile_s"] = records[f"rl_{row['recipe']}"]["compile_s"]
    records["comparison"] = plots.comparison(evals, recipes)
    plots.plot_all(evals, training, recipes, out)
    records["wall_s"] = round(time.time() - t0, 1)  # this invocation (finished stages are not rerun)
    records["stages_wall_s"] = round(sum(r.get("wall_s", 0) for r in records.values() if isinstance(r, dict)), 1)
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(records, f, indent=1)
    log(f"done in {records['wall_s']:.0f}s: {out}/summary.json, eval.csv, *.png")
    print(plots.markdown_table(records["table"], records["comparison"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
