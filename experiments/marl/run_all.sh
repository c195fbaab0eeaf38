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
# SMAX: experiments/marl/run_smax.sh
