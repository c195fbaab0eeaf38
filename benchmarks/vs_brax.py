"""purejaxppo next to Brax's own PPO (``brax.training.agents.ppo.train.train``, what MuJoCo
Playground's ``train_jax_ppo.py`` runs), same env, same hyperparameters, same process,
interleaved rounds, compile apart.

    python benchmarks/vs_brax.py [--rows inverted_pendulum,cartpole_balance,halfcheetah]
        [--size cpu|published] [--rounds 2] [--json OUT.json]

Needs the ``brax`` and ``playground`` extras (both in ``[dev]``). Brax 0.14.x does not run on
current JAX as installed (``AttributeError: jax.device_put_replicated is deprecated``):
``benchmarks/_brax_shims.py`` replaces that call at import time inside Brax's PPO modules
(nothing installed is edited) and times Brax's training program.

Rows (hyperparameters as Brax / Playground publish them for the env):
  inverted_pendulum   ``brax:inverted_pendulum``, Brax's ``notebooks/training.ipynb``
                      (2e6 steps, 2048 envs, batch 1024 x 32 minibatches, unroll 5, 4 epochs,
                      discount 0.97, lr 3e-4, entropy 1e-2, reward scaling 10, obs normalisation)
  cartpole_balance    ``playground:CartpoleBalance`` (MJX), Playground's
                      ``dm_control_suite_params.brax_ppo_config`` (6e7 steps, 2048 envs, batch
                      1024 x 32, unroll 30, 16 epochs, discount 0.995, lr 1e-3, entropy 1e-2,
                      reward scaling 10, obs normalisation)
  halfcheetah         ``brax:halfcheetah``, Brax's notebook (5e7 steps, 2048 envs, batch 512 x 32,
                      unroll 20, 8 epochs, discount 0.95, lr 3e-4, entropy 1e-3, reward scaling 1);
                      Brax publishes PPO settings for halfcheetah, ant and humanoid, and SAC ones
                      for hopper, so the locomotion row is halfcheetah
``--size published`` runs those numbers (a GPU's worth: ``benchmarks/gpu_figures.sh``), except
that Brax runs with ``num_evals=1`` (see Timing): its training steps are then
``ceil(num_timesteps / env steps per training step)`` (13 for inverted_pendulum; with the
notebook's ``num_evals=20`` its loop rounds up per eval epoch to 19).
``--size cpu`` (default) keeps every hyperparameter and the rollout's shape per env (unroll
length, unrolls per env per update, minibatch count, epochs) and divides the envs and the
minibatch size by the same factor, with fewer steps: see ``CPU`` below and the printed config.

How the two sides map. Brax collects ``batch_size * num_minibatches / num_envs`` unrolls of
``unroll_length`` steps from each of ``num_envs`` envs per training step: ours runs the same
``num_envs`` for ``num_steps = unroll_length * batch_size * num_minibatches / num_envs`` steps,
so an update sees the same env steps, split into the same number of minibatches of the same
size, for the same number of epochs. The network is Brax's default (policy 4x32, value 5x256,
swish, a state-dependent scale softplus(.) + 0.001 on the policy's output) through an agent
this script registers (``brax_sizes``: purejaxppo has one ``hidden_sizes`` for both).
Differences that remain are printed per row and saved in the JSON.

Timing. Ours: ``jax.jit(ppo.train).lower(key).compile()`` timed (in-memory caches cleared,
no persistent cache), then the compiled call to ``block_until_ready``. Brax: ``train(...,
num_evals=1, run_evals=False)`` does all of its training in ONE pmapped ``training_epoch``
call (with Playground's ``num_resets_per_eval`` R > 1, in R calls with env resets between);
the shim compiles it ahead of time on its first call and times compile and run apart, as for
ours. Brax's ``train()`` builds and compiles its env reset, init and evaluator anew on every
call, so it is called once per row (round 1; its whole wall time is in the JSON as
``train_call_s_round1``) and later rounds replay the compiled epoch(s) on copies of the same
inputs (``_brax_shims.replay``). ``run s`` is the training program alone on both sides.
``--host-devices N`` (N > 1) forces N host CPU devices before JAX starts: Brax's ``train`` pmaps
over every local device (its envs and minibatches split over them, gradients averaged), and ours
is ``parallel.split_envs(config, N)`` (the same split: one agent, its envs over the devices, a
``pmean`` of gradients per minibatch); both sides data-parallel over the same devices.
Env-steps/s = env steps (x action_repeat, as Brax counts them) / run s. Rounds: ours, Brax,
ours, Brax, ...

Evaluation: Brax's protocol for both (``brax.training.acting.Evaluator``: 128 envs wrapped as
Brax's train wraps its eval env, one episode each up to ``episode_length`` steps, the policy's
sampled actions, ``eval/episode_reward`` = mean return), on each side's final policy. Ours
acts with its Gaussian sample clipped to [-1, 1] (as in training); Brax with its tanh-squashed
sample.

Truncation at the time limit: ours bootstraps V(final observation) (``bootstrap_truncated``,
the true pre-reset observation is kept by our auto-reset). Brax (``bootstrap_on_timeout=False``,
the default and what both published configs use) zeroes the truncated step's TD error and cuts
the GAE trace there: no bootstrap, not terminal either; its auto-reset overwrites the final
observation, so it could not bootstrap from it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from _common import compile_timed, fmt_k, loadavg_now, timed  # noqa: E402  (this folder, on the path above)

# published settings, as Brax's train() takes them
BRAX_NOTEBOOK = "google/brax notebooks/training.ipynb (train_fn)"
PLAYGROUND_PARAMS = "mujoco_playground config/dm_control_suite_params.py (brax_ppo_config)"
ROWS = {
    "inverted_pendulum": dict(
        env="brax:inverted_pendulum",
        source=BRAX_NOTEBOOK,
        published=dict(
            num_timesteps=2_000_000,
            num_evals=20,
            reward_scaling=10,
            episode_length=1000,
            normalize_observations=True,
            action_repeat=1,
            unroll_length=5,
            num_minibatches=32,
            num_updates_per_batch=4,
            discounting=0.97,
            learning_rate=3e-4,
            entropy_cost=1e-2,
            num_envs=2048,
            batch_size=1024,
            seed=1,
        ),
    ),
    "cartpole_balance": dict(
        env="playground:CartpoleBalance",
        source=PLAYGROUND_PARAMS,
        published=dict(
            num_timesteps=60_000_000,
            num_evals=10,
            reward_scaling=10.0,
            episode_length=1000,
            normalize_observations=True,
            action_repeat=1,
            unroll_length=30,
            num_minibatches=32,
            num_updates_per_batch=16,
            discounting=0.995,
            learning_rate=1e-3,
            entropy_cost=1e-2,
            num_envs=2048,
            batch_size=1024,
            num_resets_per_eval=10,
        ),
    ),
    "halfcheetah": dict(
        env="brax:halfcheetah",
        source=BRAX_NOTEBOOK,
        published=dict(
            num_timesteps=50_000_000,
            num_evals=20,
            reward_scaling=1,
            episode_length=1000,
            normalize_observations=True,
            action_repeat=1,
            unroll_length=20,
            num_minibatches=32,
            num_updates_per_batch=8,
            discounting=0.95,
            learning_rate=3e-4,
            entropy_cost=0.001,
            num_envs=2048,
            batch_size=512,
            seed=3,
        ),
    ),
}
# --size cpu: envs and minibatch size divided by ``div`` (the same unrolls per env per update),
# ``updates`` training steps (Brax's) = updates (ours)
CPU = {
    "inverted_pendulum": dict(div=16, updates=12),
    "cartpole_balance": dict(div=64, updates=2),
    "halfcheetah": dict(div=32, updates=2),
}

BRAX_DEFAULT_NET = dict(policy_hidden_layer_sizes=(32,) * 4, value_hidden_layer_sizes=(256,) * 5, activation="swish")

NOTES_ALL = [
    "truncation: ours bootstraps V(final observation); Brax (bootstrap_on_timeout=False) zeroes the truncated "
    "step's TD error and cuts GAE there (its auto-reset overwrites the final observation)",
    "auto-reset: ours resets a finished env to a fresh random start; Brax's AutoResetWrapper (and Playground's "
    "wrap_for_brax_training) return it to the same cached first state it started from",
    "action distribution: Brax samples a tanh-squashed Gaussian (entropy estimated from a sample); ours a Gaussian "
    "clipped to [-1, 1] (analytic entropy), the same state-dependent scale softplus(.)+0.001",
    "advantages/targets: Brax recomputes values and GAE inside every minibatch with the current critic, over "
    "unrolls of unroll_length steps (bootstrapping at every unroll's end); ours computes them once per update "
    "with the rollout's critic over the env's whole num_steps window",
    "reward_scaling: Brax multiplies rewards by it before GAE; purejaxppo has no constant reward scale (its "
    "normalize_reward divides by a running std instead), so ours trains on raw rewards: with separate actor and "
    "critic, normalised advantages and Adam, the scale changes the critic's loss scale only",
    "max_grad_norm: Brax None (no clipping); ours has no 'off', so 1e9",
    "initialisation: Brax lecun_uniform kernels; ours orthogonal (sqrt(2) torso, 0.01 policy head, 1 value head)",
    "observation normalisation: both running mean/std over the rollout's observations; ours clips to +-10",
]


def cpu_settings(published: dict, div: int, updates: int) -> dict:
    s = dict(published)
    s["num_envs"] = published["num_envs"] // div
    s["batch_size"] = published["batch_size"] // div
    step = s["batch_size"] * s["num_minibatches"] * s["unroll_length"] * s["action_repeat"]
    s["num_timesteps"] = updates * step
    s["num_resets_per_eval"] = 0  # resets between epochs need > 1 epoch; the CPU budget has a few updates
    return s


def brax_training_steps(s: dict) -> tuple[int, int]:
    """(training steps Brax runs, env steps) with num_evals=1, as brax's train computes them."""
    step = s["batch_size"] * s["num_minibatches"] * s["unroll_length"] * s.get("action_repeat", 1)
    resets = max(s.get("num_resets_per_eval", 0), 1)
    per_epoch = math.ceil(s["num_timesteps"] / (1 * step * resets))
    n = per_epoch * resets
    return n, n * step


