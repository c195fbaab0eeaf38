"""Token-level PPO as a run kind (``"rlhf"``): the :class:`~purejaxppo.run.protocol.RunProgram`
the chunk loop drives, so an RLHF run gets the run folder, metrics.csv, checkpoints with exact
resume, the NaN stop, signals and sinks that control runs have.

One update of the loop is one PPO iteration (``batch_size`` prompts); runs ``R`` are seeds of
one setup (:class:`~purejaxppo.programs.rlhf_settings.RLHFSettings`), all starting from the
same supervised (SFT) model, which is also their reference.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from purejaxppo.lm.ppo.token_config import TokenPPOConfig
from purejaxppo.lm.ppo.data_parallel import data_parallel
from purejaxppo.lm.rewards.python_reward import TextReward
from purejaxppo.lm.tasks.text_task import BoundReward
from purejaxppo.lm.ppo.token_ppo import make_token_ppo
from purejaxppo.programs.rlhf_env import env_build
from purejaxppo.programs.rlhf_settings import RLHFSettings
from purejaxppo.run import processes
from purejaxppo.run.chunked_program import ChunkedProgram
from purejaxppo.run.guards import tree_finite

RUNS_AXIS = "runs"


def task_config(config: TokenPPOConfig, task) -> TokenPPOConfig:
    """``config`` with the task's response budget, stop ids and pad id."""
    return config.replace(max_new_tokens=task.max_new, stop_ids=tuple(task.stop_ids), pad_id=task.pad_id)


def on_every_process(tree, num_devices: int):
    """A tree every process computed alike (the same keys through the same program) as global
    arrays replicated over the run's mesh, the layout the chunks take across processes."""
    from jax.sharding import NamedSharding, PartitionSpec

    from purejaxppo.lm.ppo.data_parallel import prompt_mesh

    sharding = NamedSharding(prompt_mesh(num_devices), PartitionSpec())

    def one(x):
        host = np.asarray(x)
        return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])

    return jax.tree.map(one, tree)


def sum_counts(every: list) -> dict:
    """Additive counts (``{key: float}``, one dict per process) summed key by key."""
    out: dict = {}
    for counts in every:
        for k, v in counts.items():
            out[k] = out.get(k, 0.0) + v
    return out


