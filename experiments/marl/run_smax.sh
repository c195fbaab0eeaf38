#!/bin/bash
# SMAX rows of RESULTS.md (after run_all.sh's MPE rows), under the shared CPU lock.
set -x
cd "$(dirname "$0")/../.."
export PYTHONPATH=$PWD
R=experiments/marl/results; mkdir -p $R
L="flock /tmp/purejaxppo-cpu.lock python experiments/marl/learning.py"
SM="--network mlp --num-envs 48 --set hidden_sizes=(128,128) num_steps=64"
$L --env jaxmarl:3m --steps 600000 $SM --out $R/3m_ippo_boot.json
$L --env jaxmarl:3m --steps 600000 $SM --no-bootstrap --out $R/3m_ippo_noboot.json
$L --env jaxmarl:3m --steps 600000 $SM --critic centralised --out $R/3m_mappo_boot.json
