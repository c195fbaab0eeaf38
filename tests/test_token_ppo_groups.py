"""Group advantages wired into token-level PPO (``group_size``, ``advantage``, ``kl_in``).

Independent references: the GRPO / RLOO advantages of a batch written out by hand; the
prompts a group must hold, in order; a NumPy k3 estimator on given log-probs; models whose
critic passes raise when called (no critic may run without GAE).
"""

import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_token_ppo import P, T, V, config, count_threes, prompts, tiny_model  # noqa: E402

from purejaxppo.config import ConfigError  # noqa: E402
from purejaxppo.lm.ppo import experience  # noqa: E402
from purejaxppo.lm.ppo.token_ppo import make_token_ppo  # noqa: E402
from purejaxppo.lm.ppo.token_records import TokenBatch  # noqa: E402
from purejaxppo.lm.ppo.token_update import kl_loss  # noqa: E402

# two groups of 4: [1, 0, 0, 1] (ties) and [2, 2, 2, 2] (no signal)
REWARDS = np.array([1, 0, 0, 1, 2, 2, 2, 2], np.float32)
S1 = np.sqrt(1 / 3)  # the first group's unbiased std: sqrt(4 * 0.25 / 3)
GRPO = np.array([0.5, -0.5, -0.5, 0.5, 0, 0, 0, 0]) / (S1 + 1e-4) * np.array([1, 1, 1, 1, 0, 0, 0, 0])
RLOO = np.array([1 - 1 / 3, 0 - 2 / 3, 0 - 2 / 3, 1 - 1 / 3, 0, 0, 0, 0])


@pytest.fixture(scope="module")
def tiny():
    return tiny_model()


def fixed_reward(_, prompt, prompt_valid, response, mask):
    return jnp.asarray(REWARDS)


def lengths(prompt, prompt_valid, response, mask):  # each row's response length, as metrics
    return {f"len{i}": jnp.sum(mask[i]) for i in range(mask.shape[0])}


@pytest.mark.parametrize("advantage,want", [("grpo", GRPO), ("rloo", RLOO)])
def test_the_advantages_reaching_the_loss_are_the_hand_computed_ones(tiny, advantage, want):
    """One minibatch, one epoch: the actor loss reported is the one before the step, where the
    ratio is 1 and nothing clips, so it is ``-sum_b A_b n_b / sum_b n_b`` (token-mean)."""
    lm, params = tiny
    cfg = config(
        advantage=advantage,
        group_size=4,
        num_iterations=1,
        update_epochs=1,
        num_minibatches=1,
        beta=0.0,
        missing_eos_penalty=0.0,
    )
    tp = make_token_ppo(cfg, lm, fixed_reward, prompts=prompts, diagnostics=lengths)
    _, m = jax.jit(tp.train)(jax.random.PRNGKey(4), params, params)
    n = np.array([float(m[f"task_len{i}"][0]) for i in range(8)])
    assert np.all(np.isfinite([float(v[0]) for v in m.values()])), m
    np.testing.assert_allclose(float(m["actor_loss"][0]), -np.sum(want * n) / np.sum(n), rtol=1e-5, atol=1e-6)
    assert "critic_loss" not in m  # no critic, no value loss