# --- our side ---------------------------------------------------------------------------------
def register_brax_sizes():
    """Agent ``brax_sizes``: Brax's default PPO networks' shapes (policy ``config.hidden_sizes``,
    value 5x256), ``config.activation`` and ``action_std``; built from purejaxppo's own parts."""
    import flax.linen as nn
    from purejaxppo.agents import networks as N
    from purejaxppo.agents.agent import feed_forward
    from purejaxppo.agents.registry import FF_FIELDS, registered_agents, register_agent

    if "brax_sizes" in registered_agents():
        return

    class SizedActorCritic(N.ActorCritic):
        critic_hidden_sizes: tuple = (256,) * 5

        def setup(self):
            self.actor_torso = N.MLPTorso(self.hidden_sizes, self.activation, self.obs_ndim)
            self.critic_torso = N.MLPTorso(self.critic_hidden_sizes, self.activation, self.obs_ndim)
            self.policy_head = N._dense(self.num_actions, 0.01)
            self.value_head = N._dense(1, 1.0)
            if self.action_std == "softplus":
                self.std_head = N._dense(self.num_actions, 0.01)
            else:
                self.log_std = self.param("log_std", nn.initializers.zeros, (self.num_actions,))

    def build(config, spec):
        module = SizedActorCritic(
            num_actions=spec.num_actions,
            discrete=spec.discrete,
            hidden_sizes=tuple(config.hidden_sizes),
            activation=config.activation,
            obs_ndim=len(spec.obs_shape),
            action_std=config.action_std,
            critic_hidden_sizes=tuple(BRAX_DEFAULT_NET["value_hidden_layer_sizes"]),
        )
        dummy = N.dummy_observation(spec)

        def actor(params, obs):
            return module.apply(params, obs, method=N.ActorCritic.actor)

        def critic(params, obs):
            return module.apply(params, obs, method=N.ActorCritic.critic)

        return feed_forward(
            N.Network(
                init=lambda k: module.init(k, dummy),
                actor=actor,
                critic=critic,
                apply=lambda p, o: (actor(p, o), critic(p, o)),
                dist=N.distribution_for(spec),
            )
        )

    register_agent("brax_sizes", build, fields=FF_FIELDS)


