"""How good can any policy be on gymnax's Pendulum-v1? A dynamic-programming controller, scored on the env.

The published gymnax-blines figure for Pendulum-v1 is -130 (one training seed, 164 test episodes).
This script estimates the best mean return ANY policy can reach on gymnax's start distribution
(theta ~ U[-pi, pi], theta_dot ~ U[-1, 1]; 200 steps), so that figure and ours can be placed
against the optimum rather than only against each other.

Method (no learning anywhere):
1. Finite-horizon value iteration on a grid over (theta, theta_dot): V_200 = 0,
   V_t(s) = max_u r(s, u) + V_{t+1}(f(s, u)), with the env's own reward and dynamics written out
   below, bilinear interpolation (periodic in theta), ``--actions`` torques in [-2, 2].
2. The greedy controller of that table, u_t(s) = argmax_u r(s, u) + V_{t+1}(f(s, u)) over a finer
   torque grid, is run on ``gymnax.make("Pendulum-v1")`` itself (its ``step``, not the formulas of 1)
   from ``--episodes`` starts drawn by the env's own ``reset``.

The controller's mean return is an ACHIEVABLE return, so it is a lower bound on the optimum; the
grid's own value at the starts is an estimate of the optimum. Both are printed for several grid
sizes: where they agree and stop moving as the grid is refined, that figure is the optimum up to the
differences printed. The spread of 164-episode means (the reference's protocol) around it is printed
too, from the per-episode returns.

    python experiments/pendulum_optimum/optimum.py --grids 128,256,512 --episodes 10000
"""

from __future__ import annotations

import argparse
import json
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

G, L, M, DT, MAX_SPEED, MAX_TORQUE, STEPS = 10.0, 1.0, 1.0, 0.05, 8.0, 2.0, 200


def angle_normalize(x):
    return ((x + jnp.pi) % (2 * jnp.pi)) - jnp.pi


def reward(th, thdot, u):
    return -(angle_normalize(th) ** 2 + 0.1 * thdot**2 + 0.001 * u**2)


def dynamics(th, thdot, u):
    """gymnax Pendulum-v1's step, written out: semi-implicit Euler, speed clipped to +-8."""
    thdot = jnp.clip(thdot + (3 * G / (2 * L) * jnp.sin(th) + 3.0 / (M * L**2) * u) * DT, -MAX_SPEED, MAX_SPEED)
    return th + thdot * DT, thdot


def interpolate(v, th, thdot):
    """Bilinear interpolation of ``v [n_th, n_v]`` (theta periodic over [-pi, pi), theta_dot on
    [-8, 8] with both ends on the grid) at arrays ``th, thdot`` of one shape."""
    n_th, n_v = v.shape
    x = (angle_normalize(th) + jnp.pi) / (2 * jnp.pi) * n_th
    i0 = jnp.floor(x)
    fx = x - i0
    i0 = i0.astype(jnp.int32) % n_th
    i1 = (i0 + 1) % n_th
    y = jnp.clip((thdot + MAX_SPEED) / (2 * MAX_SPEED) * (n_v - 1), 0, n_v - 1 - 1e-6)
    j0 = jnp.floor(y)
    fy = y - j0
    j0 = j0.astype(jnp.int32)
    j1 = j0 + 1
    return (1 - fx) * (1 - fy) * v[i0, j0] + fx * (1 - fy) * v[i1, j0] + (1 - fx) * fy * v[i0, j1] + fx * fy * v[i1, j1]


def q_values(v_next, th, thdot, torques):
    """``r(s, u) + V_{t+1}(f(s, u))`` for every torque: ``[..., U]``."""
    th, thdot = th[..., None], thdot[..., None]
    nth, nthdot = dynamics(th, thdot, torques)
    return reward(th, thdot, torques) + interpolate(v_next, nth, nthdot)


def value_iteration(n_th: int, n_v: int, torques: jax.Array) -> jax.Array:
    """``V [STEPS + 1, n_th, n_v]``: V[t] is the value with STEPS - t steps to go on the grid."""
    th = -jnp.pi + 2 * jnp.pi * jnp.arange(n_th) / n_th
    thdot = jnp.linspace(-MAX_SPEED, MAX_SPEED, n_v)
    th, thdot = jnp.meshgrid(th, thdot, indexing="ij")

    def backup(v_next, _):
        v = q_values(v_next, th, thdot, torques).max(-1)
        return v, v

    _, vs = jax.lax.scan(backup, jnp.zeros((n_th, n_v)), None, length=STEPS)
    return jnp.concatenate([vs[::-1], jnp.zeros((1, n_th, n_v))])  # vs[k] has k + 1 steps to go


