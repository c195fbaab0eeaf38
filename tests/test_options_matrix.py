"""The option matrix of docs/options.md, checked row by row.

* Every combination the API refuses raises :class:`ConfigError` with the problem or the fix
  in its message, before anything is traced.
* Every combination the command line refuses exits 2 with one ``error:`` line and no
  traceback, and makes no run folder.
* Every supported combination next to them builds and trains 2 tiny updates (those on
  suites whose compile is long are traced, not compiled: tests/test_obs_kinds.py trains them).
* PBT's combinations (``--pbt`` with ``--seeds``, ``--split envs``, ``--eval-every``,
  ``--init-from``) run through the CLI, and what the code does (a clean refusal, or a run that
  trains) must be what docs/options.md says.

Each case's id is the table's last column, so the table and this test cannot drift apart.
"""

import os
import re

import jax
import numpy as np
import pytest

from purejaxppo import PPOConfig, make_ppo
from purejaxppo.cli import main
from purejaxppo.config import ConfigError

DOC = os.path.join(os.path.dirname(__file__), "..", "docs", "options.md")
TINY = PPOConfig(
    num_envs=4,
    num_steps=8,
    total_timesteps=4 * 8 * 2,
    update_epochs=1,
    num_minibatches=2,
    hidden_sizes=(8,),
    gru_size=8,
    max_episode_steps=20,
)
SUITES = {"pgx": "pgx", "jumanji": "jumanji", "jaxmarl": "jaxmarl"}
MPE = "jaxmarl:MPE_simple_spread_v3"

# id -> (config changes, text of the refusal: the problem or the fix)
REFUSED_API = {
    "critic-lr-shared-torso": (dict(critic_lr=1e-3, shared_torso=True), "set shared_torso=False or critic_lr=None"),
    "lr-end-anneal": (dict(lr_end=1e-5, lr_ramp_steps=10.0), "set anneal_lr=False with it"),
    "gru-softplus": (dict(network="gru", env_name="Pendulum-v1", action_std="softplus"), "(action_std='param')"),
    "sequence-minibatches": (dict(network="gru", num_minibatches=8), "choose a divisor of num_envs"),
    "cnn-vector-obs": (dict(network="cnn"), "needs image observations"),
    "cnn-structured-obs": (dict(network="cnn", env_name="jumanji:Snake-v1"), "needs image observations"),
    "reset-ratio-gymnax": (dict(reset_ratio=2), "use reset_ratio=1"),
    "obs-keep-index": (dict(obs_keep=(0, 9)), "has an index >= the observation size 4"),
    "unknown-network": (dict(network="transformer"), "is not a registered agent; choose one of"),
    "pgx-two-player": (dict(env_name="pgx:tic_tac_toe"), "is a 2-player game"),
    "marl-rows": (dict(env_name=MPE), "num_envs=4 must be a multiple of the 3 agents"),
    "marl-heterogeneous": (
        dict(env_name="jaxmarl:MPE_simple_adversary_v3", num_envs=6),
        "shares one policy over homogeneous agents",
    ),
    "centralised-single-agent": (dict(agent_critic="centralised"), "use agent_critic='independent'"),
    "agent-ids-single-agent": (dict(agent_ids=True), "has one agent"),
    "centralised-shared-torso": (
        dict(env_name=MPE, num_envs=6, agent_critic="centralised", shared_torso=True),
        "neither shared_torso=True nor obs_keep",
    ),
}

# id -> (config changes, "train" (2 updates) or "trace" (built and traced, not compiled))
SUPPORTED_API = {
    "gru-masked-obs": (dict(network="gru", env_name="pgx:2048"), "trace"),
    "gru-structured-obs": (dict(network="gru", env_name="jumanji:Snake-v1"), "trace"),
    "obs-keep-structured": (dict(env_name="jumanji:Snake-v1", obs_keep=(0, 720)), "trace"),
    "obs-keep-masked": (dict(env_name="pgx:2048", obs_keep=(0, 1, 2)), "trace"),
    "cnn-masked-image": (dict(network="cnn", env_name="pgx:2048"), "trace"),
    "reset-ratio-suite": (dict(env_name="jumanji:Snake-v1", reset_ratio=2), "trace"),
    "gru-obs-keep": (dict(network="gru", obs_keep=(0, 2)), "train"),
    "gru-critic-lr-target-kl": (dict(network="gru", critic_lr=1e-3, target_kl=0.02), "train"),
    "gru-continuous-normalised": (
        dict(network="gru", env_name="Pendulum-v1", normalize_obs=True, normalize_reward=True),
        "train",
    ),
    "softplus-feed-forward": (dict(env_name="Pendulum-v1", action_std="softplus"), "train"),
    "critic-lr-separate-torsos": (dict(critic_lr=1e-3), "train"),
    "lr-end-no-anneal": (dict(lr_end=1e-5, lr_ramp_steps=10.0, anneal_lr=False), "train"),
    "cnn-image": (dict(network="cnn", env_name="Breakout-MinAtar"), "train"),
    "gru-centralised": (dict(network="gru", env_name="jaxmarl:3m", num_envs=6, agent_critic="centralised"), "trace"),
    "agent-ids-masked": (dict(env_name="jaxmarl:3m", num_envs=6, agent_ids=True), "trace"),
}