def ours_config(env: str, s: dict):
    from purejaxppo import PPOConfig

    rollouts_per_env = s["batch_size"] * s["num_minibatches"] // s["num_envs"]
    num_steps = s["unroll_length"] * rollouts_per_env
    updates, _ = brax_training_steps(s)
    return PPOConfig(
        env_name=env,
        num_envs=s["num_envs"],
        num_steps=num_steps,
        total_timesteps=updates * s["num_envs"] * num_steps,
        update_epochs=s["num_updates_per_batch"],
        num_minibatches=s["num_minibatches"],
        network="brax_sizes",
        hidden_sizes=BRAX_DEFAULT_NET["policy_hidden_layer_sizes"],
        activation=BRAX_DEFAULT_NET["activation"],
        action_std="softplus",
        anneal_lr=False,
        clip_value=False,
        adv_norm="minibatch",
        normalize_obs=bool(s["normalize_observations"]),
        normalize_reward=False,
        max_episode_steps=s["episode_length"],
        lr=s["learning_rate"],
        clip_eps=s.get("clipping_epsilon", 0.3),
        vf_coef=s.get("vf_loss_coefficient", 0.5),
        ent_coef=s["entropy_cost"],
        gamma=s["discounting"],
        gae_lambda=s.get("gae_lambda", 0.95),
        max_grad_norm=1e9,
        adam_eps=1e-8,
    )