def run_controller(values: jax.Array, torques: jax.Array, keys: jax.Array):
    """Greedy controller of ``values`` on gymnax's Pendulum-v1, one episode per key.
    Returns (returns [E], grid value at each start [E])."""
    import gymnax

    env, params = gymnax.make("Pendulum-v1")

    def episode(key):
        reset_key, step_key = jax.random.split(key)
        _, state = env.reset(reset_key, params)
        v0 = interpolate(values[0], state.theta, state.theta_dot)

        def step(carry, t):
            state, total = carry
            q = q_values(values[t + 1], state.theta, state.theta_dot, torques)
            u = torques[jnp.argmax(q)]
            _, state, r, done, _ = env.step_env(step_key, state, u[None], params)
            return (state, total + r), done

        (_, total), _ = jax.lax.scan(step, (state, jnp.float32(0)), jnp.arange(STEPS))
        return total, v0

    return jax.jit(jax.vmap(episode))(keys)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grids", default="128,256,512", help="theta cells per grid (theta_dot gets one more point)")
    ap.add_argument("--actions", type=int, default=41, help="torques in value iteration")
    ap.add_argument("--control-actions", type=int, default=161, help="torques the controller chooses from")
    ap.add_argument("--episodes", type=int, default=10000)
    ap.add_argument("--protocol-episodes", type=int, default=164, help="the reference's test episodes per seed")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "optimum.json"))
    args = ap.parse_args()

    keys = jax.random.split(jax.random.PRNGKey(args.seed), args.episodes)
    vi_torques = jnp.linspace(-MAX_TORQUE, MAX_TORQUE, args.actions)
    control_torques = jnp.linspace(-MAX_TORQUE, MAX_TORQUE, args.control_actions)
    rng = np.random.default_rng(args.seed)
    rows = []
    print(
        f"{args.episodes} episodes from gymnax's reset; {args.actions} torques in value iteration, "
        f"{args.control_actions} in the controller"
    )
    print(
        "| grid (theta x theta_dot) | controller mean return on gymnax [95% CI] | grid value at the starts | "
        f"P(mean of {args.protocol_episodes} episodes >= -130) | 5-95% of {args.protocol_episodes}-episode means | s |"
    )
    print("|---|---|---|---|---|---|")
    for n in (int(g) for g in args.grids.split(",")):
        t = time.perf_counter()
        values = jax.block_until_ready(jax.jit(value_iteration, static_argnums=(0, 1))(n, n + 1, vi_torques))
        returns, v0 = (np.asarray(x, np.float64) for x in run_controller(values, control_torques, keys))
        wall = time.perf_counter() - t
        mean, se = returns.mean(), returns.std(ddof=1) / np.sqrt(len(returns))
        batches = rng.choice(returns, size=(20000, args.protocol_episodes)).mean(1)
        row = dict(
            grid=[n, n + 1],
            episodes=len(returns),
            mean=mean,
            ci95=[mean - 1.96 * se, mean + 1.96 * se],
            std=returns.std(ddof=1),
            grid_value_mean=v0.mean(),
            p_protocol_mean_ge_minus130=float((batches >= -130).mean()),
            protocol_mean_5_95=np.percentile(batches, [5, 95]).tolist(),
            min=returns.min(),
            median=float(np.median(returns)),
            wall_s=wall,
        )
        rows.append(row)
        print(
            f"| {n} x {n + 1} | {mean:.1f} [{row['ci95'][0]:.1f}, {row['ci95'][1]:.1f}] | {v0.mean():.1f} | "
            f"{row['p_protocol_mean_ge_minus130']:.3f} | {row['protocol_mean_5_95'][0]:.1f} .. "
            f"{row['protocol_mean_5_95'][1]:.1f} | {wall:.0f} |",
            flush=True,
        )
    with open(args.json, "w") as f:
        json.dump(dict(args=vars(args), rows=rows), f, indent=1, default=float)


if __name__ == "__main__":
    main()