class RLHFProgram(ChunkedProgram):
    """The compiled ``init`` and ``n``-iteration chunks of token-level PPO over ``R`` seeds.

    ``sft_params``: the model every run starts from and is scored against (policy, critic and
    reference); on a resume the checkpoint replaces them, so a template of the right shapes
    will do (:meth:`template`). ``num_devices > 1`` splits each iteration's prompts over devices
    (:func:`purejaxppo.lm.ppo.data_parallel.data_parallel`)."""

    # evaluation columns: NaN at the iterations without an evaluation; a reward's mean where it scored nothing
    nan_by_design = ("eval_", "reward_")

    def __init__(self, config: TokenPPOConfig, settings: RLHFSettings, lm, sft_params, *, num_devices: int = 1):
        task = settings.make_task()
        self.task, self.lm, self.sft_params = task, lm, sft_params
        self.config, self.settings, self.num_devices = task_config(config, task), settings, num_devices
        self.split, self.shard = "prompts", 1
        self.headline = ("score", "score")  # the task's score of the sampled responses
        self.nan_hint = "Lower --actor-lr / --critic-lr, or --beta (and --kl-target) if the KL term blew up"
        bound = getattr(task, "reward", None)
        critic, self.critic_params = None, None
        if isinstance(bound, BoundReward):  # a reward model: its params ride in the state, not in the program
            reward, self.reward_params = bound.fn, bound.params
            if self.config.critic == "separate" and bound.lm is not None:
                # the critic starts from the reward model (InstructGPT's choice): its score head is the value head
                critic, self.critic_params = bound.lm, bound.params
        else:  # a function: no reward-model params; a text task's takes the row ids (its columns)
            reward = getattr(task, "reward_fn", None) or (lambda _, *batch: task.score(*batch))
            self.reward_params = None
        # a text reward runs on the host (jax.pure_callback): its time is its own phase, reward_fn_s
        # (beside a reward model, the Python rewards' part: MixedReward.text)
        self.text_reward = bound if isinstance(bound, TextReward) else getattr(bound, "text", None)
        # runs_axis: the seeds agree on one response width per iteration (length_buckets), so a
        # chunk runs one branch of the width switch, not all of them
        build = functools.partial(
            make_token_ppo,
            self.config,
            lm,
            reward,
            prompts=getattr(task, "row_prompts", task.prompts),  # with each prompt's row id, where the task has rows
            critic=critic,
            diagnostics=task.diagnostics,
            runs_axis=RUNS_AXIS,
        )
        if settings.env:  # a multi-turn environment: its episodes are the samples, the state the same
            build = env_build(self.config, lm, task, critic)
        self.tp = data_parallel(build, num_devices)
        super().__init__()
        # the SFT model is an argument, not a constant folded into the program (a GPT-2's weights would be)
        self._init = jax.jit(jax.vmap(lambda k, p, c, r: self.tp.init(k, p, p, c, r), in_axes=(0, None, None, None)))

    def kind_for(self, members) -> str:
        return "rlhf"

    @staticmethod
    def template(settings: RLHFSettings):
        """``(lm, params)`` of the settings' model with zeros of the right shapes (no SFT run)."""
        lm, params = settings.model(jax.random.PRNGKey(0))
        return lm, jax.tree.map(jnp.zeros_like, params)

    def init(self, keys, configs=None):
        state = self._init(keys, self.sft_params, self.critic_params, self.reward_params)
        return on_every_process(state, self.num_devices) if processes.current().many else state

    def build_chunk(self, n: int):
        def one(state):
            state, metrics = self.tp.run(state, n)
            return (state, metrics), tree_finite(state.train)

        return jax.jit(jax.vmap(one, axis_name=RUNS_AXIS))

    def chunk(self, n: int, state, configs=None):
        if self.text_reward is None:
            return super().chunk(n, state, configs)
        reward = self.text_reward
        before = reward.seconds
        reward.take_counts()  # an evaluation's calls since the last chunk are not this chunk's
        # waits for the chunk (its host calls done) before the loop dispatches the next: the time is
        # this chunk's, and the overlap lost is small next to the reward's own host time
        (state, metrics), finite = jax.block_until_ready(super().chunk(n, state, configs))
        runs = jax.tree.leaves(metrics)[0].shape[0]
        seconds, counts = reward.seconds - before, reward.take_counts()
        group = processes.current()
        if group.many:  # each process scored its own rows: the counts of all, the slowest one's time, any failure
            every = group.exchange((seconds, counts, reward.error))
            seconds, counts = max(s for s, _, _ in every), sum_counts([c for _, c, _ in every])
            reward.error = reward.error or next((e for _, _, e in every if e), None)
        # the chunk's host time spread evenly over its iterations (one call per iteration, every seed at once)
        metrics = {**metrics, "reward_fn_s": np.full((runs, n), seconds / n, np.float32)}
        # each reward's mean and the share of completions it scored (reward_<name>_mean, _scored, ...):
        # over the chunk's iterations and seeds together (one value per chunk; --chunk 1 for each iteration's)
        stats = reward.stats_of(counts)
        metrics.update({k: np.full((runs, n), v, np.float32) for k, v in sorted(stats.items())})
        return (state, metrics), finite

    def check_finite(self, metrics, finite, first_update, describe):
        problem = super().check_finite(metrics, finite, first_update, describe)
        # a failed text reward gives NaN scores from its iteration on: name it at the chunk that holds
        # them (the loop may already have run the next chunk, whose failure must not stop this one)
        if problem is not None and self.text_reward is not None and self.text_reward.error:
            self.nan_hint = "Fix the function, then continue the run with python -m purejaxppo rlhf --resume RUN_DIR"
            return self.text_reward.error
        return problem
