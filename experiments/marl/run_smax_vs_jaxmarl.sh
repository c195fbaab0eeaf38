#!/bin/bash
# SMAX rows next to JaxMARL's own script (RESULTS.md, "SMAX next to JaxMARL's scripts"), under the shared CPU
# lock, one lock per side. JAXMARL_DIR: a JaxMARL checkout (git clone https://github.com/FLAIROx/JaxMARL;
# c793d09 measured). Arguments: the maps (default: 3m 2s3z). Both sides: 97 updates of 16 envs x 128 steps.
# timeout: a guard against the hang of benchmarks/NOTES.md (a run here takes under 5 minutes).
set -x
cd "$(dirname "$0")/../.."
export PYTHONPATH=$PWD
R=experiments/marl/results; mkdir -p $R
J=${JAXMARL_DIR:?set JAXMARL_DIR to a JaxMARL checkout}
declare -A AGENTS=([3m]=3 [2s3z]=5)
for MAP in ${@:-3m 2s3z}; do
  N=${AGENTS[$MAP]:?unknown map $MAP}
  flock /tmp/purejaxppo-cpu.lock timeout 900 python experiments/marl/jaxmarl_smax.py \
    --script $J/baselines/IPPO/ippo_rnn_smax.py --map $MAP --env-steps 200000 --num-envs 16 \
    --out $R/${MAP}_jaxmarl_ippo_rnn.json
  flock /tmp/purejaxppo-cpu.lock timeout 900 python experiments/marl/learning.py --env jaxmarl:$MAP \
    --steps $((N * 200000)) --out $R/${MAP}_ippo_gru_boot.json
done