def config_differences(cfg, s: dict) -> list[str]:
    """What still differs after the mapping (apart from NOTES_ALL)."""
    out = []
    if s.get("action_repeat", 1) != 1:
        out.append(f"action_repeat={s['action_repeat']}: both sides use the env's EpisodeWrapper repeat")
    if s.get("num_resets_per_eval", 0) > 1:
        out.append(
            f"num_resets_per_eval={s['num_resets_per_eval']}: Brax resets every env "
            f"{s['num_resets_per_eval']} times during training (between its epochs); ours never forces a reset"
        )
    rollouts_per_env = s["batch_size"] * s["num_minibatches"] // s["num_envs"]
    if rollouts_per_env > 1:
        out.append(
            f"Brax's update = {rollouts_per_env} unrolls of {s['unroll_length']} steps per env (GAE per "
            f"unroll); ours = one window of {cfg.num_steps} steps per env"
        )
    if s.get("reward_scaling", 1) != 1:
        out.append(f"reward_scaling={s['reward_scaling']} on Brax's side only (see notes)")
    return out


def make_env(env_name: str):
    """The unwrapped env both sides build (Playground with impl='jax', i.e. MJX, as ours)."""
    suite, name = env_name.split(":", 1)
    if suite == "brax":
        from brax import envs

        return envs.get_environment(name), None
    from mujoco_playground import registry, wrapper

    config = registry.get_default_config(name)
    overrides = {"impl": "jax"} if "impl" in config else {}
    return registry.load(name, config_overrides=overrides), wrapper.wrap_for_brax_training


def eval_env_for(env_name: str, s: dict):
    """Brax's eval env for ``env_name``, wrapped as Brax's train wraps it."""
    env, wrap_fn = make_env(env_name)
    from brax import envs

    wrap = wrap_fn or envs.training.wrap
    return wrap(env, episode_length=s["episode_length"], action_repeat=s.get("action_repeat", 1))


def brax_eval(env_name: str, s: dict, policy_fn, params, seed: int = 0, num_eval_envs: int = 128) -> dict:
    """Brax's evaluation protocol (``acting.Evaluator``) on ``policy_fn(params) -> policy``."""
    import jax
    from brax.training import acting

    ev = acting.Evaluator(
        eval_env_for(env_name, s),
        policy_fn,
        num_eval_envs=num_eval_envs,
        episode_length=s["episode_length"],
        action_repeat=s.get("action_repeat", 1),
        key=jax.random.PRNGKey(seed),
    )
    m = ev.run_evaluation(params, training_metrics={})
    return {
        "episode_reward": float(m["eval/episode_reward"]),
        "episode_reward_std": float(m["eval/episode_reward_std"]),
        "avg_episode_length": float(m["eval/avg_episode_length"]),
    }


