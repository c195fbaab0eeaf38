"""Token-level PPO (purejaxppo/lm/token_ppo.py) with a tiny Llama-family model as policy,
reference and critic: one iteration runs, the reference stays bit-for-bit frozen while the
policy and critic move, and every metric is finite."""

import jax
import jax.numpy as jnp
import numpy as np

from _llama_reference import CONFIGS
from purejaxppo.lm.config import TokenPPOConfig
from purejaxppo.lm.llama import Llama
from purejaxppo.lm.llama_config import llama_config_from_hf
from purejaxppo.lm.model import FlaxLM
from purejaxppo.lm.token_ppo import make_token_ppo

P, T, B = 4, 5, 8


def prompts(key, b):
    lens = jax.random.randint(key, (b,), 1, P + 1)
    valid = jnp.arange(P)[None] >= (P - lens)[:, None]
    toks = jax.random.randint(jax.random.fold_in(key, 1), (b, P), 3, 61)
    return jnp.where(valid, toks, 0).astype(jnp.int32), valid


def count_sevens(_, prompt, prompt_valid, response, mask):
    return jnp.sum((response == 7) & mask, axis=1).astype(jnp.float32)


def test_one_token_ppo_iteration_with_a_llama_policy_reference_and_critic():
    module = Llama(llama_config_from_hf(CONFIGS["qwen3"]))  # GQA, q/k norms, a tied head
    params = module.init(jax.random.PRNGKey(0), jnp.zeros((1, P + T), jnp.int32), jnp.ones((1, P + T), bool))
    critic = jax.tree_util.tree_map_with_path(  # a value head that is not zero, so the critic's values matter
        lambda path, x: x + 0.1 if "value_head" in str(path) else x, params)
    cfg = TokenPPOConfig(batch_size=B, num_iterations=1, update_epochs=1, num_minibatches=2, max_new_tokens=T,
                         stop_ids=(2,), actor_lr=1e-3, critic_lr=1e-3, beta=0.1)
    lm = FlaxLM(module)
    tp = make_token_ppo(cfg, lm, count_sevens, prompts=prompts)
    state = jax.jit(tp.init)(jax.random.PRNGKey(1), params, params, critic)
    new, metrics = jax.jit(tp.iteration)(state)
    for k, v in metrics.items():
        assert np.all(np.isfinite(np.asarray(v))), k
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(new.reference)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    for net, before in (("policy", params), ("critic", critic)):
        moved = max(float(jnp.max(jnp.abs(a - b))) for a, b in
                    zip(jax.tree.leaves(new.train.params[net]), jax.tree.leaves(before)))
        assert moved > 0, net
