"""DAPO's dynamic sampling (``dynamic_sampling``, ``max_extra_draws``; Yu et al. 2025) in the
compiled token-level iteration.

Independent references: a hand-made reward whose flat groups are known from the prompt alone
(an even prompt id: every answer scores 1; an odd one: the answers score 0, 1, 0, 1, ...), the
batch it must give chosen again in NumPy from the same prompts; the gradient of the loss on the
kept rows alone, against the whole batch's with the filler rows in it; the iteration with the
setting off, against the one with it on where no group is flat; a run folder resumed.
"""

import dataclasses
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_token_ppo import P, V, tiny_model  # noqa: E402

from purejaxppo.config import ConfigError  # noqa: E402
from purejaxppo.lm.ppo import dynamic_sampling as ds  # noqa: E402
from purejaxppo.lm.ppo import experience  # noqa: E402
from purejaxppo.lm.ppo import token_iteration as ti  # noqa: E402
from purejaxppo.lm.ppo import token_phases as ph  # noqa: E402
from purejaxppo.lm.ppo.recipes import RECIPE_FIELDS, RECIPES, apply_recipe  # noqa: E402
from purejaxppo.lm.ppo.token_config import TokenPPOConfig, validate_token_config  # noqa: E402
from purejaxppo.lm.ppo.token_ppo import make_token_ppo  # noqa: E402
from purejaxppo.lm.ppo.token_update import Devices, minibatch_totals, share_loss  # noqa: E402

B, G, T = 16, 2, 5
N = B // G  # groups per draw


@pytest.fixture(scope="module")
def tiny():
    return tiny_model()


def kind_prompts(key, n):
    """``n`` prompts, each one id (2..V-1) in every slot: odd ids are the groups with a signal."""
    ids = jax.random.randint(key, (n,), 2, V)
    return jnp.broadcast_to(ids[:, None], (n, P)).astype(jnp.int32), jnp.ones((n, P), bool)


def kind_reward(_, prompt, prompt_valid, response, mask):
    """Even prompt: 1 for every answer (a flat group); odd: 0, 1, 0, 1, ... down the rows."""
    signal = prompt[:, -1] % 2 == 1
    return jnp.where(signal, (jnp.arange(prompt.shape[0]) % G).astype(jnp.float32), 1.0)


def config(**kw):
    base = dict(
        batch_size=B,
        group_size=G,
        advantage="grpo",
        num_iterations=1,
        update_epochs=1,
        num_minibatches=2,
        max_new_tokens=T,
        stop_ids=(1,),
        missing_eos_penalty=0.0,  # the score alone: the reward's flat groups are the flat groups
        dynamic_sampling=True,
        max_extra_draws=1,
    )
    return TokenPPOConfig(**{**base, **kw})


def numpy_choice(key, cfg):
    """The batch dynamic sampling must give from the iteration's key: the prompt ids of its
    groups, how many have a signal, the draws after the first and the flat groups drawn."""
    keys = ti.IterationKeys(*jax.random.split(key, 5))
    pkeys = [keys.prompt] + [ds.extra_draw_keys(keys.sample, k)[0] for k in range(1, cfg.max_extra_draws + 1)]
    draws = [np.asarray(kind_prompts(k, N)[0][:, -1]) for k in pkeys]
    kept, dropped = [], 0
    extra = 0
    for k, ids in enumerate(draws):
        extra = k
        dropped += int(np.sum(ids % 2 == 0))
        kept += [int(i) for i in ids if i % 2 == 1][: N - len(kept)]
        if len(kept) == N:
            break
    flat = [int(i) for i in draws[0] if i % 2 == 0]
    filler = flat[len(flat) - (N - len(kept)) :]  # the first draw's last flat groups
    return kept + filler, len(kept), extra, dropped