def ours_policy_fn(ppo):
    """Brax-style ``policy_fn(runner) -> policy(obs, key) -> (action, {})`` for our final runner:
    the run's observation statistics, the agent's actor, a sample clipped to [-1, 1]."""
    import jax.numpy as jnp
    from purejaxppo.stages.normalize import apply_obs_stats
    from purejaxppo.step.evaluate import find_obs_stats

    agent = ppo.agent

    def policy_fn(runner):
        stats = find_obs_stats(runner.env_state)
        params = runner.train.params

        def policy(obs, key):
            x = obs if stats is None else apply_obs_stats(stats, obs)
            _, dist_params, _ = agent.act(params, agent.initial_carry(x.shape[0]), x, None)
            return jnp.clip(agent.dist.sample(key, dist_params), -1.0, 1.0), {}

        return policy

    return policy_fn


def env_only(env_name: str, s: dict, cfg, steps: int, seed: int = 0) -> dict:
    """Where the time goes, part 1: each side's ENV alone, ``cfg.num_envs`` envs for ``steps``
    steps with uniform random actions in one compiled scan (compile apart, one timed run each).
    Brax's side is the env as Brax's train wraps it (vmap, EpisodeWrapper, AutoResetWrapper);
    ours the VecEnv our step uses (our auto-reset, episode statistics, observation
    normalisation). The rest of each side's run time is the agent and the update."""
    import jax
    import jax.numpy as jnp
    from purejaxppo.step.environment import make_env as ours_make_env

    n, a_dim = cfg.num_envs, None
    benv = eval_env_for(env_name, s)
    a_dim = benv.action_size
    venv = ours_make_env(cfg)

    def brax_roll(key):
        state = benv.reset(jax.random.split(key, n))

        def body(st, k):
            st = benv.step(st, jax.random.uniform(k, (n, a_dim), minval=-1.0, maxval=1.0))
            return st, st.obs.sum() + st.reward.sum()  # the obs: a constant reward would let XLA drop the physics

        return jax.lax.scan(body, state, jax.random.split(key, steps))[1].sum()

    def ours_roll(key):
        obs, state = venv.reset(key)

        def body(st, k):
            k1, k2 = jax.random.split(k)
            out = venv.step(k2, st, jax.random.uniform(k1, (n, a_dim), minval=-1.0, maxval=1.0))
            return out[1], jnp.sum(out[0]) + jnp.sum(out[2])

        return jax.lax.scan(body, state, jax.random.split(key, steps))[1].sum()

    out = {}
    key = jax.random.PRNGKey(seed)
    for label, fn in (("brax", brax_roll), ("ours", ours_roll)):
        c, comp = compile_timed(jax.jit(fn), key, clear=True)
        dt = timed(c, key).wall_s
        out[label] = {
            "compile_s": round(comp, 2),
            "run_s": round(dt, 3),
            "env_steps": n * steps,
            "steps_per_s": round(n * steps / dt, 1),
        }
        print(
            f"  env alone ({label}, {n} envs x {steps} steps, random actions): compile {comp:.1f} s, run {dt:.2f} s, "
            f"{fmt_k(n * steps / dt)} steps/s",
            flush=True,
        )
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", default=",".join(ROWS), help=f"comma-separated subset of: {', '.join(ROWS)}")
    p.add_argument(
        "--size",
        choices=("cpu", "published"),
        default="cpu",
        help="published: Brax's/Playground's numbers (GPU-sized); cpu: envs and minibatch size / div, "
        "fewer updates (see CPU)",
    )
    p.add_argument("--updates", type=int, default=None, help="override the number of updates (training steps)")
    p.add_argument("--rounds", type=int, default=2, help="timed runs per side (median reported)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument(
        "--profile",
        action="store_true",
        help="also time each side's env alone over the row's steps (where the run's time goes)",
    )
    p.add_argument(
        "--env-only", action="store_true", help="only time each side's env alone over each row's steps (no training)"
    )
    p.add_argument(
        "--host-devices",
        type=int,
        default=1,
        help="force this many host CPU devices (before JAX starts): Brax's train pmaps over all of them, "
        "ours splits the run's envs over them (parallel.split_envs); both sides data-parallel",
    )
    p.add_argument("--json", default=None, help="also write the results to this JSON file")
    args = p.parse_args(argv)
    if args.host_devices > 1:
        from purejaxppo.cli.devices import set_devices

        set_devices(args.host_devices)
    rows = [r.strip() for r in args.rows.split(",") if r.strip()]
    bad = [r for r in rows if r not in ROWS]
    if bad:
        p.error(f"unknown row(s) {bad}; rows: {', '.join(ROWS)}")

    warnings.filterwarnings("ignore", message=".*Brax System, piplines and environments.*")
    import jax
    import numpy as np

    try:
        jax.config.update("jax_enable_compilation_cache", False)  # compile times must be real compiles
    except Exception:  # noqa: BLE001
        pass
    import _brax_shims
    from _common import cpu_seconds, hardware
    from purejaxppo import make_ppo
    from purejaxppo.parallel.sharding import split_envs
    from vs_purejaxrl import warm_up

    shims = _brax_shims.apply()
    from brax.training.agents.ppo import train as brax_ppo
    import brax

    register_brax_sizes()
    hw = hardware()
    print(
        f"Brax {brax.__version__} PPO; jax {jax.__version__} on {hw['device_kind']} ({hw['jax_devices']} device(s)), "
        f"{hw['cpu_count']} CPUs, load {hw.get('loadavg_at_start')}"
    )
    for sh in shims:
        print(f"  shim: {sh}")
    warm_up()

    results = []
    for name in rows:
        row = ROWS[name]
        s = dict(row["published"])
        if args.size == "cpu":
            s = cpu_settings(s, **CPU[name])
        if args.updates:
            step = s["batch_size"] * s["num_minibatches"] * s["unroll_length"] * s.get("action_repeat", 1)
            s["num_timesteps"] = args.updates * step  # with R resets per eval: ceil(updates / R) * R updates
        s["seed"] = args.seed
        n_updates, brax_steps = brax_training_steps(s)
        cfg = ours_config(row["env"], s)
        ours_steps = cfg.num_updates * cfg.batch_size * s.get("action_repeat", 1)
        diffs = config_differences(cfg, s)
        print(
            f"\n[{name}] {row['env']} ({args.size}): {s['num_envs']} envs, batch {s['batch_size']} x "
            f"{s['num_minibatches']} minibatches x unroll {s['unroll_length']}, {s['num_updates_per_batch']} epochs, "
            f"{n_updates} updates = {brax_steps} env steps; ours {cfg.num_envs} envs x {cfg.num_steps} steps, "
            f"{cfg.num_updates} updates = {ours_steps} env steps"
        )
        print(f"  published in: {row['source']}")
        for d in diffs:
            print(f"  difference: {d}")

        if args.env_only:
            results.append(
                {
                    "row": name,
                    "env": row["env"],
                    "size": args.size,
                    "brax_settings": s,
                    "env_alone": env_only(row["env"], s, cfg, cfg.num_steps * cfg.num_updates, seed=args.seed),
                    "loadavg_after": loadavg_now(),
                }
            )
            continue
        env, wrap_fn = make_env(row["env"])
        brax_kwargs = {k: v for k, v in s.items() if k not in ("num_evals",)}
        brax_kwargs.update(num_evals=1, run_evals=False, network_factory=_brax_net_factory(brax_ppo))
        if wrap_fn is not None:
            brax_kwargs["wrap_env_fn"] = wrap_fn
        _brax_shims.STATE["reuse_key"] = (name, json.dumps(s, sort_keys=True, default=str))

        key = jax.random.PRNGKey(args.seed)
        ppo = make_ppo(cfg) if args.host_devices == 1 else split_envs(cfg, args.host_devices)
        ours_compiled, ours_compile = compile_timed(jax.jit(ppo.train), key, clear=True)
        print(f"  compiled ours        {ours_compile:.2f} s", flush=True)

        rec = {
            "ours": {"times": [], "cores": []},
            "brax": {"times": [], "cores": [], "train_wall": None, "compile": None},
        }
        ours_out = brax_out = None
        for r in range(args.rounds):
            t = timed(ours_compiled, key)  # interleaved by hand: Brax's side is its train(), then replays
            dt = t.wall_s
            rec["ours"]["times"].append(dt)
            rec["ours"]["cores"].append(t.cores)
            if r == 0:
                ours_out = t.out
            del t
            print(
                f"  round {r + 1} ours   run {dt:.2f} s  {fmt_k(ours_steps / dt)} steps/s  "
                f"{rec['ours']['cores'][-1]:.2f} cores",
                flush=True,
            )

            if r == 0:  # Brax's train() once; later rounds replay its compiled training epoch(s)
                _brax_shims.STATE["epochs"], _brax_shims.STATE["saved"] = [], []
                c0, t0 = cpu_seconds(), time.perf_counter()
                brax_out = brax_ppo.train(environment=env, **brax_kwargs)
                wall = time.perf_counter() - t0
                epochs = list(_brax_shims.STATE["epochs"])
                run_s = sum(e["run_s"] for e in epochs)
                rec["brax"]["compile"] = sum(e["compile_s"] for e in epochs if e["compile_s"] is not None)
                rec["brax"]["train_wall"] = wall
                rec["brax"]["cores"].append((cpu_seconds() - c0) / wall)
                print(
                    f"  round 1 brax   run {run_s:.2f} s  {fmt_k(brax_steps / run_s)} steps/s  (train() {wall:.2f} s "
                    f"incl. {rec['brax']['compile']:.2f} s epoch compile; {len(epochs)} epoch call(s))",
                    flush=True,
                )
            else:
                c0 = cpu_seconds()
                run_s = _brax_shims.replay()
                rec["brax"]["cores"].append((cpu_seconds() - c0) / run_s)
                print(
                    f"  round {r + 1} brax   run {run_s:.2f} s  {fmt_k(brax_steps / run_s)} steps/s  (replay)  "
                    f"{rec['brax']['cores'][-1]:.2f} cores",
                    flush=True,
                )
            rec["brax"]["times"].append(run_s)

        # --- final evaluation, Brax's protocol, both sides ---------------------------------------
        make_policy, brax_params, _ = brax_out
        t0 = time.perf_counter()
        ev_brax = brax_eval(row["env"], s, make_policy, brax_params, seed=args.seed)
        ev_ours = brax_eval(row["env"], s, ours_policy_fn(ppo), ours_out[0], seed=args.seed)
        print(
            f"  eval (Brax's Evaluator, 128 envs): brax {ev_brax['episode_reward']:.1f}  ours "
            f"{ev_ours['episode_reward']:.1f}  ({time.perf_counter() - t0:.1f} s)",
            flush=True,
        )
        prof = None
        if args.profile:
            prof = env_only(row["env"], s, cfg, cfg.num_steps * cfg.num_updates, seed=args.seed)
            for label, run_s in (
                ("brax", statistics.median(rec["brax"]["times"])),
                ("ours", statistics.median(rec["ours"]["times"])),
            ):
                prof[label]["share_of_run"] = round(prof[label]["run_s"] / run_s, 3)
                prof[label]["rest_of_run_s"] = round(run_s - prof[label]["run_s"], 3)
                print(
                    f"  {label}: env {prof[label]['run_s']:.2f} s of its {run_s:.2f} s run "
                    f"({100 * prof[label]['share_of_run']:.0f}%); agent + update the other "
                    f"{prof[label]['rest_of_run_s']:.2f} s",
                    flush=True,
                )
        train_ret = np.asarray(ours_out[1]["episode_return"], np.float64)
        k = max(1, int(round(0.1 * train_ret.size)))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            ours_train_final = float(np.nanmean(train_ret[-k:]))

        o_med = statistics.median(rec["ours"]["times"])
        b_med = statistics.median(rec["brax"]["times"])
        o_sps, b_sps = ours_steps / o_med, brax_steps / b_med
        out_row = {
            "row": name,
            "env": row["env"],
            "size": args.size,
            "host_devices": args.host_devices,
            "published_in": row["source"],
            "brax_settings": {k: v for k, v in s.items()},
            "ours_config": cfg.to_dict(),
            "config_differences": diffs,
            "notes": NOTES_ALL,
            "bootstraps_truncation": {"ours": True, "brax": False},
            "results": {
                "brax": {
                    "compile_s": round(rec["brax"]["compile"], 3),
                    "run_s": [round(t, 3) for t in rec["brax"]["times"]],
                    "run_s_median": round(b_med, 3),
                    "train_call_s_round1": round(rec["brax"]["train_wall"], 3),
                    "env_steps": brax_steps,
                    "steps_per_s": round(b_sps, 1),
                    "cores_used": round(statistics.median(rec["brax"]["cores"]), 2),
                    "eval": ev_brax,
                },
                "ours": {
                    "compile_s": round(ours_compile, 3),
                    "run_s": [round(t, 3) for t in rec["ours"]["times"]],
                    "run_s_median": round(o_med, 3),
                    "env_steps": ours_steps,
                    "steps_per_s": round(o_sps, 1),
                    "cores_used": round(statistics.median(rec["ours"]["cores"]), 2),
                    "eval": ev_ours,
                    "train_return_last10pct": ours_train_final,
                    "speed_ratio": round(o_sps / b_sps, 3),
                    "compile_ratio": round(rec["brax"]["compile"] / ours_compile, 3),
                },
            },
            "profile_env_alone": prof,
            "loadavg_after": loadavg_now(),
        }
        results.append(out_row)
        del ours_out, brax_out

    if args.env_only:
        if args.json:
            with open(args.json, "w") as f:
                json.dump(
                    {
                        "rows": results,
                        "hardware": hw,
                        "jax": jax.__version__,
                        "brax": brax.__version__,
                        "args": vars(args),
                    },
                    f,
                    indent=2,
                    default=str,
                )
            print(f"wrote {args.json}")
        return results
    head = (
        f"{'row':<19}{'impl':<6}{'compile s':>10}{'run s':>9}{'steps/s':>10}{'eval ret':>10}{'(std)':>8}"
        f"{'speed x':>9}{'compile x':>11}"
    )
    print("\n" + head + "\n" + "-" * len(head))
    for row in results:
        for label in ("brax", "ours"):
            v = row["results"][label]
            ratio = f"{v['speed_ratio']:.2f}x" if "speed_ratio" in v else ""
            cratio = f"{v['compile_ratio']:.2f}x" if "compile_ratio" in v else ""
            print(
                f"{row['row'] if label == 'brax' else '':<19}{label:<6}{v['compile_s']:>10.2f}{v['run_s_median']:>9.2f}"
                f"{fmt_k(v['steps_per_s']):>10}{v['eval']['episode_reward']:>10.1f}"
                f"{v['eval']['episode_reward_std']:>8.1f}{ratio:>9}{cratio:>11}"
            )
    print(
        "run s: the training program alone (median of rounds); eval ret: Brax's Evaluator (128 envs, one "
        "episode each, sampled actions)\nspeed x = ours / Brax env-steps/s; compile x = Brax / ours compile "
        "seconds; truncations: ours bootstraps, Brax does not"
    )
    if args.json:
        out = {
            "rows": results,
            "hardware": hw,
            "jax": jax.__version__,
            "brax": brax.__version__,
            "shims": shims,
            "args": vars(args),
        }
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2, default=str)
        print(f"wrote {args.json}")
    return results


def _brax_net_factory(brax_ppo):
    """Brax's default PPO networks, named explicitly (the sizes ours is given)."""
    import functools

    import flax.linen as nn
    from brax.training.agents.ppo import networks as ppo_networks

    return functools.partial(
        ppo_networks.make_ppo_networks,
        policy_hidden_layer_sizes=BRAX_DEFAULT_NET["policy_hidden_layer_sizes"],
        value_hidden_layer_sizes=BRAX_DEFAULT_NET["value_hidden_layer_sizes"],
        activation=getattr(nn, BRAX_DEFAULT_NET["activation"]),
    )


if __name__ == "__main__":
    main()
