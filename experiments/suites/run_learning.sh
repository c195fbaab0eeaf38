#!/usr/bin/env bash
# Learning runs of the env suites (issue 12), 4 vmapped seeds each, CPU; the exact commands behind the
# "Learning runs" section of RESULTS.md. Run from the repo root with the suites venv
# (pip install -e ".[dev,suites]"). Outputs go to $OUT (default /tmp/suites_runs); plots to this folder.
# On the shared 2-core machine everything ran under `nice -n 19`, one process at a time.
set -u
PY=${PY:-python}
OUT=${OUT:-/tmp/suites_runs}
HERE=experiments/suites
mkdir -p "$OUT"
export PYTHONPATH=${PYTHONPATH:-$PWD}

# The timeout is uniform here; the actual runs used 540-900 s limits, and only pgx (660 s) and craftax
# (600 s) reached theirs.
train() {  # train NAME ENV FLAGS...
  local name=$1 env=$2; shift 2
  rm -rf "$OUT/$name"
  nice -n 19 timeout ${TIMEOUT:-660} $PY -m purejaxppo train --env "$env" --seeds 4 --run-dir "$OUT/$name" --quiet "$@" \
    > "$OUT/$name.log" 2>&1
  echo "$env rc=$?"; tail -3 "$OUT/$name.log"
}
bench() {  # bench NAME ENV NUM_ENVS NUM_STEPS: training steps/s and env-only / env+actor limits
  # `python -m purejaxppo bench --env ...` fails (argparse REMAINDER drops leading options), so the
  # module is run directly; it is the same code.
  nice -n 19 timeout 600 $PY -m purejaxppo.cli.bench --env "$2" --num-envs "$3" --num-steps "$4" \
    --total-timesteps 32768 --seeds 4 --repeats 1 --json "$OUT/bench-$1.json" 2>&1 | grep -E "steps_per_s|ratio|compile"
}
envonly() {  # envonly NAME ENV NUM_ENVS: env-only limit from a plain jitted scan (obs kept in the output)
  nice -n 19 timeout 600 $PY $HERE/env_only_sps.py --env "$2" --num-envs "$3" --seeds 4 --steps 256 \
    2>&1 | tail -1 | tee "$OUT/envonly-$1.txt"
}
plot() {  # plot NAME
  nice -n 19 $PY -m purejaxppo plot "$OUT/$1" -o "$HERE/learning-$1.png"
}

# 1. navix
train navix navix:Navix-Empty-5x5-v0 --total-timesteps 200000 --num-envs 16 --num-steps 128
bench navix navix:Navix-Empty-5x5-v0 16 128

# 2. xminigrid
train xminigrid xminigrid:MiniGrid-Empty-6x6 --total-timesteps 1000000 --num-envs 32 --num-steps 128
bench xminigrid xminigrid:MiniGrid-Empty-6x6 32 128

# 3. brax (config borrowed from the Brax notebook's inverted_pendulum entry: normalised obs, gamma 0.97, lr 3e-4)
train brax brax:inverted_pendulum --total-timesteps 400000 --num-envs 32 --num-steps 64 \
  --normalize-obs True --gamma 0.97 --lr 3e-4
bench brax brax:inverted_pendulum 32 64   # its env-only figure is optimised away (constant reward): use envonly
envonly brax brax:inverted_pendulum 32

# 4. playground. First try (no learning in 2e5 steps/seed), kept as playground-try1:
train playground-try1 playground:CartpoleBalance --total-timesteps 200000 --num-envs 32 --num-steps 64 --normalize-obs True
train playground playground:CartpoleBalance --total-timesteps 1000000 --num-envs 32 --num-steps 64 \
  --normalize-obs True --normalize-reward True --gamma 0.995 --lr 1e-3 --update-epochs 8 --num-minibatches 8
envonly playground playground:CartpoleBalance 32

# 5. pgx 2048 (masked actions). First try (flat), kept as pgx-try1:
train pgx-try1 pgx:2048 --total-timesteps 300000 --num-envs 32 --num-steps 64
# second try, bigger net and budget; stopped by the 660 s timeout at update 200 of 244 (819,200 steps/seed),
# so this run has no summary.json (RESULTS.md takes its final returns from metrics.csv)
train pgx pgx:2048 --total-timesteps 1000000 --num-envs 32 --num-steps 128 --hidden-sizes 256,256 --activation relu
envonly pgx pgx:2048 32
# third try (2026-11-30): normalised rewards learn; the control without the flag does not
TIMEOUT=900 train pgx-2048-normrew-2M pgx:2048 --total-timesteps 2000000 --num-envs 32 --num-steps 128 --normalize-reward true
TIMEOUT=900 train pgx-2048-plain-2M pgx:2048 --total-timesteps 2000000 --num-envs 32 --num-steps 128

