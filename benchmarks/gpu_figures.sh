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
# token-level PPO, our side of benchmarks/vs_trl.py alone: GPT-2 small (124M, random init), random 32-token
# prompts, 256-token responses (EOS off), batch 64; one device, data-parallel and FSDP over every visible GPU
# (float32, then bfloat16 compute); each JSON names the device (device_kind) and its peak memory
python benchmarks/vs_trl.py --ours-only small --lengths 256 --batch 64 --iterations 4 --json "$out/token_ppo_gpt2small_T256.json"
python benchmarks/vs_trl.py --ours-only small --lengths 256 --batch 64 --iterations 4 --bf16 --json "$out/token_ppo_gpt2small_T256_bf16.json"
# token-level PPO at real models' shapes (benchmarks/lm_135m.py; random weights in HF layout, written locally):
# SmolLM2-135M and Qwen2.5-0.5B, batch 64, 64-token prompts, 256-token responses (EOS off); full fine-tune and
# LoRA, float32 and bfloat16 parameters, one process per mode; ours alone (TRL's side is a CPU run)
python benchmarks/lm_135m.py --shape smollm2-135m --skip-trl --batch 64 --response 256 --epochs 4 --minibatches 4 --iterations 4 --json "$out/lm_smollm2_135m_T256.json"
python benchmarks/lm_135m.py --shape qwen2.5-0.5b --skip-trl --batch 64 --response 256 --epochs 4 --minibatches 4 --iterations 4 --json "$out/lm_qwen25_05b_T256.json"
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
# side by side with Brax's own PPO (benchmarks/vs_brax.py) at Brax's/Playground's published GPU configs
# (2048 envs, their batch, unroll, epochs and learning rates); --updates caps the two long runs
# (Playground's CartpoleBalance: 61 updates of 983k steps; Brax's halfcheetah: 153 of 328k)
vb="python benchmarks/vs_brax.py --size published --rounds 2"
$vb --rows inverted_pendulum --json "$out/vs_brax_inverted_pendulum.json"
$vb --rows cartpole_balance --updates 10 --json "$out/vs_brax_cartpole_balance_10updates.json"
$vb --rows halfcheetah --updates 20 --json "$out/vs_brax_halfcheetah_20updates.json"
# side by side with rejax's PPO (benchmarks/vs_rejax.py; rejax is not a dependency: pip install --no-deps rejax==0.1.3)
if python -c "import rejax" 2>/dev/null; then
  python benchmarks/vs_rejax.py --rounds 2 --json "$out/vs_rejax.json"
else
  echo "rejax not installed: vs_rejax rows skipped (pip install --no-deps rejax==0.1.3)"
fi
# multi-agent: IPPO on MPE simple_spread next to JaxMARL's own baselines/IPPO/ippo_ff_mpe.py (a checkout you
# supply: JAXMARL_DIR=/path/to/JaxMARL; needs purejaxppo[marl] and distrax), same process, same config
if [ -n "${JAXMARL_DIR:-}" ] && python -c "import jaxmarl, distrax" 2>/dev/null; then
  python benchmarks/vs_jaxmarl.py --script "$JAXMARL_DIR/baselines/IPPO/ippo_ff_mpe.py" --env-steps 10000000 \
    --seeds 10 --rounds 2 --json "$out/vs_jaxmarl_mpe.json"
else
  echo "JAXMARL_DIR not set or jaxmarl/distrax missing: vs_jaxmarl row skipped (git clone https://github.com/FLAIROx/JaxMARL)"
fi