CLI_TINY = [
    "--env",
    "CartPole-v1",
    "--num-envs",
    "4",
    "--num-steps",
    "8",
    "--total-timesteps",
    "64",
    "--update-epochs",
    "1",
    "--num-minibatches",
    "2",
    "--hidden-sizes",
    "8",
]
PBT = ["--pbt", "2", "--search", "lr=loguniform:1e-4:1e-3", "--pbt-interval", "1"]
# id -> (train flags after CLI_TINY; "RUN" is a trained plain run of CLI_TINY, text of the refusal)
REFUSED_CLI = {
    "search-without-pbt": (["--search", "lr=loguniform:1e-5:1e-2"], "only apply to population-based training"),
    "pbt-without-search": (["--pbt", "2"], "--pbt needs at least one --search"),
    "pbt-sweep": (PBT + ["--sweep", "lr=1e-3,1e-4"], "--sweep cannot be combined with it"),
    "eval-episodes-without-every": (["--eval-episodes", "3"], "--eval-episodes needs --eval-every"),
    "member-without-init-from": (["--member", "0"], "add --init-from RUN_DIR"),
    "sweep-and-flag": (["--sweep", "lr=1e-3,1e-4", "--lr", "1e-3"], "--lr is given and --sweep"),
    "sweep-structural": (["--sweep", "gru_size=8,16"], "cannot sweep 'gru_size'"),
    "sweep-target-kl-none": (["--sweep", "target_kl=0.01,0.02"], "needs a float target_kl"),
    "preset-reference": (["--preset", "--reference", "gymnax-blines"], "two different starting configs"),
    "init-from-other-network": (["--init-from", "RUN", "--network", "gru"], "another network or env"),
    "member-of-a-single-run": (["--init-from", "RUN", "--member", "0"], "is a single run"),
}
# id -> (whole argv; "RUN" as above), text of the refusal
REFUSED_CLI_OTHER = {
    "resume-with-flags": (["train", "--resume", "RUN", "--lr", "0.1"], "cannot be changed"),
    "protocol-episodes": (
        ["eval", "RUN", "--protocol", "gymnax-blines", "--episodes", "3"],
        "drop --episodes/--stochastic",
    ),
}
PBT_COMBOS = {
    "pbt-seeds": ["--seeds", "2"],
    "pbt-split-envs": ["--split", "envs"],
    "pbt-eval-every": ["--eval-every", "1"],
    "pbt-init-from": ["--init-from", "RUN"],
    "pbt-jaxmarl": ["--env", MPE, "--num-envs", "6"],  # in place of CLI_TINY's --env and --num-envs
}


def documented() -> dict:
    """``{test id: outcome}`` from docs/options.md's tables (``| ... | outcome | ... | `id` |``)."""
    rows = {}
    for line in open(DOC, encoding="utf-8"):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 4 and re.fullmatch(r"`[a-z0-9-]+`", cells[-1]) and cells[1] in ("refused", "supported"):
            rows[cells[-1].strip("`")] = cells[1]
    return rows


def _needs_suite(changes):
    suite = changes.get("env_name", "").split(":")[0]
    if suite in SUITES:
        pytest.importorskip(SUITES[suite])


def test_the_table_lists_every_case_here_and_no_other():
    doc = documented()
    here = {
        **{k: "refused" for k in (*REFUSED_API, *REFUSED_ELSEWHERE, *REFUSED_CLI, *REFUSED_CLI_OTHER)},
        **{k: "supported" for k in SUPPORTED_API},
    }
    for k, outcome in here.items():
        assert doc.get(k) == outcome, f"docs/options.md: row `{k}` should say {outcome}, says {doc.get(k)}"
    extra = set(doc) - set(here) - set(PBT_COMBOS)
    assert not extra, f"docs/options.md lists rows this test does not check: {sorted(extra)}"
    assert set(PBT_COMBOS) <= set(doc), sorted(set(PBT_COMBOS) - set(doc))


@pytest.mark.parametrize("case", sorted(REFUSED_API))
def test_refused_by_the_api(case):
    changes, text = REFUSED_API[case]
    _needs_suite(changes)
    with pytest.raises(ConfigError) as e:
        make_ppo(TINY.replace(**changes))
    assert text in str(e.value), str(e.value)


def _split_envs(cfg, devices):
    from purejaxppo.parallel.sharding import split_envs

    return split_envs(cfg, devices)