# 6a. jumanji Snake (masked actions); 500-step episode cap so that episodes end at all
train jumanji jumanji:Snake-v1 --total-timesteps 200000 --num-envs 32 --num-steps 64 --max-episode-steps 500
train jumanji-long jumanji:Snake-v1 --total-timesteps 600000 --num-envs 32 --num-steps 64 --max-episode-steps 500 \
  --hidden-sizes 128,128
envonly jumanji jumanji:Snake-v1 32

# 6b. craftax: direction only. Compile took ~8 min here, so the 600 s timeout stopped it at update 24 of 48
# (49,152 steps/seed); a `--resume` (timeout 300 s) recompiled and was stopped too. 1000-step episode cap.
nice -n 19 timeout 600 $PY -m purejaxppo train --env craftax:Craftax-Classic-Symbolic-v1 --seeds 4 \
  --run-dir "$OUT/craftax" --quiet --total-timesteps 100000 --num-envs 32 --num-steps 64 --max-episode-steps 1000 \
  > "$OUT/craftax.log" 2>&1; echo "craftax rc=$?"
# then (recompiled, stopped again with nothing new):
#   nice -n 19 timeout 300 $PY -m purejaxppo train --resume "$OUT/craftax" --quiet
nice -n 19 timeout 200 $PY $HERE/env_only_sps.py --env craftax:Craftax-Classic-Symbolic-v1 --num-envs 32 --seeds 4 \
  --steps 64 2>&1 | tail -1 | tee "$OUT/envonly-craftax.txt"

# 6c. craftax again (2026-12-01), with optimistic resets (one fresh world per 32 envs per step) and the
# weak-type fix (reset and step give the same types, so nothing recompiles): 250k steps/seed in 5.4 min,
# then a 1M-steps/seed run with settings nearer Craftax's baselines (256x256, GAE lambda 0.8, lr 2e-4,
# 8 minibatches); the second shared the CPU with a full test run for its first third
TIMEOUT=3900 train craftax-r32-250k craftax:Craftax-Classic-Symbolic-v1 --total-timesteps 250000 --num-envs 32 \
  --num-steps 64 --max-episode-steps 1000 --reset-ratio 32
TIMEOUT=2400 train craftax-1m-baselinelike craftax:Craftax-Classic-Symbolic-v1 --total-timesteps 1000000 \
  --num-envs 32 --num-steps 64 --max-episode-steps 1000 --reset-ratio 32 --hidden-sizes 256,256 --gae-lambda 0.8 \
  --lr 2e-4 --num-minibatches 8
# 6d. Snake with observation normalisation (per leaf since 2026-12-01: the raw step counter got its own scale)
TIMEOUT=1500 train snake-normobs jumanji:Snake-v1 --total-timesteps 600000 --num-envs 32 --num-steps 64 \
  --max-episode-steps 500 --hidden-sizes 128,128 --normalize-obs true
TIMEOUT=1500 train snake-normobs-lr1e-3 jumanji:Snake-v1 --total-timesteps 600000 --num-envs 32 --num-steps 64 \
  --max-episode-steps 500 --hidden-sizes 128,128 --normalize-obs true --lr 1e-3

# curves (the committed PNGs were then shrunk to 2/3 size, 64-colour palette, with PIL)
plot navix; plot xminigrid; plot brax
nice -n 19 $PY -m purejaxppo plot "$OUT/craftax-1m-baselinelike" "$OUT/craftax-r32-250k" "$OUT/craftax" -o $HERE/learning-craftax.png
nice -n 19 $PY -m purejaxppo plot "$OUT/playground" "$OUT/playground-try1" -o $HERE/learning-playground.png
nice -n 19 $PY -m purejaxppo plot "$OUT/pgx-2048-normrew-2M" "$OUT/pgx-2048-plain-2M" "$OUT/pgx" -o $HERE/learning-pgx.png
nice -n 19 $PY -m purejaxppo plot "$OUT/snake-normobs" "$OUT/snake-normobs-lr1e-3" "$OUT/jumanji-long" "$OUT/jumanji" \
  -o $HERE/learning-jumanji.png
