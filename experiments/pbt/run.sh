#!/bin/bash
# PBT vs the same population without exploitation (--pbt-interval 0) vs the preset (4 seeds), at
# equal env steps per member. One env per call, repetitions = PBT seeds (each draws its own population).
# Usage: OUT=/tmp/pbt_runs [DEVICES=2] bash experiments/pbt/run.sh ENV "0 1 2 3"
#   (DEVICES: members sharded over that many devices; the numbers equal --devices 1, tests/test_parallel.py)
#   ENV: CartPole-v1 | Pendulum-v1 | Breakout-MinAtar     then: python experiments/pbt/summarize.py OUT
set -e
OUT=${OUT:-/tmp/pbt_runs}
PY=${PY:-python}
ENV=${1:?env}
case $ENV in
  # the defaults (4 envs x 128 steps), 2e5 steps per member, lr over three decades
  CartPole-v1) TAG=cartpole; MEMBERS=16; INTERVAL=20
    ARGS="--total-timesteps 200000"; SEARCH="--search lr=loguniform:1e-5:1e-2";;
  # the preset (8 envs x 256, 10 epochs, 32 minibatches, obs+reward normalisation), 5e5 steps per member
  Pendulum-v1) TAG=pendulum; MEMBERS=16; INTERVAL=20
    ARGS="--preset"; SEARCH="--search lr=loguniform:1e-5:1e-2";;
  # the preset (64 envs x 128, 64x64 MLP) at 1e6 of its 1e7 steps per member: 8 members fit this CPU
  Breakout-MinAtar) TAG=breakout; MEMBERS=8; INTERVAL=10
    ARGS="--preset --total-timesteps 1000000"; SEARCH="--search lr=loguniform:1e-5:1e-2";;
  *) echo "unknown env $ENV"; exit 2;;
esac
COMMON="--env $ENV $ARGS --devices ${DEVICES:-1} --quiet"
for seed in ${2:-0 1 2 3}; do
  for interval in $INTERVAL 0; do
    dir=$OUT/$TAG-pbt$MEMBERS-i$interval-s$seed
    [ -f $dir/summary.json ] || { rm -rf $dir; $PY -m purejaxppo train $COMMON --pbt $MEMBERS $SEARCH \
        --pbt-interval $interval --seed $seed --run-dir $dir; }
  done
done
dir=$OUT/$TAG-preset-4seeds
[ -f $dir/summary.json ] || { rm -rf $dir; $PY -m purejaxppo train $COMMON --seeds 4 --run-dir $dir; }
