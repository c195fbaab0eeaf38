#!/usr/bin/env bash
# GPU figures for the README, in one prepared run (about 5 minutes on a recent NVIDIA GPU).
# Usage, on a machine with an NVIDIA GPU:  pip install -e ".[cuda,plot]" && bash benchmarks/gpu_figures.sh
# Writes benchmarks/results/gpu/*.json (+ scaling PNG); each JSON names the device (device_kind).
set -euo pipefail
cd "$(dirname "$0")/.."
out=benchmarks/results/gpu
mkdir -p "$out"
python -c "import jax; d = jax.devices()[0]; assert d.platform == 'gpu', f'no GPU visible to JAX: {d}'; print(d.device_kind)"
# 1 seed, then 1024 CartPole seeds x 5e5 steps vmapped on the one GPU
python benchmarks/throughput.py --env CartPole-v1 --json "$out/throughput_cartpole_1seed.json"
python benchmarks/throughput.py --env CartPole-v1 --seeds 1024 --json "$out/throughput_cartpole_1024seeds.json"
# scaling curves (envs 4..4096, seeds 1..1024), CartPole and Breakout-MinAtar
python benchmarks/scaling.py --envs 4,64,1024,4096,16384 --seeds 1,16,256,1024 --repeats 2 --out "$out/scaling"
# the GRU's sequence gradient three ways (flax cell in scan, fused, purejaxppo.agents.gru), 1 and 256 sequences
python benchmarks/gru_sequence.py --json "$out/gru_sequence_b1.json"
python benchmarks/gru_sequence.py --batch 256 --iters 50 --json "$out/gru_sequence_b256.json"
# side by side with PureJaxRL (a checkout you supply: PUREJAXRL_DIR=/path/to/purejaxrl), same process,
# interleaved rounds; each JSON names the device. Skipped (with a message) without a checkout.
if [ -n "${PUREJAXRL_DIR:-}" ]; then
  vs="python benchmarks/vs_purejaxrl.py --purejaxrl-dir $PUREJAXRL_DIR --devices 1 --rounds 2"
  $vs --rows cartpole_1seed --json "$out/vs_purejaxrl_cartpole_1seed.json"
  $vs --rows cartpole_16seeds --seeds 1024 --json "$out/vs_purejaxrl_cartpole_1024seeds.json"
  $vs --rows cartpole_1seed --num-envs 4096 --total-timesteps-scale 20 --json "$out/vs_purejaxrl_cartpole_4096envs.json"
  $vs --rows breakout_minatar_mlp --seeds 256 --json "$out/vs_purejaxrl_breakout_256seeds.json"
  $vs --rows gru_cartpole --json "$out/vs_purejaxrl_gru_cartpole.json"
else
  echo "PUREJAXRL_DIR not set: side-by-side rows skipped (git clone https://github.com/luchris429/purejaxrl)"
fi