def test_advantages_with_the_kl_in_the_reward_and_a_flat_group():
    """The sequence reward is the score minus the EOS penalty minus beta x the sequence's KL;
    a group equal after all that gets exactly 0 (no NaN); the advantage covers the valid tokens."""
    mask = np.zeros((8, 6), bool)
    for i, n in enumerate([1, 2, 3, 4, 2, 2, 2, 2]):
        mask[i, 6 - 4 : 6 - 4 + n] = True
    kl = np.where(mask, 0.25, 0.0).astype(np.float32)  # per token
    score = np.array([2.0, 1.5, 1.0, 0.0, 3, 3, 3, 3], np.float32)
    beta = 0.5
    seq = score - beta * 0.25 * mask.sum(1)  # [1.875, 1.25, 0.625, -0.5, 2.75 x 4]
    g = seq[:4]
    want = np.concatenate([(g - g.mean()) / (g.std(ddof=1) + 1e-4), np.zeros(4)])
    cfg = config(advantage="grpo", group_size=4)
    adv, ret = experience.advantages(
        jnp.asarray(score), jnp.asarray(kl), jnp.zeros((8, 6)), jnp.asarray(mask), beta, cfg
    )
    np.testing.assert_allclose(np.asarray(adv), np.where(mask, want[:, None], 0.0), rtol=1e-5, atol=1e-6)
    assert np.all(np.asarray(adv)[4:] == 0.0) and np.all(np.asarray(ret) == 0.0)
    # kl_in="loss": the KL stays out of the rewards
    adv, _ = experience.advantages(
        jnp.asarray(score),
        jnp.asarray(kl),
        jnp.zeros((8, 6)),
        jnp.asarray(mask),
        beta,
        config(advantage="rloo", group_size=4, kl_in="loss"),
    )
    r = score[:4]
    loo = r - (r.sum() - r) / 3
    np.testing.assert_allclose(np.asarray(adv)[:4], np.where(mask[:4], loo[:, None], 0.0), rtol=1e-5, atol=1e-6)


def test_a_group_is_one_prompt_repeated_in_order_with_different_responses(tiny):
    lm, params = tiny
    cfg = config(advantage="rloo", group_size=4, num_iterations=1, batch_size=12, num_minibatches=3, temperature=1.5)
    seen = {}

    def record(prompt, prompt_valid, response, mask):
        return {"prompt": prompt, "response": jnp.where(mask, response, -1)}

    def three_prompts(key, n):
        seen["n"] = n
        return prompts(key, n)

    tp = make_token_ppo(cfg, lm, count_threes, prompts=three_prompts, diagnostics=record)
    state = jax.jit(tp.init)(jax.random.PRNGKey(5), params, params)
    _, m = jax.jit(tp.iteration)(state)
    assert seen["n"] == 3  # batch_size / group_size prompts drawn
    k_prompt = jax.random.split(state.key, 5)[1]
    want = np.repeat(np.asarray(prompts(k_prompt, 3)[0]), 4, axis=0)  # [p0 p0 p0 p0 p1 ...]
    np.testing.assert_array_equal(np.asarray(m["task_prompt"]), want)
    response = np.asarray(m["task_response"])
    for g in range(3):
        assert len({tuple(r) for r in response[4 * g : 4 * g + 4]}) > 1, response[4 * g : 4 * g + 4]


class NoCritic:
    """The policy's model, but any pass that would compute values raises."""

    def __init__(self, lm):
        self.lm = lm

    def logits(self, params, tokens, valid):
        return self.lm.logits(params, tokens, valid)

    def __getattr__(self, name):
        if name in ("forward", "values"):
            raise AssertionError(f"a critic pass ({name}) ran without a critic")
        return getattr(self.lm, name)


@pytest.mark.parametrize("lora", [0, 2])
def test_grpo_stores_no_critic_runs_none_and_iterates(tiny, lora):
    lm, params = tiny
    kw = dict(lora_rank=lora, lora_alpha=4.0, lora_targets=("Dense_0", "Dense_2")) if lora else {}
    cfg = config(advantage="grpo", group_size=2, kl_in="loss", kl_estimator="k3", **kw)
    model = NoCritic(lm)
    tp = make_token_ppo(cfg, model, count_threes, prompts=prompts, critic=model)
    state, m = jax.jit(tp.train)(jax.random.PRNGKey(6), params, None if lora else params)
    assert state.train.params["critic"] is None
    size = lambda tree: sum(np.size(x) for x in jax.tree.leaves(tree))  # noqa: E731
    # Adam's two moments of the policy's trained leaves and a few counters: no critic's moments
    assert size(state.train.opt_state) <= 2 * size(state.train.params) + 16
    assert all(np.all(np.isfinite(np.asarray(v))) for v in m.values()), m
    assert float(jnp.max(jnp.abs(m["kl_loss"]))) >= 0.0 and "critic_loss" not in m