def test_the_batch_is_the_first_groups_with_a_signal_in_draw_order(tiny, monkeypatch):
    """Through the iteration: the batch's groups (its prompts, seen by the diagnostics) and the
    rows the update gives weight to (its batch, caught on its way in) are NumPy's choice; no flat
    group is ever trained on; the batch is ``B`` rows whether the draws filled it or ran out."""
    lm, params = tiny
    seen = []
    real_update = ti.update_phase

    def update_phase(models, train, data, *a, **k):
        jax.debug.callback(lambda m, t: seen.append((np.asarray(m), np.asarray(t))), data.mask, data.tokens)
        return real_update(models, train, data, *a, **k)

    monkeypatch.setattr(ti, "update_phase", update_phase)
    cfg = config()
    groups = lambda prompt, valid, response, mask: {"ids": prompt[::G, -1].astype(jnp.float32)}  # noqa: E731
    tp = make_token_ppo(cfg, lm, kind_reward, prompts=kind_prompts, diagnostics=groups)
    step = jax.jit(tp.iteration)
    state = tp.init(jax.random.PRNGKey(3), params, params)
    cases = set()
    for _ in range(6):
        ids, kept, extra, dropped = numpy_choice(state.key, cfg)
        state, m = step(state)
        jax.block_until_ready(m)
        mask, tokens = seen.pop()
        assert mask.shape[0] == B and tokens.shape[0] == B
        np.testing.assert_array_equal(np.asarray(m["task_ids"]), ids)
        assert (float(m["groups_kept"]), float(m["extra_draws"]), float(m["groups_dropped"])) == (
            kept / N,
            extra,
            dropped,
        )
        trained = mask.any(axis=1)  # the rows with weight in the loss
        np.testing.assert_array_equal(trained, np.repeat(np.arange(N) < kept, G))
        assert np.all(tokens[trained, P - 1] % 2 == 1), "a flat group was trained on"
        cases.add(kept == N)
    assert cases == {True, False}  # batches filled and batches the draws left short, both seen


def leftover_batch(tiny, **kw):
    """A batch the draws left short (no draw after the first), scored: ``(models, params, exp, keep, cfg)``."""
    lm, params = tiny
    cfg = config(max_extra_draws=0, kl_in="loss", beta=0.1, ent_coef=0.01, **kw)
    models = experience.Models(lm, lm, None, kind_reward, values=False)
    p = {"policy": params, "critic": None}
    keys = ti.IterationKeys(*jax.random.split(jax.random.PRNGKey(0), 5))  # 4 of its 8 groups have a signal

    @jax.jit
    def sampled(p):
        s, keep, m = ds.dynamic_sample_phase(
            models, kind_prompts, p, None, keys.prompt, keys.sample, None, cfg, Devices()
        )
        return ph.score_phase(models, p, params, s, T, cfg), keep, m["groups_kept"]

    exp, keep, kept = sampled(p)
    assert float(kept) == 0.5  # some groups kept, some filler
    return models, p, exp, np.asarray(keep), cfg


@pytest.mark.parametrize(
    "advantage,aggregation",
    [("grpo", "token-mean"), ("grpo", "seq-mean"), ("rloo", "seq-mean"), ("reinforce++-baseline", "token-mean")],
)
def test_the_filler_rows_weigh_nothing(tiny, advantage, aggregation):
    """Short of groups with a signal, the rest of the batch has no weight: the gradient of the
    loss (policy term, k3 KL term, entropy bonus) is the one of the kept rows alone, whose
    advantages (reinforce++-baseline's batch normalisation too) are those of the kept rows alone."""
    models, p, exp, keep, cfg = leftover_batch(tiny, advantage=advantage, aggregation=aggregation)
    beta = jnp.float32(cfg.beta)

    @jax.jit
    def batch_and_grad(exp, keep):
        batch, _ = experience.finish(exp, beta, cfg, keep)
        loss = lambda q: share_loss(models, q, batch, minibatch_totals(batch, cfg, beta), cfg, 1)[0]  # noqa: E731
        return batch, jax.grad(loss)(p)

    data, g_data = batch_and_grad(exp, jnp.asarray(keep))
    alone, g_alone = batch_and_grad(jax.tree.map(lambda x: x[keep], exp), None)

    assert not np.any(np.asarray(data.mask)[~keep]) and not np.any(np.asarray(data.advantages)[~keep])
    np.testing.assert_allclose(np.asarray(data.advantages)[keep], np.asarray(alone.advantages), rtol=1e-6, atol=1e-7)
    for a, b in zip(jax.tree.leaves(g_data), jax.tree.leaves(g_alone)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-8)


