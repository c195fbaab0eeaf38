"""The compiled functions of one training setup over the runs axis ``R``.

:class:`Program` holds the per-run ``init`` and ``n``-update chunk (``lax.scan`` of the step)
of one PPO, vmapped over runs and sharded over devices by ``sharding.shard_runs``
(``split="seeds"``), or with every run's envs split over devices (``split="envs"``,
``sharding.split_envs``; runs vmapped on top). A config is either bound into the functions
(one config, broadcast to every run) or passed stacked to ``[R]`` (a sweep).
With ``executables=FOLDER`` (the CLI's compile cache) the compiled ``init`` and chunks are
kept whole on disk (:mod:`purejaxppo.run.executable_cache`), so a repeated run skips tracing.
"""

from __future__ import annotations

from typing import Optional

from purejaxppo.run import executable_cache
from purejaxppo.run.chunked_program import ChunkedProgram
from purejaxppo.run.compile_once import signature
from purejaxppo.run.guards import tree_finite
from purejaxppo.parallel import sharding
from purejaxppo.config import ConfigError, PPOConfig
from purejaxppo.step.train import PPO, env_steps_after, make_ppo


# what to try after a NaN stop of a control run (plain runs, sweeps and PBT share the flags)
NAN_HINT = "Lower the learning rate (--lr) or --max-grad-norm, or enable --normalize-obs / --normalize-reward"


def kind_name(members) -> str:
    """The kind name a control run's record takes: a sweep when it has members (also how a
    record from before kinds were recorded is read, :mod:`purejaxppo.programs.run_kind`)."""
    return "sweep" if members else "run"


class Program(ChunkedProgram):
    """The jitted per-run functions of one setup over the runs axis: the
    :class:`~purejaxppo.run.protocol.RunProgram` of plain runs and sweeps. It owns their
    compile cache: pass the same Program to several ``train_chunked``/``resume_run`` calls
    (same config and devices) and each chunk length compiles once.

    ``split="seeds"``: runs sharded over ``num_devices``; ``split="envs"``: every run's envs
    split over ``num_devices`` (``sharding.split_envs``), runs vmapped on top. Its own
    ``compile``/``chunk`` (functions keyed by stacked configs too, and the executable cache);
    the NaN stop and the training state are :class:`ChunkedProgram`'s."""

    def __init__(
        self,
        config: PPOConfig,
        *,
        ppo: Optional[PPO] = None,
        num_devices: int = 1,
        split: str = "seeds",
        executables: Optional[str] = None,
    ):
        if split not in ("seeds", "envs"):
            raise ConfigError(f"split={split!r} must be 'seeds' (runs over devices) or 'envs' (each run's envs)")
        # only a program built here from the config can be keyed without tracing it
        self.executables = (
            executable_cache.for_program(executables, config, num_devices=num_devices, split=split)
            if ppo is None
            else None
        )
        if ppo is None:
            ppo = sharding.split_envs(config, num_devices) if split == "envs" else make_ppo(config)
        self.config, self.ppo, self.num_devices, self.split = config, ppo, num_devices, split
        self.shard = num_devices if split == "seeds" else 1
        self.settings = None
        self.headline = ("episode_return", "return")
        self.nan_hint = NAN_HINT
        super().__init__()
        self._fns, self._loaded = {}, {}

    def kind_for(self, members) -> str:
        return kind_name(members)

    def _fn(self, n: Optional[int], stacked: bool):
        if (n, stacked) not in self._fns:
            ppo, cfg = self.ppo, self.config
            if n is None:
                one = ppo.init if stacked else (lambda k: ppo.init(k, cfg))
            else:

                def one(r, c=cfg):
                    out = ppo.run(r, c, n)
                    return out, tree_finite(out[0].train)  # extra output: does not change the numbers

            self._fns[n, stacked] = sharding.shard_runs(one, self.shard)
        return self._fns[n, stacked]

    def place(self, *args):
        return self._fn(None, len(args) > 1).place(*args) if self.shard > 1 else args

    def init(self, keys, configs=None):
        """``keys [R]`` (and stacked ``configs [R]``, placed by :meth:`place`) -> runner ``[R, ...]``."""
        args = (keys,) if configs is None else (keys, configs)
        fn = self._fn(None, configs is not None)
        if self.executables is None:
            return fn(*args)
        args = fn.place(*args)
        return self.executables.get(("init", configs is not None), fn.jitted, args)(*args)

    def compile(self, n: int, runner, configs=None) -> float:
        """Compile the ``n``-update chunk for these inputs (once); returns the seconds it took."""
        args = self.chunk_args(runner, configs)
        sig = (n, signature(args))  # weak types and committed-ness compile separately too
        fn = self._fn(n, configs is not None)

        def compile_it():
            if self.executables is None:
                fn.lower(*args).compile()  # the call in chunk() reuses it
            else:
                self._loaded[sig] = self.executables.get(("chunk", n, configs is not None), fn.jitted, fn.place(*args))

        return self._once(sig, compile_it)

    def chunk(self, n: int, runner, configs=None):
        """``n`` updates of every run -> ``((runner, metrics {name: [R, n]}), finite [R])``."""
        args = self.chunk_args(runner, configs)
        fn = self._fn(n, configs is not None)
        if self._loaded:
            compiled = self._loaded.get((n, signature(args)))
            if compiled is not None:
                return compiled(*fn.place(*args))
        return fn(*args)

    def counters(self, first_update: int, n: int) -> dict:
        return {"env_steps": env_steps_after(first_update, n, self.config.batch_size)}
