"""Shared helpers of the benchmarks: the timing loop (compile apart, interleaved rounds, wall
seconds and cores used), number formats, hardware description and SB3 configuration."""

from __future__ import annotations

import dataclasses
import os
import platform
import sys
import time
from typing import Any, Callable, NamedTuple, Optional


def cpu_seconds() -> float:
    """This process's user + system CPU seconds (all threads): over a run's wall seconds, the
    cores it used."""
    t = os.times()
    return t.user + t.system


def fmt_k(x) -> str:
    """Steps per second as the tables print them: ``162.4k``, or ``950`` under a thousand."""
    return f"{x / 1e3:.1f}k" if x >= 1e3 else f"{x:.0f}"


def loadavg_now() -> list:
    """The 1, 5 and 15 minute load averages, rounded (the JSON outputs' ``loadavg_after``)."""
    return [round(x, 2) for x in os.getloadavg()]


class Timed(NamedTuple):
    """One timed call: its output (ready), wall seconds, and cores used (CPU s / wall s)."""

    out: Any
    wall_s: float
    cores: float


def timed(fn: Callable, *args) -> Timed:
    """Call ``fn(*args)`` and wait for its result (``jax.block_until_ready``): the wall seconds and
    the cores this process used meanwhile (:func:`cpu_seconds` over wall seconds)."""
    import jax

    c0, t0 = cpu_seconds(), time.perf_counter()
    out = jax.block_until_ready(fn(*args))
    dt = time.perf_counter() - t0
    return Timed(out, dt, (cpu_seconds() - c0) / dt)


def compile_timed(jitted, *args, clear: bool = False) -> tuple:
    """``(compiled, seconds)``: ``jitted.lower(*args).compile()`` timed (tracing, lowering and
    XLA). ``clear``: drop JAX's in-memory caches first, so nothing compiled before is reused."""
    import jax

    if clear:
        jax.clear_caches()
    t0 = time.perf_counter()
    compiled = jitted.lower(*args).compile()
    return compiled, time.perf_counter() - t0


@dataclasses.dataclass
class Rounds:
    """One side's timings over the rounds: wall seconds and cores used per round."""

    times: list = dataclasses.field(default_factory=list)
    cores: list = dataclasses.field(default_factory=list)

    def add(self, t: Timed) -> None:
        self.times.append(t.wall_s)
        self.cores.append(t.cores)


def interleaved_rounds(
    sides: dict, rounds: int, each: Optional[Callable] = None, guard: Optional[Callable] = None
) -> dict:
    """``{label: Rounds}``: ``rounds`` rounds, each calling every side once in order (``sides``:
    ``{label: thunk}``), so that all sides see the same machine state. ``each(round, label, timed)``
    sees every call (to print it, keep round 0's output); ``guard(round, label)``, a context
    manager, wraps each call (e.g. a hang warning)."""
    import contextlib

    rec = {label: Rounds() for label in sides}
    for r in range(rounds):
        for label, thunk in sides.items():
            with guard(r, label) if guard else contextlib.nullcontext():
                t = timed(thunk)
            rec[label].add(t)
            if each:
                each(r, label, t)
            del t
    return rec


def hardware() -> dict:
    """CPU model, core count, load average and library versions, for the JSON outputs."""
    model = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    import jax

    info = {
        "cpu": model,
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
        "python": sys.version.split()[0],
        "jax": jax.__version__,
        "backend": jax.default_backend(),
        "jax_devices": len(jax.devices()),
        "device_kind": jax.devices()[0].device_kind,
    }
    try:
        info["loadavg_at_start"] = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        pass
    return info


def set_torch_threads(n: int) -> None:
    """Torch intra-op threads for SB3. 1 is the default: for 64x64 MLPs on a busy small CPU,
    extra threads mostly wait on each other (here a 2-thread SB3 run under load had not finished 5e5
    steps after 12 CPU-minutes; unloaded SB3 needs about 2 minutes)."""
    import torch

    torch.set_num_threads(n)


def sb3_ppo_kwargs(total_timesteps: int, vf_coef: float) -> dict:
    """SB3 PPO arguments matching purejaxppo's defaults (docs/conventions.md, "Defaults").

    SB3's value loss is ``mse`` without purejaxppo's 1/2, so ``vf_coef=0.25`` there gives the
    same gradient as purejaxppo's ``vf_coef=0.5`` with ``0.5*mse``. Value clipping 0.2 as
    purejaxppo's ``clip_value=True``. Adam eps 1e-5 is SB3's PPO default."""
    import torch

    return dict(
        n_steps=128,
        batch_size=128,
        n_epochs=4,
        learning_rate=lambda f: 2.5e-4 * f,
        clip_range=0.2,
        clip_range_vf=0.2,
        ent_coef=0.01,
        vf_coef=vf_coef,
        gae_lambda=0.95,
        gamma=0.99,
        max_grad_norm=0.5,
        normalize_advantage=True,
        policy_kwargs=dict(net_arch=dict(pi=[64, 64], vf=[64, 64]), activation_fn=torch.nn.Tanh, ortho_init=True),
        device="cpu",
        verbose=0,
    )


def final_window_return(episode_returns, episode_end_steps, total_steps: int, frac: float = 0.05) -> float:
    """Mean return of the episodes that ENDED in the last ``frac`` of the env steps."""
    import numpy as np

    r = np.asarray(episode_returns, float)
    t = np.asarray(episode_end_steps, float)
    sel = r[t > (1 - frac) * total_steps]
    return float(sel.mean()) if sel.size else float("nan")


def rollout_targets(ppo):
    """``(runner, key) -> ((env_state, obs, carry, done), batch [H, E], resets [H, E])``: the
    training step's own first two phases (``purejaxppo.step.phases.collect_rollout`` and
    ``compute_targets``) at the runner's params, on one device, for benchmarks that time them
    apart from the update (the rollout is not written again here)."""
    from purejaxppo.step.device_split import DeviceSplit
    from purejaxppo.step.phases import StepParts, collect_rollout, compute_targets
    from purejaxppo.step.train import ppo_loss_fn

    cfg = ppo.config
    parts = StepParts(cfg, ppo.venv, ppo.agent, ppo_loss_fn, DeviceSplit(None, 1, cfg.num_envs, cfg.num_envs))

    def run(runner, key):
        params = runner.train.params
        ends, traj = collect_rollout(parts, params, runner, key)
        batch, resets, _, _ = compute_targets(parts, params, traj, runner.reward_scale, cfg)
        return ends, batch, resets

    return run


def rollouts_alone(ppo, runner, num_iters: int):
    """``num_iters`` rollouts + targets (:func:`rollout_targets`) in one ``lax.scan`` from
    ``runner``, params fixed (no update): ``(runner, [num_iters] sums of advantages and returns)``."""
    import jax

    phases = rollout_targets(ppo)

    def body(r, _):
        rng, key = jax.random.split(r.rng)
        (env_state, obs, carry, done), batch, _ = phases(r, key)
        return (
            r._replace(env_state=env_state, obs=obs, carry=carry, done=done, rng=rng),
            batch.advantage.sum() + batch.ret.sum(),
        )

    return jax.lax.scan(body, runner, None, length=num_iters)
