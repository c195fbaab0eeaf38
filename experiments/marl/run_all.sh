#!/bin/bash
# The learning runs of RESULTS.md, one after another under the shared CPU lock.
set -x
cd "$(dirname "$0")/../.."
export PYTHONPATH=$PWD
R=experiments/marl/results; mkdir -p $R
L="flock /tmp/purejaxppo-cpu.lock python experiments/marl/learning.py"
MPE=jaxmarl:MPE_simple_spread_v3
$L --env $MPE --steps 1500000 --out $R/mpe_ippo_boot.json
$L --env $MPE --steps 1500000 --no-bootstrap --out $R/mpe_ippo_noboot.json
$L --env $MPE --steps 1500000 --critic centralised --out $R/mpe_mappo_boot.json
SM="--network mlp --num-envs 48 --set hidden_sizes=(128,128)"
$L --env jaxmarl:3m --steps 1500000 $SM --out $R/3m_ippo_boot.json
$L --env jaxmarl:3m --steps 1500000 $SM --no-bootstrap --out $R/3m_ippo_noboot.json
$L --env jaxmarl:3m --steps 1500000 $SM --critic centralised --out $R/3m_mappo_boot.json
