"""Evaluation during an RLHF run: greedy responses to a fixed prompt set, and sample generations.

:class:`RLHFEvaluator` meets :class:`~purejaxppo.run.protocol.Evaluator`: every ``every``
iterations each run answers the same ``batch`` prompts greedily (keys apart from training's,
so the training numbers do not change); ``metrics.csv`` gets ``eval_score`` and
``eval_<diagnostic>`` columns (NaN at the other iterations), and ``samples.txt`` in the run
folder gets a few of run 0's prompts and answers (decoded text for a text task).

``samples.txt`` holds one block per iteration it shows, in order, each under a
``# iteration N, run 0, greedy`` line: every evaluation's, and the final iteration's
(:func:`final_samples`, also without an evaluation there). A block is written whole (a
signal waits for it), and an evaluation redone after a resume replaces the blocks from its
iteration on, so the file never shows an iteration twice.
"""

from __future__ import annotations

import json
import os
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from purejaxppo.lm.models.sampling import sample_response
from purejaxppo.lm.ppo.token_ppo import policy_params
from purejaxppo.run.compile_once import signature
from purejaxppo.run.guards import interrupts_deferred
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
            write_samples(self.samples_path, done, samples)
        return stats

    def _sample(self, prompt, valid, response) -> str:
        """A built-in task's one line ``prompt  ->  response``; a text task's decoded text as two
        JSON strings (a prompt or response may hold newlines)."""
        if not hasattr(self.task, "decode_prompt"):
            return f"{self.task.decode(prompt)}  ->  {self.task.decode(response)}"
        text = lambda s: json.dumps(s, ensure_ascii=False)  # noqa: E731
        return f"prompt: {text(self.task.decode_prompt(prompt, valid))}\nresponse: {text(self.task.decode(response))}"


def _header(update: int) -> str:
    return f"# iteration {update}, run 0, greedy"


def shown_iterations(path: str) -> list:
    """The iterations ``samples.txt`` shows, in order ([] without the file)."""
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [int(line.split(",")[0].split()[-1]) for line in f if line.startswith("# iteration ")]


def write_samples(path: str, update: int, samples: list) -> None:
    """``samples`` as the block of iteration ``update``, after the blocks of earlier iterations
    (later ones, from a session a resume went back over, are dropped); atomic."""
    kept = []
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.startswith("# iteration ") and int(line.split(",")[0].split()[-1]) >= update:
                    break
                kept.append(line)
    tmp = path + ".tmp"
    with interrupts_deferred():  # whole or not at all
        with open(tmp, "w", encoding="utf-8") as f:
            f.write("".join(kept) + "\n".join([_header(update)] + samples) + "\n")
        os.replace(tmp, path)


def final_samples(path: str, update: int, evaluator: RLHFEvaluator, runner, group) -> bool:
    """Write the final iteration's block (run 0's greedy answers with ``runner``'s policy, the
    state after ``update`` iterations) unless ``samples.txt`` shows it already; True when it
    was written. Every process calls it (the state is gathered to host arrays, process 0
    evaluates and writes)."""
    if group.share(lambda: update in shown_iterations(path)):
        return False
    params = group.gather(policy_params(runner))
    if group.writer:
        before = getattr(evaluator.task, "reward_error", lambda: None)()
        _, samples = evaluator.evaluate(params)
        if before is None:  # a text reward that failed on these answers
            getattr(evaluator.task, "check_reward", lambda _: None)(before)
        write_samples(path, update, samples)
    return True
