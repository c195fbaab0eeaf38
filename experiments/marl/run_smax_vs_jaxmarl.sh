#!/bin/bash
# SMAX rows next to JaxMARL's own script (RESULTS.md, "SMAX next to JaxMARL's scripts"), under the shared CPU
# lock. JAXMARL_DIR: a JaxMARL checkout (git clone https://github.com/FLAIROx/JaxMARL; c793d09 measured).
set -x
cd "$(dirname "$0")/../.."
export PYTHONPATH=$PWD
R=experiments/marl/results; mkdir -p $R
J=${JAXMARL_DIR:?set JAXMARL_DIR to a JaxMARL checkout}
flock /tmp/purejaxppo-cpu.lock bash -c "
python experiments/marl/jaxmarl_smax.py --script $J/baselines/IPPO/ippo_rnn_smax.py --map 3m --env-steps 200000 \
  --num-envs 16 --out $R/3m_jaxmarl_ippo_rnn.json
python experiments/marl/learning.py --env jaxmarl:3m --steps 600000 --out $R/3m_ippo_gru_boot.json
"
