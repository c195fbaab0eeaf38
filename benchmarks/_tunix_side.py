"""The tunix side of ``benchmarks/vs_tunix.py``: runs in the tunix virtual environment
(google-tunix 0.1.7 next to jax 0.10.2 / flax 0.12.8), never imports purejaxppo.

    /tmp/tunix-venv/bin/python benchmarks/_tunix_side.py SPEC.json OUT.json

tunix ships no GPT-2, so :class:`GPT2` here is GPT-2 (HF's architecture: learned positions,
pre-LayerNorm blocks, fused qkv with bias, tanh-GELU MLP, tied LM head) written as a flax ``nnx``
module with the calling convention tunix's sampler and learners use (``model(tokens, positions,
cache, attention_mask) -> (logits, cache)``, ``init_cache``, ``num_embed``), and it reads the same
HF safetensors file the other sides read. The critic is the same trunk with a zero-initialised
``score`` head (with a bias, like ours). The reward is a ``reward_fn`` over the decoded texts (the
reverse task's exact match, minus the missing-EOS penalty; tunix has no penalty of its own).
"""

from __future__ import annotations

import dataclasses
import json
import os
import resource
import sys
import time

import numpy as np

PAD, EOS, SEP = 0, 1, 2
NEVER = 10**6  # a stop id no model emits: EOS off, every response T tokens (an empty list means the tokenizer's EOS)


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def build(spec):
    import jax
    import jax.numpy as jnp
    from flax import nnx
    from safetensors.numpy import load_file

    with open(os.path.join(spec["model_dir"], "config.json")) as f:
        hf = json.load(f)
    w = {
        k.removeprefix("transformer."): v
        for k, v in load_file(os.path.join(spec["model_dir"], "model.safetensors")).items()
    }
    n_layer, n_head, d, eps = hf["n_layer"], hf["n_head"], hf["n_embd"], hf.get("layer_norm_epsilon", 1e-5)
    hd = d // n_head

    def p(name):
        return nnx.Param(jnp.asarray(w[name], jnp.float32))

    def ln(x, s, b):
        m = x.mean(-1, keepdims=True)
        v = ((x - m) ** 2).mean(-1, keepdims=True)
        return (x - m) * jax.lax.rsqrt(v + eps) * s + b

    class Block(nnx.Module):
        def __init__(self, i):
            pre = f"h.{i}."
            self.ln_1_w, self.ln_1_b = p(pre + "ln_1.weight"), p(pre + "ln_1.bias")
            self.ln_2_w, self.ln_2_b = p(pre + "ln_2.weight"), p(pre + "ln_2.bias")
            self.attn_w, self.attn_b = p(pre + "attn.c_attn.weight"), p(pre + "attn.c_attn.bias")
            self.proj_w, self.proj_b = p(pre + "attn.c_proj.weight"), p(pre + "attn.c_proj.bias")
            self.fc_w, self.fc_b = p(pre + "mlp.c_fc.weight"), p(pre + "mlp.c_fc.bias")
            self.out_w, self.out_b = p(pre + "mlp.c_proj.weight"), p(pre + "mlp.c_proj.bias")

        def __call__(self, x, mask, cache):
            b, l, _ = x.shape
            qkv = ln(x, self.ln_1_w[...], self.ln_1_b[...]) @ self.attn_w[...] + self.attn_b[...]
            q, k, v = (t.reshape(b, l, n_head, hd) for t in jnp.split(qkv, 3, axis=-1))
            if cache is not None:
                end = cache["end_index"][0]
                k = jax.lax.dynamic_update_slice(cache["k"], k, (0, end, 0, 0))
                v = jax.lax.dynamic_update_slice(cache["v"], v, (0, end, 0, 0))
                cache = {"k": k, "v": v, "end_index": cache["end_index"] + l}
            s = jnp.einsum("blhd,bshd->bhls", q, k) / np.sqrt(hd)
            s = jnp.where(mask[:, None, :, : s.shape[-1]], s, -1e30)
            a = jnp.einsum("bhls,bshd->blhd", jax.nn.softmax(s, axis=-1), v).reshape(b, l, d)
            x = x + a @ self.proj_w[...] + self.proj_b[...]
            h = ln(x, self.ln_2_w[...], self.ln_2_b[...]) @ self.fc_w[...] + self.fc_b[...]
            return x + jax.nn.gelu(h, approximate=True) @ self.out_w[...] + self.out_b[...], cache

    @dataclasses.dataclass(frozen=True)
    class Config:  # what tunix's vanilla rollout reads for its KV cache
        num_layers: int = n_layer
        num_kv_heads: int = n_head
        head_dim: int = hd
        dtype: object = jnp.float32

    class GPT2(nnx.Module):
        def __init__(self):
            self.config = Config()
            self.wte, self.wpe = p("wte.weight"), p("wpe.weight")
            self.blocks = nnx.List([Block(i) for i in range(n_layer)])
            self.ln_f_w, self.ln_f_b = p("ln_f.weight"), p("ln_f.bias")

        @property
        def num_embed(self):
            return self.wte.shape[0]

        def hidden(self, x, positions, cache=None, attention_mask=None):
            h = self.wte[...][x] + self.wpe[...][jnp.clip(positions, 0)]
            new = None if cache is None else {}
            for i, blk in enumerate(self.blocks):
                h, c = blk(h, attention_mask, None if cache is None else cache[f"layer_{i}"])
                if cache is not None:
                    new[f"layer_{i}"] = c
            return ln(h, self.ln_f_w[...], self.ln_f_b[...]), new

        def __call__(self, x, positions, cache=None, attention_mask=None, **_):
            h, cache = self.hidden(x, positions, cache, attention_mask)
            return h @ self.wte[...].T, cache

        def init_cache(self, batch, cache_size, dtype):
            shape = (batch, cache_size, n_head, hd)
            return {
                f"layer_{i}": {
                    "k": jnp.zeros(shape, dtype or jnp.float32),
                    "v": jnp.zeros(shape, dtype or jnp.float32),
                    "end_index": jnp.zeros((batch,), jnp.int32),
                }
                for i in range(n_layer)
            }

        def get_model_input(self):
            return {
                "x": jnp.ones((1, 1), jnp.int32),
                "positions": jnp.zeros((1, 1), jnp.int32),
                "cache": None,
                "attention_mask": jnp.ones((1, 1, 1), bool),
            }

    class Critic(nnx.Module):
        def __init__(self):
            self.trunk = GPT2()
            self.score_w = nnx.Param(jnp.zeros((d, 1)))
            self.score_b = nnx.Param(jnp.zeros((1,)))

        def __call__(self, x, positions, cache=None, attention_mask=None, **_):
            h, _ = self.trunk.hidden(x, positions, None, attention_mask)
            return h @ self.score_w[...] + self.score_b[...]

        def get_model_input(self):
            return self.trunk.get_model_input()

    return GPT2, Critic


