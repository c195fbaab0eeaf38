#!/bin/bash
# PBT vs the same population without exploitation vs the preset on CartPole-v1, 2e5 env steps per member.
# Usage: OUT=/tmp/pbt_runs bash experiments/pbt/run_cartpole.sh "0 1 2 3"
set -e
OUT=${OUT:-/tmp/pbt_runs}
PY=${PY:-python}
COMMON="--env CartPole-v1 --total-timesteps 200000 --devices 1 --quiet"
for seed in ${1:-0 1 2 3}; do
  for interval in 20 0; do
    dir=$OUT/cartpole-pbt16-i$interval-s$seed
    [ -f $dir/summary.json ] || $PY -m purejaxppo train $COMMON --pbt 16 --search lr=loguniform:1e-5:1e-2 \
        --pbt-interval $interval --seed $seed --run-dir $dir
  done
done
dir=$OUT/cartpole-preset-4seeds
[ -f $dir/summary.json ] || $PY -m purejaxppo train $COMMON --preset --seeds 4 --run-dir $dir