def test_run_in_two_halves_equals_one_run(tiny):
    """What resume relies on: the state is all there is (same program, bit-exact)."""
    lm, params = tiny
    cfg = config(advantage="rloo", group_size=4, num_iterations=2)
    tp = make_token_ppo(cfg, lm, count_threes, prompts=prompts)
    state = tp.init(jax.random.PRNGKey(8), params, params)
    run = jax.jit(tp.run, static_argnums=1)
    whole, m = run(state, 2)
    half, m1 = run(state, 1)
    half, m2 = run(half, 1)
    for a, b in zip(jax.tree.leaves(whole), jax.tree.leaves(half)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    np.testing.assert_array_equal(np.asarray(m["score"]), np.concatenate([m1["score"], m2["score"]]))


def test_kl_in_loss_adds_beta_times_the_named_estimator(tiny):
    lm, params = tiny
    rng = np.random.default_rng(0)
    logp = np.log(rng.uniform(0.05, 1.0, (4, 6))).astype(np.float32)
    logp_ref = np.log(rng.uniform(0.05, 1.0, (4, 6))).astype(np.float32)
    mask = np.array([[0, 1, 1, 1, 0, 0], [0, 0, 1, 1, 1, 1], [0, 1, 0, 0, 0, 0], [0, 1, 1, 1, 1, 1]], bool)
    d = logp_ref - logp
    k3 = np.exp(d) - d - 1.0  # Schulman's k3, the NumPy way
    for aggregation, want in (
        ("token-mean", k3[mask].mean()),
        ("seq-mean", np.mean([k3[i][mask[i]].mean() for i in range(4)])),
    ):
        got = kl_loss(
            jnp.asarray(logp),
            jnp.asarray(logp_ref),
            jnp.asarray(mask),
            config(kl_estimator="k3", aggregation=aggregation),
        )
        np.testing.assert_allclose(float(got), want, rtol=1e-5)
    # in the loss: (loss with kl_in="loss") - (loss with kl_in="reward") = beta * k3 of the policy's log-probs
    toks = jax.random.randint(jax.random.PRNGKey(1), (4, P + T), 2, V).astype(jnp.int32)
    valid = jnp.ones_like(toks, bool)
    mask = jnp.arange(P + T)[None].repeat(4, 0) >= P
    ref = jax.tree.map(lambda x: x * 0.9, params)
    zeros = jnp.zeros(toks.shape, jnp.float32)
    logits = lm.logits(params, toks, valid)
    logp_new = np.asarray(experience.filtered_logprobs(logits, toks, config())[0])
    logp_r = np.asarray(experience.filtered_logprobs(lm.logits(ref, toks, valid), toks, config())[0])
    mb = TokenBatch(
        tokens=toks,
        valid=valid,
        mask=mask,
        logp_old=jnp.asarray(logp_new),
        values_old=zeros,
        advantages=zeros + 0.3,
        returns=zeros,
        logp_ref=jnp.asarray(logp_r),
        ptx_mask=None,
        ptx_tokens=None,
        ptx_valid=None,
    )
    beta = 0.7
    totals = {"units": jnp.sum(mask, dtype=jnp.float32), "ptx": jnp.float32(0), "beta": jnp.float32(beta)}
    out = {}
    for kl_in in ("reward", "loss"):
        cfg = config(kl_in=kl_in, kl_estimator="k3", advantage="grpo", group_size=2)
        out[kl_in] = float(
            make_token_ppo(cfg, lm, count_threes).loss({"policy": params, "critic": None}, mb, totals, cfg)[0]
        )
    d = logp_r - logp_new
    want = beta * (np.exp(d) - d - 1.0)[np.asarray(mask)].mean()
    np.testing.assert_allclose(out["loss"] - out["reward"], want, rtol=1e-4, atol=1e-7)


def test_nonsense_group_settings_are_refused(tiny):
    lm, _ = tiny
    for kw, match in (
        (dict(advantage="grpo"), "group_size=1 must be >= 2"),
        (dict(advantage="rloo", group_size=1), "group_size=1 must be >= 2"),
        (dict(group_size=3), "batch_size=8 responses must split into groups of group_size=3"),
        (dict(group_size=0), "group_size=0 must be a positive integer"),
        (dict(advantage="ppo"), "advantage='ppo' must be one of"),
        (dict(kl_in="both"), "kl_in='both' must be one of"),
    ):
        with pytest.raises(ConfigError, match=match):
            make_token_ppo(config(**kw), lm, count_threes)
    # a prompts function must return batch_size / group_size prompts
    tp = make_token_ppo(config(advantage="grpo", group_size=2), lm, count_threes, prompts=prompts)
    with pytest.raises(ConfigError, match=r"batch_size / group_size = 4, P\]"):
        jax.eval_shape(
            tp.iteration,
            jax.eval_shape(tp.init, jax.random.PRNGKey(0), tiny[1], tiny[1]),
            prompts(jax.random.PRNGKey(0), 8),
        )


def test_the_rlhf_flags_carry_the_group_fields_and_refuse_in_their_words():
    import argparse

    from purejaxppo.cli.rlhf_cmd import add_rlhf, config_flag, token_config
    from purejaxppo.config import ConfigError
    from purejaxppo.lm.ppo.token_config import validate_token_config

    p = argparse.ArgumentParser(exit_on_error=False)
    add_rlhf(p)
    cfg = token_config(p.parse_args(["--advantage", "rloo", "--group-size", "4", "--kl-in", "loss"]), text=True)
    assert (cfg.advantage, cfg.group_size, cfg.kl_in) == ("rloo", 4, "loss")
    for argv, match in (
        (["--advantage", "grpo"], "--group-size 1 must be >= 2"),
        (["--group-size", "5", "--batch", "8"], "--batch 8 responses must split into groups of --group-size 5"),
    ):
        with pytest.raises(ConfigError, match=match):  # the session validates it once, in the flags' words
            validate_token_config(token_config(p.parse_args(argv), text=True), flag_of=config_flag)
    for argv in (["--group-size", "2.5"], ["--kl-in", "critic"]):  # refused as parsed: the type, the choices
        with pytest.raises(argparse.ArgumentError):
            p.parse_args(argv)


@pytest.mark.slow
def test_a_grpo_run_folder_resumes_bit_for_bit(tmp_path):
    import csv

    from purejaxppo.lm.ppo.token_config import TokenPPOConfig
    from purejaxppo.programs.rlhf_program import RLHFProgram
    from purejaxppo.programs.rlhf_settings import RLHFSettings
    from purejaxppo.programs.rlhf_run import resume_rlhf, sft_model, train_rlhf
    from purejaxppo.run.checkpoint import latest_checkpoint, restore_checkpoint

    settings = RLHFSettings(
        task="reverse", task_options=(("max_len", 4), ("max_new", 6)), d_model=16, n_layers=1, sft_steps=5
    )
    cfg = TokenPPOConfig(
        batch_size=8, num_iterations=4, update_epochs=1, num_minibatches=2, advantage="grpo", group_size=4, kl_in="loss"
    )
    sft = sft_model(settings, 0)
    prog = RLHFProgram(cfg, settings, sft[0], sft[1])
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    kw = dict(num_seeds=2, chunk_updates=2, sft=sft, program=prog)
    train_rlhf(cfg, settings, run_dir=a, **kw)
    assert not train_rlhf(cfg, settings, run_dir=b, stop_after=2, **kw).finished
    resume_rlhf(b, program=prog)
    rows = [list(csv.reader(open(os.path.join(d, "metrics.csv")))) for d in (a, b)]
    assert rows[0] == rows[1] and len(rows[0]) == 1 + 2 * 4 and "critic_loss" not in rows[0][0]
    template = prog.init(prog.place(jax.random.split(jax.random.PRNGKey(0), 2))[0])
    assert template.train.params["critic"] is None
    states = [restore_checkpoint(latest_checkpoint(os.path.join(d, "checkpoints")), template)[0] for d in (a, b)]
    for x, y in zip(jax.tree.leaves(states[0]), jax.tree.leaves(states[1])):
        assert np.array_equal(np.asarray(x), np.asarray(y))