class Tokenizer:
    """Token ids as text: ``"5 8 3 2"``."""

    def encode(self, text, **_):
        return [int(t) for t in text.split()]

    def decode(self, ids, **_):
        return " ".join(str(int(i)) for i in ids)

    def bos_id(self):
        return 0  # falsy: the sampler adds no BOS

    def eos_id(self):
        return EOS

    def pad_id(self):
        return PAD


def reverse_score(prompt_ids, response_ids):
    """The reverse task's exact match (purejaxppo.lm.tasks.builtin_tasks.ReverseTask.score) on token-id lists:
    the prompt's digits before SEP reversed, then EOS; the response up to its first EOS."""
    digits = [t for t in prompt_ids if t not in (PAD, SEP)]
    resp = list(response_ids)
    if EOS in resp:
        resp = resp[: resp.index(EOS) + 1]
    return float(resp == digits[::-1] + [EOS])


def main(spec_path, out_path):
    with open(spec_path) as f:
        spec = json.load(f)
    t0 = time.perf_counter()
    import jax
    import optax
    from tunix.rl import rl_cluster as rl_cluster_lib
    from tunix.rl.ppo import ppo_learner
    from tunix.rl.rollout import base_rollout

    GPT2, Critic = build(spec)
    actor, reference, critic = GPT2(), GPT2(), Critic()
    pool = np.load(spec["prompts"])
    b, t, iters = spec["batch_size"], spec["response_length"], spec["iterations"]
    tok = Tokenizer()
    stop = spec["stop"]
    cur: dict = {"raw": [], "eos": [], "gen": 0.0, "adv": 0.0, "kl": [], "len": []}  # this iteration's

    def reward_fn(prompts, completions, **_):
        # the completion text stops before the stop token: a response shorter than T ended with EOS
        out = []
        for p, c in zip(prompts, completions):
            ids = tok.encode(c)
            has = stop is not None and (EOS in ids or len(ids) < t)
            s = reverse_score(tok.encode(p), ids + ([EOS] if has and EOS not in ids else []))
            cur["raw"].append(s)
            cur["eos"].append(has)
            out.append(s - (0.0 if has else spec["missing_eos_penalty"]))
        if os.environ.get("TUNIX_SIDE_DEBUG"):
            print("DEBUG", len(prompts), list(zip(prompts, completions))[:3], out[:3], flush=True)
        return out

    def opt():
        return optax.chain(
            optax.clip_by_global_norm(spec["max_grad_norm"]), optax.adam(spec["lr"], eps=spec["adam_eps"])
        )

    mesh = jax.make_mesh(
        (1, 1), ("fsdp", "tp"), axis_types=(jax.sharding.AxisType.Auto,) * 2, devices=jax.devices()[:1]
    )
    roles = rl_cluster_lib.Role
    rollout = base_rollout.RolloutConfig(
        max_tokens_to_generate=t,
        max_prompt_length=pool.shape[1],
        kv_cache_size=pool.shape[1] + t + 8,
        temperature=spec["temperature"],
        top_p=1.0,
        top_k=None,
        eos_tokens=[NEVER] if stop is None else [stop],
    )
    cfg = rl_cluster_lib.ClusterConfig(
        role_to_mesh={r: mesh for r in (roles.ACTOR, roles.CRITIC, roles.REFERENCE, roles.REWARD, roles.ROLLOUT)},
        rollout_engine="vanilla",
        offload_to_cpu=False,
        training_config=rl_cluster_lib.RLTrainingConfig(
            actor_optimizer=opt(),
            critic_optimizer=opt(),
            eval_every_n_steps=10**9,
            max_steps=iters * spec['update_epochs'] * spec['num_minibatches'],
            mini_batch_size=b // spec["num_minibatches"],
            train_micro_batch_size=b // spec["num_minibatches"],
            rollout_micro_batch_size=b,
            compute_logps_micro_batch_size=b,
        ),
        rollout_config=rollout,
    )
    cluster = rl_cluster_lib.RLCluster(
        actor=actor, critic=critic, reference=reference, tokenizer=tok, cluster_config=cfg
    )
    algo = ppo_learner.PPOConfig(
        num_iterations=spec["update_epochs"],
        gamma=spec["gamma"],
        gae_lambda=spec["gae_lambda"],
        beta=spec["beta"],
        epsilon=spec["clip_eps"],
        clip_range_value=spec["vf_clip_eps"],
        kl_method="kl",
        entropy_coef=None,
    )
    learner = ppo_learner.PPOLearner(
        rl_cluster=cluster, ppo_config=algo, reward_fns=[reward_fn], data_shuffle_seed=spec["seed"]
    )
    rows: list = []
    orig_gen, orig_adv, orig_step = cluster.generate, learner._generate_and_compute_advantage, learner._run_global_step

    def timed_gen(*a, **k):  # tunix generates per micro-batch (train_micro_batch_size rows)
        s = time.perf_counter()
        out = orig_gen(*a, **k)
        cur["gen"] += time.perf_counter() - s
        return out

    def timed_adv(*a, **k):  # generation + reference/old/value passes + reward + GAE
        s = time.perf_counter()
        ex = orig_adv(*a, **k)
        jax.block_until_ready(ex.advantages)
        cur["adv"] += time.perf_counter() - s
        mask = np.asarray(ex.completion_mask)
        kl = (np.asarray(ex.old_per_token_logps) - np.asarray(ex.ref_per_token_logps)) * mask
        cur["kl"].extend(kl.sum(1).tolist())
        cur["len"].extend(mask.sum(1).tolist())
        return ex

    def timed_step(*a, **k):
        for key in cur:
            cur[key] = 0.0 if key in ("gen", "adv") else []
        s = time.perf_counter()
        out = orig_step(*a, **k)
        jax.effects_barrier()
        e = time.perf_counter() - s
        if cur["raw"]:
            rows.append(
                {
                    "iteration_s": e,
                    "generation_s": cur["gen"],
                    "scoring_s": cur["adv"] - cur["gen"],
                    "update_s": e - cur["adv"],
                    "score": float(np.mean(cur["raw"])),
                    "kl": float(np.mean(cur["kl"])),
                    "response_length": float(np.mean(cur["len"])),
                    "eos_rate": float(np.mean(cur["eos"])),
                    "rows_scored": len(cur["raw"]),
                }
            )
        return out

    cluster.generate, learner._generate_and_compute_advantage = timed_gen, timed_adv
    learner._run_global_step = timed_step
    rng = np.random.default_rng(spec["seed"])

    def batches():
        while True:
            idx = rng.choice(pool.shape[0], b, replace=False)
            yield {"prompts": [tok.decode([x for x in row if x != PAD]) for row in pool[idx]]}

    setup_s = time.perf_counter() - t0
    rss_before = rss_mb()
    learner.train(batches())
    import tunix  # noqa: F401
    from importlib.metadata import version

    out = {
        "side": "tunix",
        "tunix": version("google-tunix"),
        "jax": jax.__version__,
        "setup_s": setup_s,
        "rss_before_mb": rss_before,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "rows": rows,
        "spec": spec,
    }
    with open(out_path, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