def _gif(cfg):
    from purejaxppo.step.evaluate import gif_renderer

    return gif_renderer(cfg)


def _masked_multi_discrete(cfg):
    """A toy env whose actions are MultiDiscrete AND masked."""
    from purejaxppo.envs import EnvSpec, VecEnv

    spec = EnvSpec("toy-masked-multi", (3,), True, 5, (2,), None, None, 10, action_mask=True, action_nvec=(3, 2))
    return make_ppo(cfg, venv=VecEnv(spec, cfg.num_envs, None, None))


# id -> (a call that must refuse, text of the refusal): other entry points, also before any work
REFUSED_ELSEWHERE = {
    "split-envs-count": (lambda: _split_envs(TINY, 3), "num_envs=4 cannot be split over 3 devices"),
    "split-envs-units": (
        lambda: _split_envs(TINY.replace(network="gru", num_minibatches=4), 2),
        "a minibatch of 1 env sequences (num_envs/num_minibatches) cannot be split over 2 devices",
    ),
    "gif-unrenderable": (lambda: _gif(TINY.replace(env_name="MemoryChain-bsuite")), "cannot render MemoryChain-bsuite"),
    "masked-multi-discrete": (lambda: _masked_multi_discrete(TINY), "a mask per component is not built"),
}


@pytest.mark.parametrize("case", sorted(REFUSED_ELSEWHERE))
def test_refused_elsewhere(case):
    call, text = REFUSED_ELSEWHERE[case]
    with pytest.raises(ConfigError) as e:
        call()
    assert text in str(e.value), str(e.value)


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(SUPPORTED_API))
def test_supported_combination_builds_and_trains(case):
    changes, how = SUPPORTED_API[case]
    _needs_suite(changes)
    cfg = TINY.replace(**changes)
    ppo = make_ppo(cfg)
    key = jax.random.PRNGKey(0)
    if how == "trace":
        _, metrics = jax.eval_shape(ppo.train, key)
        assert metrics["actor_loss"].shape == (cfg.num_updates,)
        return
    _, metrics = jax.jit(ppo.train)(key)
    for k, v in metrics.items():
        assert np.asarray(v).shape == (cfg.num_updates,), k
        assert np.all(np.isfinite(np.asarray(v))) or k.startswith("episode_"), k


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A trained plain run of ``CLI_TINY`` (the source of --init-from and --resume cases)."""
    root = tmp_path_factory.mktemp("matrix")
    run = str(root / "run")
    assert main(["train", "--devices", "1", "--quiet", *CLI_TINY, "--run-dir", run]) == 0
    return root, run


def _refused_cleanly(argv, text, root, capsys):
    before = sorted(os.listdir(root))
    assert main(argv) == 2, argv
    err = capsys.readouterr().err
    assert err.startswith("error: ") and text in err and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1, err
    assert sorted(os.listdir(root)) == before  # no run folder was made


@pytest.mark.parametrize("case", sorted(REFUSED_CLI))
def test_refused_by_the_cli(case, trained, capsys):
    root, run = trained
    flags, text = REFUSED_CLI[case]
    flags = [run if f == "RUN" else f for f in flags]
    _refused_cleanly(
        ["train", "--devices", "1", "--quiet", *CLI_TINY, *flags, "--run-dir", str(root / case)], text, root, capsys
    )


@pytest.mark.parametrize("case", sorted(REFUSED_CLI_OTHER))
def test_refused_by_the_cli_other_commands(case, trained, capsys):
    root, run = trained
    argv, text = REFUSED_CLI_OTHER[case]
    _refused_cleanly([run if a == "RUN" else a for a in argv], text, root, capsys)


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(PBT_COMBOS))
def test_pbt_combination_does_what_the_table_says(case, trained, capsys):
    root, run = trained
    folder = str(root / case)
    base = CLI_TINY
    if MPE in PBT_COMBOS[case]:
        pytest.importorskip("jaxmarl")
        base = CLI_TINY[4:]  # without --env CartPole-v1 --num-envs 4
    flags = [run if f == "RUN" else f for f in PBT_COMBOS[case]]
    rc = main(["train", "--devices", "1", "--quiet", *base, *PBT, *flags, "--run-dir", folder])
    err = capsys.readouterr().err
    assert rc in (0, 2) and "Traceback" not in err, err
    if rc == 2:  # refused: one line, nothing made
        assert err.startswith("error: ") and len(err.strip().splitlines()) == 1, err
        assert not os.path.exists(folder)
    else:  # trained: every update of every member is in metrics.csv
        assert os.path.exists(os.path.join(folder, "metrics.csv")) and os.path.exists(
            os.path.join(folder, "summary.json")
        )
    said = documented().get(case)
    did = "refused" if rc == 2 else "supported"
    assert said == did, f"docs/options.md says `{case}` is {said}; the code {did} it ({err.strip()[:200]})"