def test_off_it_is_todays_iteration_and_on_without_flat_groups_the_same_numbers(tiny, monkeypatch):
    """Off: the iteration never enters dynamic sampling and ``finish`` gets no ``keep`` (today's
    program). On, where every group has a signal (odd prompts only): the same state and metrics,
    bit for bit, and no draw after the first."""
    lm, params = tiny

    def odd_prompts(key, n):
        prompt, valid = kind_prompts(key, n)
        return prompt | 1, valid

    runs = {}
    for on in (False, True):
        cfg = config(dynamic_sampling=on, max_extra_draws=2, num_iterations=2, kl_in="loss", beta=0.1)
        tp = make_token_ppo(cfg, lm, kind_reward, prompts=odd_prompts)
        runs[on] = jax.jit(tp.train)(jax.random.PRNGKey(5), params, params)
    (off, m_off), (on, m_on) = runs[False], runs[True]
    for a, b in zip(jax.tree.leaves(off), jax.tree.leaves(on)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    for k, v in m_off.items():
        np.testing.assert_array_equal(np.asarray(v), np.asarray(m_on[k]), err_msg=k)
    assert set(m_on) - set(m_off) == {"groups_kept", "extra_draws", "groups_dropped", "first_draw_score"}
    assert np.all(np.asarray(m_on["groups_kept"]) == 1) and not np.any(np.asarray(m_on["extra_draws"]))
    np.testing.assert_array_equal(np.asarray(m_on["first_draw_score"]), np.asarray(m_off["score"]))

    def refuse(*a, **k):
        raise AssertionError("dynamic sampling entered with the setting off")

    real_finish = experience.finish

    def finish(exp, beta, cfg, keep=None):
        assert keep is None
        return real_finish(exp, beta, cfg)

    monkeypatch.setattr(ds, "dynamic_sample_phase", refuse)
    monkeypatch.setattr(experience, "finish", finish)
    cfg = config(dynamic_sampling=False)
    tp = make_token_ppo(cfg, lm, kind_reward, prompts=kind_prompts)
    jax.make_jaxpr(tp.iteration)(tp.init(jax.random.PRNGKey(0), params, params))


def test_the_settings_are_checked_and_dapo_turns_it_on(tiny):
    lm, _ = tiny
    for kw in (dict(advantage="gae", group_size=2), dict(advantage="reinforce++", group_size=2)):
        with pytest.raises(ConfigError, match="dynamic_sampling drops the groups .* advantage one of"):
            validate_token_config(config(**kw))
    with pytest.raises(ConfigError, match="group_size=1 must be >= 2"):
        validate_token_config(config(group_size=1))
    with pytest.raises(ConfigError, match="max_extra_draws=-1 must be an integer >= 0"):
        validate_token_config(config(max_extra_draws=-1))
    validate_token_config(config(advantage="gae", group_size=2, dynamic_sampling=False))
    for advantage in ("grpo", "dr-grpo", "rloo", "reinforce++-baseline"):
        validate_token_config(config(advantage=advantage, max_extra_draws=0))
    tp = make_token_ppo(config(), lm, kind_reward)  # no prompts function: no draw after the first
    with pytest.raises(ConfigError, match="prompts=fn"):
        jax.eval_shape(
            tp.iteration,
            jax.eval_shape(tp.init, jax.random.PRNGKey(0), tiny[1], tiny[1]),
            kind_prompts(jax.random.PRNGKey(0), N),
        )
    assert "dynamic_sampling" in RECIPE_FIELDS
    assert {name: r["dynamic_sampling"] for name, r in RECIPES.items()} == {n: n == "dapo" for n in RECIPES}
    start = TokenPPOConfig(batch_size=8, num_minibatches=2, group_size=4, max_extra_draws=5)
    cfg = apply_recipe(start, "dapo")
    assert cfg.dynamic_sampling and cfg.max_extra_draws == 5
    assert not apply_recipe(dataclasses.replace(cfg), "grpo").dynamic_sampling


def test_the_rlhf_flags_carry_the_settings_and_refuse_in_their_words():
    import argparse

    from purejaxppo.cli.rlhf_cmd import add_rlhf, config_flag, token_config

    p = argparse.ArgumentParser(exit_on_error=False)
    add_rlhf(p)
    argv = ["--advantage", "grpo", "--group-size", "4", "--dynamic-sampling", "true", "--max-extra-draws", "2"]
    cfg = token_config(p.parse_args(argv), text=True)
    assert (cfg.dynamic_sampling, cfg.max_extra_draws) == (True, 2)
    with pytest.raises(ConfigError, match="--dynamic-sampling drops .* --advantage one of .* --group-size >= 2"):
        validate_token_config(token_config(p.parse_args(["--dynamic-sampling", "true"]), text=True), config_flag)


@pytest.mark.slow
def test_a_dynamic_sampling_run_folder_resumes_bit_for_bit(tmp_path):
    """The draws are inside the compiled iteration, keyed from its state: a run stopped after
    two iterations and resumed writes the same metrics and state as one run straight through."""
    import csv

    from purejaxppo.programs.rlhf_program import RLHFProgram
    from purejaxppo.programs.rlhf_run import resume_rlhf, sft_model, train_rlhf
    from purejaxppo.programs.rlhf_settings import RLHFSettings
    from purejaxppo.run.checkpoint import latest_checkpoint, restore_checkpoint

    settings = RLHFSettings(
        task="reverse", task_options=(("max_len", 4), ("max_new", 6)), d_model=16, n_layers=1, sft_steps=5
    )
    cfg = TokenPPOConfig(
        batch_size=8,
        num_iterations=4,
        update_epochs=1,
        num_minibatches=2,
        advantage="grpo",
        group_size=4,
        dynamic_sampling=True,
        max_extra_draws=2,
    )
    sft = sft_model(settings, 0)
    prog = RLHFProgram(cfg, settings, sft[0], sft[1])
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    kw = dict(num_seeds=2, chunk_updates=2, sft=sft, program=prog)
    train_rlhf(cfg, settings, run_dir=a, **kw)
    assert not train_rlhf(cfg, settings, run_dir=b, stop_after=2, **kw).finished
    resume_rlhf(b, program=prog)
    rows = [list(csv.reader(open(os.path.join(d, "metrics.csv")))) for d in (a, b)]
    assert rows[0] == rows[1] and len(rows[0]) == 1 + 2 * 4
    head = rows[0][0]
    extra = [float(r[head.index("extra_draws")]) for r in rows[0][1:]]
    assert any(extra), extra  # the draws after the first were taken (and resumed) too
    template = prog.init(prog.place(jax.random.split(jax.random.PRNGKey(0), 2))[0])
    states = [restore_checkpoint(latest_checkpoint(os.path.join(d, "checkpoints")), template)[0] for d in (a, b)]
    for x, y in zip(jax.tree.leaves(states[0]), jax.tree.leaves(states[1])):
        assert np.array_equal(np.asarray(x), np.asarray(y))


WORKER = r"""
import functools, json, sys, jax, numpy as np
sys.path.insert(0, {tests!r})
from test_dynamic_sampling import config, kind_prompts, kind_reward, tiny_model
from purejaxppo.lm.ppo.data_parallel import data_parallel
from purejaxppo.lm.ppo.token_ppo import make_token_ppo
lm, params = tiny_model()
cfg = config(num_iterations=4)
res = []
for n in (1, 2):
    tp = data_parallel(functools.partial(make_token_ppo, cfg, lm, kind_reward, prompts=kind_prompts), n)
    state, m = jax.jit(tp.train)(jax.random.PRNGKey(3), params, params)
    res.append((m, state.train.params))
(m1, p1), (m2, p2) = res
out = dict(
    choice={{k: [np.asarray(m1[k]).tolist(), np.asarray(m2[k]).tolist()] for k in ("groups_kept", "extra_draws", "groups_dropped")}},
    metric={{k: float(np.max(np.abs(np.asarray(m1[k]) - np.asarray(m2[k])) / (np.abs(np.asarray(m1[k])) + 1e-3)))
            for k in ("score", "kl", "actor_loss", "entropy")}},
    params=max(float(np.max(np.abs(np.asarray(a) - np.asarray(b)))) for a, b in zip(jax.tree.leaves(p1), jax.tree.leaves(p2))),
)
print("RESULT " + json.dumps(out))
"""


@pytest.mark.slow
def test_two_devices_choose_the_same_groups_as_one():
    """The choice is made on every device's rows gathered: on 2 devices the same groups (the same
    draws, kept and dropped counts exactly), the same numbers to the reduction order (relative to
    the value plus 1e-3: the KL of the first iterations is near 0)."""
    import json
    import subprocess

    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2").strip()
    code = WORKER.format(tests=os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=900)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    out = json.loads(lines[-1][7:])
    for k, (one, two) in out["choice"].items():
        assert one == two, (k, one, two)
    assert max(out["metric"].values()) < 1e-4 and out["params"] < 1e-5, out
