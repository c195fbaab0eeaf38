"""Evaluation during an RLHF run: greedy responses to a fixed prompt set, and sample generations.

:class:`RLHFEvaluator` meets :class:`~purejaxppo.run.protocol.Evaluator`: every ``every``
iterations each run answers the same ``batch`` prompts greedily (keys apart from training's,
so the training numbers do not change); ``metrics.csv`` gets ``eval_score`` and
``eval_<diagnostic>`` columns (NaN at the other iterations), and ``samples.txt`` in the run
folder gets a few of run 0's prompts and answers (decoded text for a text task).
"""

from __future__ import annotations

import json
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from purejaxppo.lm.models.sampling import sample_response
from purejaxppo.lm.ppo.token_ppo import policy_params
from purejaxppo.run.compile_once import signature
from purejaxppo.run.periodic_eval import PeriodicEvaluator

EVAL_KEY = 0x5EED  # the evaluation prompts' key: the same prompts at every evaluation and every run
SHOWN = 4  # sample generations written per evaluation


class RLHFEvaluator(PeriodicEvaluator):
    def __init__(self, task, lm, every: int, batch: int, samples_path: Optional[str] = None):
        super().__init__(every)  # the columns: the task's statistics, known at compile
        self.task, self.batch, self.samples_path = task, batch, samples_path
        fixed = getattr(task, "evaluation_prompts", None)  # a text task's own evaluation prompts
        prompt, valid = fixed(batch) if fixed else task.prompts(jax.random.PRNGKey(EVAL_KEY), batch)

        def one(params):
            response, _, mask = sample_response(
                lm,
                params,
                jax.random.PRNGKey(0),
                prompt,
                valid,
                task.max_new,
                jnp.asarray(task.stop_ids),
                task.pad_id,
                top_k=1,
            )  # greedy
            stats = {
                "score": jnp.mean(task.score(prompt, valid, response, mask)),
                **task.diagnostics(prompt, valid, response, mask),
            }
            shown = (prompt[:SHOWN], valid[:SHOWN], jnp.where(mask, response, task.pad_id)[:SHOWN])
            return {f"eval_{k}": v for k, v in stats.items()}, shown

        self._fn = jax.jit(jax.vmap(one))

    def compile(self, keys, runner) -> float:
        params = policy_params(runner)
        self.names = tuple(sorted(jax.eval_shape(self._fn, params)[0]))  # the columns, before any evaluation ran
        return self._once(signature(params), lambda: self._fn.lower(params).compile())

    def evaluate(self, params) -> tuple:
        """``({name: [R]}, samples)``: every run's greedy statistics on the fixed prompts and
        run 0's first answers as ``"prompt  ->  response"`` lines (``params``: the policy's, ``[R, ...]``,
        :func:`~purejaxppo.lm.ppo.token_ppo.policy_params`)."""
        stats, (prompts, valid, responses) = jax.device_get(self._fn(params))
        samples = [self._sample(p, v, r) for p, v, r in zip(prompts[0], valid[0], responses[0])]
        return {k: np.asarray(v, np.float32) for k, v in stats.items()}, samples

    def __call__(self, keys, done: int, runner) -> dict:
        before = getattr(self.task, "reward_error", lambda: None)()
        stats, samples = self.evaluate(policy_params(runner))
        if before is None:  # a text reward that failed on these answers (not a training failure already kept)
            getattr(self.task, "check_reward", lambda _: None)(before)
        if self.samples_path:
            with open(self.samples_path, "a") as f:
                f.write("\n".join([f"# iteration {done}, run 0, greedy"] + samples) + "\n")
        return stats

    def _sample(self, prompt, valid, response) -> str:
        """A built-in task's one line ``prompt  ->  response``; a text task's decoded text as two
        JSON strings (a prompt or response may hold newlines)."""
        if not hasattr(self.task, "decode_prompt"):
            return f"{self.task.decode(prompt)}  ->  {self.task.decode(response)}"
        text = lambda s: json.dumps(s, ensure_ascii=False)  # noqa: E731
        return f"prompt: {text(self.task.decode_prompt(prompt, valid))}\nresponse: {text(self.task.decode(response))}"
